"""What the commands in `tools/` share on the command line: the `--stack`/`--root` arguments, the stack's one
evaluation (tools/lib/evaluation.py) with errors printed as one `error: …` line set, the broker's client, and the
`main` of a command that writes a file from the evaluation (`stack_file_command`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from components.config.pulumi_yaml import StackFileError
from rabbitmq_retry_client.management import INSECURE, TLS_SETTINGS, ManagementClient
from tools.lib.evaluation import Evaluation, EvaluationError, evaluate
from tools.lib.mockrun import ROOT, Registered, close_event_loop

DEV_STACK = "dev"
"""The only stack whose tools fall back to RabbitMQ's guest/guest (the local broker of `make setup`)."""
STACK_ERRORS = (pulumi.RunError, StackFileError, EvaluationError)
"""What evaluating a stack raises for a wrong stack file or config: a command prints it as one `error: …` line set."""


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """`--cacert-file`, `--clientcert-file`, `--clientkey-file`, `--insecure`: the provider's TLS settings under their
    own names (each else its environment variable, else the stack's `rabbitmq:` key; docs/tls.md)."""
    for field, setting in TLS_SETTINGS.items():
        if field == "insecure":
            parser.add_argument(setting.flag, dest=field, action="store_true", default=None,
                                help=f"skip verifying the broker's certificate (else {setting.env}, else "
                                f"{setting.config}); the report says it is on")
        else:
            parser.add_argument(setting.flag, dest=field, metavar="FILE",
                                help=f"PEM file (else {setting.env}, else the stack's {setting.config})")


def tls_summary(client: ManagementClient) -> str:
    """How the management API is reached, for a report: plain, TLS verified with which CA (and client certificate),
    or TLS with verification off (said in bold: `insecure` is on only where the user set it)."""
    if client.scheme != "https":
        return "TLS: none (http://)"
    if client.tls.insecure:
        return (f"TLS: **certificate verification off** ({INSECURE.names()} is set): anyone between here and the "
                "broker can read and change what is sent")
    ca = client.tls.cacert_file or "the system's trusted CAs"
    cert = f", client certificate {client.tls.clientcert_file}" if client.tls.clientcert_file else ""
    return f"TLS: verified with {ca}{cert}"


def broker_client(args: argparse.Namespace, config: Mapping[str, Any], stack: str) -> ManagementClient:
    """The management API client of a command: `--endpoint`, else RABBITMQ_ENDPOINT, else the stack's
    `rabbitmq:endpoint`; credentials from RABBITMQ_USERNAME/RABBITMQ_PASSWORD (guest/guest for the dev stack only);
    TLS from the flags, else the environment, else the stack. ManagementError when something is missing."""
    flags = {field: getattr(args, field, None) for field in TLS_SETTINGS}
    return ManagementClient.from_settings(getattr(args, "endpoint", None), config, dev=stack == DEV_STACK,
                                          tls=flags)


def broker_command_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments of a command that reads a stack's broker (doctor, drift, migrate-status, migrate-retire):
    `--stack`, `--endpoint` and `--root`; each command adds its own."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0] if doc else None)
    parser.add_argument("--stack", required=True)
    parser.add_argument("--endpoint", help="management URL (default RABBITMQ_ENDPOINT, else the stack's "
                        "rabbitmq:endpoint)")
    parser.add_argument("--root", type=Path, default=ROOT)
    add_tls_arguments(parser)
    return parser


def evaluation(stack: str, root: Path, **options: Any) -> Evaluation:
    """The stack's one evaluation (`evaluate`) for a command that ends soon after, its program's event loop closed
    whatever happens."""
    try:
        return evaluate(stack, root, exiting=True, **options)
    finally:
        close_event_loop()


def evaluation_for_command(stack: str, root: Path, *, preview: bool = True) -> Evaluation | None:
    """The stack's one evaluation for a command that ends soon after; None after printing the error as one
    `error: …` line set (a config error as `pulumi preview` prints it, a stack file error with its line)."""
    try:
        return evaluation(stack, root, preview=preview)
    except STACK_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return None
    except (ImportError, AttributeError) as error:  # a program whose components these tools cannot run
        print(f"error: the program in {root} cannot be run by these tools: {type(error).__name__}: {error}",
              file=sys.stderr)
        return None


def record_for_command(description: str, argv: list[str] | None, *, formats: Sequence[str] = ()
                       ) -> tuple[argparse.Namespace, list[Registered] | None]:
    """A command's `--stack`/`--root` arguments (and `--format`, one of `formats`, the first by default) and the
    recording of its evaluation; None after printing the error (`evaluation_for_command`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    if formats:
        parser.add_argument("--format", choices=formats, default=formats[0])
    args = parser.parse_args(argv)
    evaluated = evaluation_for_command(args.stack, args.root)
    return args, None if evaluated is None else evaluated.recording


@dataclass(frozen=True)
class Written:
    """What a file-writing command produced from the evaluation."""

    text: str
    summary: str
    """`12 retry contracts of stack dev`: said after `wrote <file>: ` when the text goes to a file."""
    notes: Sequence[str] = ()
    """Lines for standard error after the text (`left out: …`)."""


def stack_file_command(doc: str, prog: str, argv: list[str] | None,
                       produce: Callable[[argparse.Namespace, Evaluation], Written], *, preview: bool = True,
                       arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """The `main` of a command that writes one file from the stack's evaluation (contracts, definitions, alerts):
    `--stack`, `--root`, `--output` (default: standard output) and the command's own `arguments`; `produce` makes
    the text. 0, or 1 after one `error: …` line set. `preview=False`: evaluated as `pulumi up` runs the program."""
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    if arguments is not None:
        arguments(parser)
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    evaluated = evaluation_for_command(args.stack, args.root, preview=preview)
    if evaluated is None:
        return 1
    written = produce(args, evaluated)
    if args.output is None:
        sys.stdout.write(written.text)
    else:
        args.output.write_text(written.text, encoding="utf-8")
        print(f"wrote {args.output}: {written.summary}", file=sys.stderr)
    for line in written.notes:
        print(line, file=sys.stderr)
    return 0
