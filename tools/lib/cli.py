"""What the commands in `tools/` share on the command line: the `--stack`/`--root` arguments and a recording
of the program, with errors printed as one `error: …` line set."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi

from rabbitmq_retry_client.management import INSECURE, TLS_SETTINGS, ManagementClient
from tools.lib.mockrun import ROOT, Registered, close_event_loop, record_program
from components.config.stack_file import StackFileError

DEV_STACK = "dev"
"""The only stack whose tools fall back to RabbitMQ's guest/guest (the local broker of `make setup`)."""


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


def record_for_command(description: str, argv: list[str] | None) -> tuple[str, list[Registered] | None]:
    """A command's `--stack`/`--root` arguments and its recording; None after printing the error as one
    `error: …` line set (a config error as `pulumi preview` prints it, a stack file error with its line)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    args = parser.parse_args(argv)
    try:
        return args.stack, record_program(args.stack, args.root, exiting=True)
    except (pulumi.RunError, StackFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return args.stack, None
    finally:
        close_event_loop()
