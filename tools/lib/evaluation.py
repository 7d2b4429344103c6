"""One evaluation of a checkout's stack: its program (`__main__.py`) run once under Pulumi's mocks, as `pulumi
preview` would run it, and everything the tools need of it taken from that one run: what it registered (the
recording), what its plans knew of each registration (`planned.index_plans`), its migrations, its alerting rules,
and its settings (`components.config.stack_settings.StackSettings`, parsed once by the program itself).

A command that looks at the working tree evaluates it in its own process (`evaluate`). `make review` evaluates
each side in a process of its own (`start` / `finish`: `python -m tools.evaluate`), always by these tools: BASE's
own `__main__.py` and `components/` run under these tools' mocks (`evaluate_checkout`), so a checkout from before
any of these tools existed is reviewed as its program would deploy. The JSON (`make evaluate`, `Evaluation.to_json`)
is a versioned document: `docs/schemas/evaluation.schema.json`.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from components.model.stack_config import RETIRE
from tools.lib.mockrun import ROOT, Registered, run_program, secret_placeholders, stack_config
from tools.lib.planned import Planned, index_plans, planned_from

SCHEMA_VERSION = 1
"""The JSON document's version (`schema_version`, docs/schemas/evaluation.schema.json): raised whenever a field
changes meaning or is removed; a reader refuses any other version."""
OWN_PLAN, TOOLS_PLAN, NO_PLAN = "program", "tools", "none"
"""Where the roles of an evaluation's resources come from (`plan_source`): the program's own plans, walked by its
own `components.plan.layout`; these tools' planner reading the same stack file (a program that keeps no plan these tools
can read: an older checkout), matched by place; or nowhere (these tools refuse that stack file too)."""


@dataclass(frozen=True)
class MigrationInfo:
    """One `migrations[]` entry as its checkout plans it."""

    vhost: str
    name: str
    kind: str
    step: str
    path: str
    source: str
    target: str
    shovels: tuple[tuple[str, str, str], ...]
    """(shovel name, source queue, destination queue)."""
    old_queues: tuple[str, ...]
    """What drains and is retired (components/model/plan_types.py `MigrationPlan.old_queues`)."""
    straggler_binding: bool
    """Step retire of a move with delay levels: the successor is bound for the old queue's key."""
    max_delay_ms: int | None
    """The vhost's `delay_levels.max_delay` (None without delay levels)."""
    external: bool = False
    """`move.external`: the old objects are not the stack's (an adopted runtime topology); `make migrate-retire`
    retires them on the broker, `pulumi up` never deletes them."""
    source_in_levels: bool = False
    """Step move: the old queue retries through the vhost's shared delay levels, where copies for it wait uncounted."""
    shovel_user: str | None = None
    """The user its shovels connect as: the stack's own (`components.model.naming.shovel_user`); None without
    shovels."""
    old_exchanges: tuple[str, ...] = ()
    """`move.external`: the old topology's own exchanges, retired by `make migrate-retire` after its queues."""
    old_policies: tuple[str, ...] = ()
    """`move.external`: the user policies that wired the old topology, retired last."""

    @property
    def retiring(self) -> bool:
        return self.step == RETIRE


def infos(plans: Iterable[tuple[str, Any]]) -> list[MigrationInfo]:
    """The migrations of planned vhosts ((component name, VhostPlan)), in config order."""
    found = []
    for _, plan in plans:
        levels = plan.config.delay_levels
        in_levels = {r.config.name for r in plan.retryables if r.delay_levels is not None}
        for m in getattr(plan, "migrations", ()):
            external = getattr(m.config, "external", None)  # a move.external's old topology; None for the others
            found.append(MigrationInfo(
                plan.config.name, m.name, m.config.kind, m.config.step, m.path, m.config.source, m.config.target,
                tuple((s.name, s.source, s.destination) for s in m.shovels), tuple(m.old_queues), bool(m.bindings),
                None if levels is None else levels.max_delay_ms, external is not None,
                m.config.source in in_levels, m.shovels[0].user if m.shovels else None,
                tuple(getattr(external, "exchanges", ())), tuple(getattr(external, "policies", ()))))
    return found


class EvaluationError(Exception):
    """The checkout cannot be evaluated; the message is one line set (the program's own for a config error)."""


@dataclass
class Evaluation:
    """Everything the tools know of one checkout's stack."""

    stack: str
    recording: list[Registered]
    plan: dict[str, Planned]
    """What the plans knew of each registration, by URN."""
    migrations: list[MigrationInfo]
    delete_with_messages: tuple[str, ...] = ()
    amqp_port: int | None = None
    provider: dict[str, str] = field(default_factory=dict)
    """The provider's `rabbitmq:*` settings as written (what the management client reads)."""
    alert_rules: dict[str, Any] | None = None
    """The Prometheus rule file the program exports (`alert_rules`); None when it exports none (older programs)."""
    plan_source: str = OWN_PLAN
    """`OWN_PLAN`, `TOOLS_PLAN` or `NO_PLAN`: where `plan` comes from."""
    program: str = "own"
    """`own`: the project's program with these tools' components; `checkout`: a checkout's own program and
    components run by these tools (`evaluate_checkout`)."""
    settings: Any = None
    """The program's `StackSettings`, when evaluated in this process (not serialised)."""

    def to_json(self) -> str:
        """Every field but `settings`, with its `schema_version`."""
        document = {key: value for key, value in asdict(replace(self, settings=None)).items() if key != "settings"}
        return json.dumps({"schema_version": SCHEMA_VERSION, **document}, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str, source: str = "the evaluation") -> Evaluation:
        """A document `to_json` wrote; EvaluationError naming `source` when it is not one of this version."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise EvaluationError(f"{source} is not JSON ({error}): write it with `make evaluate`") from None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise EvaluationError(f"{source} has schema_version {version!r}, and these tools read {SCHEMA_VERSION}: "
                                  "evaluate it again with these tools (`make evaluate`)")
        known = {f.name for f in fields(Registered)}
        return cls(data["stack"], [Registered(**{k: v for k, v in r.items() if k in known}) for r in data["recording"]],
                   {urn: planned_from(p) for urn, p in data["plan"].items()},
                   [MigrationInfo(**_tuples(m)) for m in data["migrations"]],
                   tuple(data["delete_with_messages"]), data["amqp_port"], dict(data["provider"]), data["alert_rules"],
                   data["plan_source"], data["program"])


def _tuples(item: dict[str, Any]) -> dict[str, Any]:
    """JSON lists back as the tuples the frozen dataclasses hold (shovels: tuples of tuples)."""
    def of(value: Any) -> Any:
        return tuple(of(v) for v in value) if isinstance(value, list) else value
    return {key: of(value) for key, value in item.items()}


def evaluate(stack: str, root: Path = ROOT, *, preview: bool = True, written_version: bool = True,
             exiting: bool = False) -> Evaluation:
    """`root`'s stack `stack` evaluated in this process, with the `components` it imports: `root/__main__.py` when
    `root` has one, else this project's (a directory holding only a stack file). `preview=False`: as `pulumi up`
    runs it (every password required). `written_version=False`: `broker.version` is not checked against what the
    stack uses (`make doctor` checks the live version instead) but kept in the settings. `pulumi.RunError` (the
    program refused the config) or StackFileError."""
    from components.config.stack_settings import with_written_version, without_written_version
    from components.plan import layout

    values, secret_keys = stack_config(stack, root)
    handed = values if written_version else without_written_version(values)
    program = root if (root / "__main__.py").is_file() else ROOT
    recording, namespace = run_program(stack, program, preview, config=(handed, secret_keys), exiting=exiting,
                                       project=root)
    plans, settings = namespace.get("plans"), namespace.get("settings")
    if plans is None or settings is None:
        raise EvaluationError(f"{program / '__main__.py'} keeps no `plans` or `settings`: these tools read both from "
                              "the program's one run: keep them as module globals, as this project's __main__.py does")
    if not written_version:
        settings = with_written_version(settings, values)
    return Evaluation(stack, recording, index_plans(recording, plans, layout), infos(plans),
                      tuple(sorted(settings.delete_with_messages)), settings.amqp_port,
                      dict(settings.provider.written), namespace.get("alert_rules"), settings=settings)


def _is_components(module: str) -> bool:
    return module == "components" or module.startswith("components.")


@contextmanager
def _components_of(root: Path) -> Iterator[None]:
    """`root`'s own `components` package imported instead of these tools' while inside; these tools' back after."""
    mine = {name: module for name, module in sys.modules.items() if _is_components(name)}
    for name in mine:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if _is_components(name)]:
            del sys.modules[name]
        sys.modules.update(mine)


def _own_layout() -> ModuleType:
    """A checkout's layout module: `components/plan/layout.py`, or `components/layout.py` before the layers."""
    try:
        return importlib.import_module("components.plan.layout")
    except ImportError:
        return importlib.import_module("components.layout")


def evaluate_checkout(stack: str, root: Path) -> Evaluation:
    """A checkout's stack as its own program would deploy it: `root/__main__.py` with `root/components` run under
    these tools' mocks and stack file reader (so a checkout from before these tools is evaluated too). The roles of
    its resources come from its own plans when its `components.plan.layout` walks them as these tools do, else from
    these tools' planner reading the same stack file, matched by place (`TOOLS_PLAN`; none when it refuses the file)."""
    if root.resolve() == ROOT or not (root / "components").is_dir() or not (root / "__main__.py").is_file():
        return evaluate(stack, root)
    config = stack_config(stack, root)
    secret_placeholders()  # these tools' reader masks the checkout's secrets
    with _components_of(root):
        recording, namespace = run_program(stack, root, config=config, exiting=True)
        plans, settings = namespace.get("plans") or (), namespace.get("settings")
        try:
            if not plans:
                raise ValueError("the program keeps no plans")
            index = index_plans(recording, plans, _own_layout())
            found, source = infos(plans), OWN_PLAN
        except (ImportError, AttributeError, TypeError, ValueError, KeyError):  # no plans, or not walked as ours
            index, found, source = {}, [], NO_PLAN
    if source == NO_PLAN:
        import pulumi

        from components.config.pulumi_yaml import StackFileError
        from components.plan import layout

        try:
            _, mine = run_program(stack, ROOT, config=config, exiting=True, project=root)
        except (pulumi.RunError, StackFileError):  # these tools refuse the stack file: the roles are unknown
            pass
        else:
            index, found, source = index_plans(recording, mine["plans"], layout), [], TOOLS_PLAN
    provider = getattr(settings, "provider", None)
    return Evaluation(stack, recording, index, found, tuple(sorted(getattr(settings, "delete_with_messages", ()))),
                      getattr(settings, "amqp_port", None), dict(getattr(provider, "written", {}) or {}),
                      namespace.get("alert_rules"), source, "checkout")


def start(stack: str, root: Path, output: IO[str]) -> subprocess.Popen[str]:
    """`root` evaluated by these tools in a process of its own (`python -m tools.evaluate`: `evaluate_checkout`),
    writing the JSON to `output`."""
    return subprocess.Popen([sys.executable, "-m", "tools.evaluate", "--stack", stack, "--root", str(root)],
                            cwd=ROOT, stdout=output, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen[str], output: IO[str]) -> Evaluation:
    """The evaluation `start` made; EvaluationError with its error line set when it failed."""
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise EvaluationError(stderr.rstrip() or f"error: tools.evaluate exited {process.returncode}")
    output.seek(0)
    return Evaluation.from_json(output.read())
