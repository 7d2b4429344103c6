"""Run the Pulumi program (or any function that registers resources) under Pulumi's mocks and record
every resource it registers: type, logical name, URN, parent, options and exact inputs.

No CLI, broker or secrets: secret config values are replaced by a marker, and the inputs that carry
them are reported as secret. `python -m tools.mockrun --stack dev` prints the recording as JSON.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime import mocks, rpc
from pulumi.runtime.config import set_all_config

PROJECT = "rabbitmq-retry"
ROOT = Path(__file__).resolve().parent.parent
SECRET_MARKER = "[secret]"


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
    """Some input holds a secret (it is shown as SECRET_MARKER or the mock's value)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """What a component registered with `register_outputs`, or the stack's exports."""


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        # The provider echoes its inputs; IDs are the logical names, which is all the tools need.
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None


class RecordingMonitor(mocks.MockMonitor):
    """MockMonitor that also keeps what the engine would see of each registration."""

    def __init__(self) -> None:
        super().__init__(_Mocks())
        self.registered: list[Registered] = []
        self._by_urn: dict[str, Registered] = {}
        self._urns: dict[str, str] = {}
        self._qualified_types: dict[str, str] = {}

    def RegisterResource(self, request: Any) -> Any:  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        urn = self._engine_urn(request, response.urn)
        if request.type == "pulumi:pulumi:Stack":
            record = Registered(urn, request.type, request.name, False, None, {})
        else:
            inputs, secret = rpc.deserialize_properties_unwrap_secrets(request.object)
            record = Registered(
                urn=urn, type=request.type, name=request.name, custom=bool(request.custom),
                parent=self._urns.get(request.parent), inputs=_plain(inputs), protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                dependencies=[self._urns.get(d, d) for d in request.dependencies], secret=secret,
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
            outputs, _ = rpc.deserialize_properties_unwrap_secrets(request.outputs)
            record.outputs = _plain(outputs)
        return super().RegisterResourceOutputs(request)


def _plain(value: Any) -> Any:
    """Mocked inputs as JSON-able data (the SDK returns floats for integers; keep them as they are)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def stack_config(stack: str, root: Path = ROOT) -> tuple[dict[str, str], list[str]]:
    """Config of `Pulumi.<stack>.yaml` as the engine hands it to the program: JSON text for
    structured values, secure values replaced by a marker."""
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path.name} not found: is STACK={stack} a stack of this project?")
    document = yaml.safe_load(path.read_text()) or {}
    config, secret_keys = {}, []
    for key, value in (document.get("config") or {}).items():
        full_key = key if ":" in key else f"{PROJECT}:{key}"
        value, secret = _without_secrets(value)
        if secret:
            secret_keys.append(full_key)
        config[full_key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys


def _without_secrets(value: Any) -> tuple[Any, bool]:
    """`value` with every `{secure: ...}` leaf replaced by SECRET_MARKER, and whether there was one."""
    if isinstance(value, Mapping) and set(value) == {"secure"}:
        return SECRET_MARKER, True
    if isinstance(value, Mapping):
        items = {k: _without_secrets(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, any(secret for _, secret in items.values())
    if isinstance(value, list):
        items_list = [_without_secrets(v) for v in value]
        return [v for v, _ in items_list], any(secret for _, secret in items_list)
    return value, False


@contextmanager
def mocked_runtime(config: Mapping[str, str] | None = None, secret_keys: list[str] | None = None,
                   stack: str = "test") -> Iterator[RecordingMonitor]:
    """Install mocks and config; restore the SDK's settings afterwards."""
    from copy import deepcopy

    from pulumi.runtime import settings

    saved = deepcopy(settings.SETTINGS)
    monitor = RecordingMonitor()
    mocks.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    set_all_config(dict(config or {}), list(secret_keys or []))
    try:
        yield monitor
    finally:
        set_all_config({}, [])
        settings.configure(saved)


def record(register: Callable[[], Any], config: Mapping[str, str] | None = None,
           secret_keys: list[str] | None = None, stack: str = "test") -> list[Registered]:
    """Call `register` under mocks and return every resource it registered, in order."""
    with mocked_runtime(config, secret_keys, stack) as monitor:
        pulumi.runtime.test(register)()
        return list(monitor.registered)


def record_program(stack: str, root: Path = ROOT) -> list[Registered]:
    """Run `<root>/__main__.py` with `Pulumi.<stack>.yaml`, as `pulumi preview` would, under mocks."""
    config, secret_keys = stack_config(stack, root)
    # Evaluate `root`'s own components (a review evaluates an older checkout), then put back
    # whatever the caller had imported.
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "components"}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        return record(lambda: runpy.run_path(str(root / "__main__.py"), run_name="__main__"),
                      config, secret_keys, stack)
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.split(".")[0] == "components"]:
            del sys.modules[name]
        sys.modules.update(saved)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    args = parser.parse_args(argv)
    try:
        recorded = record_program(args.stack, args.root)
    except pulumi.RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    json.dump([asdict(r) for r in recorded], sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
