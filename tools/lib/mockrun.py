"""Run the Pulumi program (or any function that registers resources) under Pulumi's mocks and record
every resource it registers: type, logical name, URN, parent, options and exact inputs.

No CLI, broker or secrets: secret config values are replaced by a placeholder (`components/config/pulumi_yaml.py`),
and the inputs that carry them are reported as secret. `python -m tools.mockrun --stack dev` prints the recording as
JSON. Imports nothing of `components` until a stack file is read or a secret is masked: `docs/components.md`'s reuse
example records a program of its own beside a `components` folder of the user's.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import runpy
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import mocks, rpc
from pulumi.runtime import resource as resource_runtime
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2

ROOT = Path(__file__).resolve().parents[2]
"""The project directory these tools belong to: the default program and stack files."""
PROJECT = "rabbitmq-retry"
"""The Pulumi project's name (Pulumi.yaml), part of every URN the mocks give."""


@dataclass
class Registered:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str | None
    inputs: dict[str, Any]
    protect: bool = False
    retain_on_delete: bool = False
    dependencies: list[str] = field(default_factory=list)
    secret: bool = False
    """Some input holds a secret (from a stack file, shown as its placeholder; else the mock's value)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """What a component registered with `register_outputs`, or the stack's exports."""
    import_id: str = ""
    """The `import_` option: the ID of the existing object Pulumi adopts instead of creating one."""
    hooks: dict[str, list[str]] = field(default_factory=dict)
    """The `hooks` option: names of the resource hooks bound to it, by kind (`{"before_delete": [...]}`)."""


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        # The provider echoes its inputs; IDs are the logical names, which is all the tools need.
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class RecordingMonitor(mocks.MockMonitor):
    """MockMonitor that also keeps what the engine would see of each registration."""

    def __init__(self, reveal_secrets: bool = False) -> None:
        super().__init__(_Mocks())
        self.reveal_secrets = reveal_secrets
        self.registered: list[Registered] = []
        self._by_urn: dict[str, Registered] = {}
        self._urns: dict[str, str] = {}
        self._qualified_types: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        with _worker_event_loop():
            response = super().RegisterResource(request)
        urn = self._engine_urn(request, response.urn)
        if request.type == "pulumi:pulumi:Stack":
            record = Registered(urn, request.type, request.name, False, None, {})
        else:
            inputs, secret = (rpc.deserialize_properties_unwrap_secrets(request.object) if self.reveal_secrets
                              else _masked(rpc.deserialize_properties(request.object)))
            record = Registered(
                urn=urn, type=request.type, name=request.name, custom=bool(request.custom),
                parent=self._urns.get(request.parent), inputs=_plain(inputs), protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                dependencies=sorted(self._urns.get(d, d) for d in request.dependencies), secret=secret,
                import_id=request.importId, hooks=_hooks(request),
            )
        self.registered.append(record)
        self._by_urn[response.urn] = record
        return response

    def _engine_urn(self, request: Any, mock_urn: str) -> str:
        """The URN the engine would give: the mock folds in only the parent's type, the engine the
        whole chain of component types, which is what a rename or a reparent changes."""
        parent_type = self._qualified_types.get(request.parent, "")
        qualified = f"{parent_type}${request.type}" if parent_type else request.type
        if request.type != "pulumi:pulumi:Stack":
            self._qualified_types[mock_urn] = qualified
        urn = mock_urn.rsplit("::", 2)[0] + f"::{qualified}::{request.name}"
        self._urns[mock_urn] = urn
        return urn

    def RegisterResourceOutputs(self, request: Any) -> Any:  # noqa: N802
        record = self._by_urn.get(request.urn)
        if record is not None:
            with _worker_event_loop():
                outputs, _ = _masked(rpc.deserialize_properties(request.outputs))
            record.outputs = _plain(outputs)
        return super().RegisterResourceOutputs(request)

    def Invoke(self, request: Any) -> Any:  # noqa: N802
        with _worker_event_loop():
            return super().Invoke(request)

    def ReadResource(self, request: Any) -> Any:  # noqa: N802
        with _worker_event_loop():
            return super().ReadResource(request)


class _WorkerLoops:
    """The SDK calls the monitor from its thread pool, and the mock monitor gives each worker thread an
    event loop that nobody closes; those loops are finalized at interpreter exit, which now and then
    prints `Exception ignored in: <function BaseEventLoop.__del__>` after a successful run. Each worker
    thread gets one loop of its own, reused for all its calls (a new loop per call cost a socket pair
    and an epoll instance for each of the ~19,000 registrations of a 1,000-queue stack), and `close_all`
    closes them when the recording is done."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._loops: list[asyncio.AbstractEventLoop] = []

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if threading.current_thread() is threading.main_thread():
            yield
            return
        loop: asyncio.AbstractEventLoop | None = getattr(self._local, "loop", None)
        if loop is None or loop.is_closed():
            loop = self._local.loop = asyncio.new_event_loop()
            with self._lock:
                self._loops.append(loop)
        asyncio.set_event_loop(loop)
        try:
            yield
        finally:
            asyncio.set_event_loop(None)

    def close_all(self) -> None:
        with self._lock:
            loops, self._loops = self._loops, []
        for loop in loops:
            if not loop.is_running():
                loop.close()


_worker_event_loop = _WorkerLoops()


@contextmanager
def _without_source_positions() -> Iterator[None]:
    """The SDK walks and formats the whole Python stack of every registration to tell the engine where
    in the program a resource was declared; a recording never uses that, and it was a tenth of a
    1,000-queue mock run."""
    saved = resource_runtime._get_stack_trace
    resource_runtime._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        resource_runtime._get_stack_trace = saved


HOOK_KINDS = ("before_create", "after_create", "before_update", "after_update", "before_delete", "after_delete",
              "on_error")


def _hooks(request: Any) -> dict[str, list[str]]:
    """The hook names a registration binds, by kind, leaving out the kinds it binds none of."""
    if not request.HasField("hooks"):
        return {}
    return {kind: list(names) for kind in HOOK_KINDS if (names := getattr(request.hooks, kind))}


def _masked(value: Any) -> tuple[Any, bool]:
    """`value` with every secret shown as the stack file's placeholder for it (which fingerprints the
    ciphertext, so a changed password shows as a change) or, for a secret the program made itself (e.g. a
    preview's stand-in for a missing password), as just SECRET_MARKER; and whether there was a secret."""
    if rpc.is_rpc_secret(value):
        marker, is_placeholder = secret_placeholders()
        inner = rpc.unwrap_rpc_secret(value)
        return (inner if is_placeholder(inner) else marker), True
    if isinstance(value, Mapping):
        items = {k: _masked(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, any(secret for _, secret in items.values())
    if isinstance(value, (list, tuple)):
        pairs = [_masked(v) for v in value]
        return [v for v, _ in pairs], any(secret for _, secret in pairs)
    return value, False


@functools.cache
def secret_placeholders() -> tuple[str, Callable[[Any], bool]]:
    """(SECRET_MARKER, is_secret_placeholder) of these tools' own stack file reader, imported once: a program run
    with components of its own (another checkout's, `evaluation.evaluate_checkout`) masks its secrets as these tools
    read them."""
    from components.config.pulumi_yaml import SECRET_MARKER, is_secret_placeholder

    return SECRET_MARKER, is_secret_placeholder


def _plain(value: Any) -> Any:
    """Mocked inputs as JSON-able data (the SDK returns floats for integers; keep them as they are)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@contextmanager
def mocked_runtime(config: Mapping[str, str] | None = None, secret_keys: list[str] | None = None,
                   stack: str = "test", preview: bool = True, reveal_secrets: bool = False,
                   root_directory: Path | None = None) -> Iterator[RecordingMonitor]:
    """Install mocks and config; restore the SDK's settings afterwards. `preview`: the program sees
    `pulumi.runtime.is_dry_run()` as under `pulumi preview`, which is what plans and reviews model.
    `reveal_secrets`: record secret inputs as they are (for tests of the wiring), not masked. `root_directory`: the
    project directory the program sees (`pulumi.get_root_directory()`), where its stack file is."""
    from copy import deepcopy

    from pulumi.runtime import settings

    saved = deepcopy(settings.SETTINGS)
    # set_mocks registers the root Stack only when no earlier run left one in this context: without this
    # reset, a second recording in a process lacks its Stack and parents its components to nothing.
    saved_root = settings.ROOT.set(None)
    policy = asyncio.get_event_loop_policy()
    try:
        policy.get_event_loop()
    except RuntimeError:  # closed by close_event_loop: registering the Stack needs one
        policy.set_event_loop(policy.new_event_loop())
    monitor = RecordingMonitor(reveal_secrets)
    mocks.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=preview, monitor=monitor)
    if root_directory is not None:
        settings.SETTINGS.root_directory = str(root_directory)
    set_all_config(dict(config or {}), list(secret_keys or []))
    try:
        with _without_source_positions():
            yield monitor
    finally:
        _worker_event_loop.close_all()
        set_all_config({}, [])
        settings.configure(saved)
        settings.ROOT.reset(saved_root)


def record(register: Callable[[], Any], config: Mapping[str, str] | None = None,
           secret_keys: list[str] | None = None, stack: str = "test", preview: bool = True,
           reveal_secrets: bool = False, root_directory: Path | None = None) -> list[Registered]:
    """Call `register` under mocks and return every resource it registered, in order."""
    with mocked_runtime(config, secret_keys, stack, preview, reveal_secrets, root_directory) as monitor:
        pulumi.runtime.test(register)()
        return list(monitor.registered)


def close_event_loop() -> None:
    """Close the event loop that `pulumi.runtime.test` ran on, the way `asyncio.run` does; a command
    calls this before it exits. The SDK creates that loop and never closes it (the same exit-time noise
    as `_worker_event_loop`). Afterwards this thread has no event loop: `pulumi.Output` needs a new one."""
    policy = asyncio.get_event_loop_policy()
    try:
        loop = policy.get_event_loop()
    except RuntimeError:  # no loop in this thread: nothing to close
        return
    if loop.is_running() or loop.is_closed():
        return
    try:
        pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in pending:  # left over when the program raised
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        policy.set_event_loop(None)
        loop.close()


def stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """Config of `<root>/Pulumi.<stack>.yaml` as the engine hands it to the program."""
    from components.config.pulumi_yaml import stack_config as read

    return read(root / f"Pulumi.{stack}.yaml")


def run_program(stack: str, root: Path = ROOT, preview: bool = True, reveal_secrets: bool = False, *,
                exiting: bool = False, config: tuple[dict[str, str], list[str]] | None = None,
                project: Path | None = None) -> tuple[list[Registered], dict[str, Any]]:
    """Run `<root>/__main__.py` with `Pulumi.<stack>.yaml` (or `config`: its values and secret keys, as
    `stack_config` reads them) as `pulumi preview` (or, with `preview=False`, `pulumi up`) would, under mocks, with
    the `components` this process imports, in the project directory `project` (default `root`, where the stack file
    is): what it registered, and the program's own globals once it ran (its settings and plans). `exiting`: the
    caller is a command that ends soon after, like the program's own process, so the cyclic collector the program
    turned off stays off; turned back on, its first pass walks every object the program made (about 5 s at 1,000
    queues)."""
    values, secret_keys = config if config is not None else stack_config(stack, root)
    collecting = gc.isenabled() and not exiting  # the program turns it off for its own short life
    namespace: dict[str, Any] = {}
    try:
        recording = record(lambda: namespace.update(runpy.run_path(str(root / "__main__.py"), run_name="__main__")),
                           values, secret_keys, stack, preview, reveal_secrets, project or root)
    finally:
        if collecting:
            gc.enable()
    return recording, namespace


def record_program(stack: str, root: Path = ROOT, preview: bool = True,
                   reveal_secrets: bool = False, *, exiting: bool = False) -> list[Registered]:
    """What `run_program` registers."""
    return run_program(stack, root, preview, reveal_secrets, exiting=exiting)[0]
