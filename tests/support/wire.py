"""What the Pulumi engine does around a component plugin, as far as a test can do it without the CLI: start the
plugin as the Python language host starts it, read its port from its first line of output, and serve it a
resource monitor and an engine (the SDK's own gRPC stubs, `pulumi.runtime.proto`) that record every
registration the way `tools.lib.mockrun` records a Python program's, so that the two can be compared."""

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import engine_pb2, engine_pb2_grpc, provider_pb2_grpc, resource_pb2, resource_pb2_grpc

from tools.lib.mockrun import Registered, _hooks, _masked, _plain  # the recording's own normalisation


def _deserialized(struct: Any, reveal: bool) -> tuple[Any, bool]:
    """The SDK's deserialisation, on an event loop of this gRPC worker thread (it may build Outputs)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        if reveal:
            return rpc.deserialize_properties_unwrap_secrets(struct)
        return _masked(rpc.deserialize_properties(struct))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


class RecordingResourceMonitor(resource_pb2_grpc.ResourceMonitorServicer):
    """A resource monitor that answers like the engine's (URNs with the whole chain of parent types, custom
    resources' inputs echoed as outputs, every feature supported) and records each registration."""

    def __init__(self, stack: str, project: str, stack_urn: str) -> None:
        self.prefix = f"urn:pulumi:{stack}::{project}::"
        self.stack_urn = stack_urn
        self.registered: list[Registered] = []
        self.hooks: list[str] = []
        self._qualified: dict[str, str] = {}
        self._by_urn: dict[str, Registered] = {}
        self._lock = threading.Lock()

    def SupportsFeature(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method names)
        return resource_pb2.SupportsFeatureResponse(hasSupport=True)

    def GetDeploymentInfo(self, request: Any, context: Any) -> Any:  # noqa: N802
        features = [value for name, value in resource_pb2.ResourceMonitorFeature.items()
                    if name != "RESOURCE_MONITOR_FEATURE_UNKNOWN"]
        return resource_pb2.DeploymentInfo(supportedFeatures=features)

    def RegisterResourceHook(self, request: Any, context: Any) -> Any:  # noqa: N802
        """The queue guard's before_delete hook (components/pulumi/guard.py): registered, never called in a preview."""
        self.hooks.append(request.name)
        return empty_pb2.Empty()

    def RegisterResource(self, request: Any, context: Any) -> Any:  # noqa: N802
        with self._lock:
            parent_type = self._qualified.get(request.parent, "")
            qualified = f"{parent_type}${request.type}" if parent_type else request.type
            urn = f"{self.prefix}{qualified}::{request.name}"
            self._qualified[urn] = qualified
        inputs, secret = _deserialized(request.object, reveal=True)
        record = Registered(urn=urn, type=request.type, name=request.name, custom=bool(request.custom),
                            parent=request.parent or None, inputs=_plain(inputs), protect=bool(request.protect),
                            retain_on_delete=bool(request.retainOnDelete),
                            dependencies=sorted(request.dependencies), secret=secret, import_id=request.importId,
                            hooks=_hooks(request))
        with self._lock:
            self.registered.append(record)
            self._by_urn[urn] = record
        return resource_pb2.RegisterResourceResponse(urn=urn, id=f"{request.name}-id" if request.custom else "",
                                                     object=request.object)

    def RegisterResourceOutputs(self, request: Any, context: Any) -> Any:  # noqa: N802
        outputs, _ = _deserialized(request.outputs, reveal=False)
        with self._lock:
            if request.urn in self._by_urn:
                self._by_urn[request.urn].outputs = _plain(outputs)
        return empty_pb2.Empty()

    def SignalAndWaitForShutdown(self, request: Any, context: Any) -> Any:  # noqa: N802
        return empty_pb2.Empty()


class RecordingEngine(engine_pb2_grpc.EngineServicer):
    """The engine's own service: the root (stack) resource, and the plugin's log messages."""

    def __init__(self, stack_urn: str) -> None:
        self.stack_urn = stack_urn
        self.logs: list[str] = []

    def Log(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.logs.append(request.message)
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> Any:  # noqa: N802
        return engine_pb2.GetRootResourceResponse(urn=self.stack_urn)

    def SetRootResource(self, request: Any, context: Any) -> Any:  # noqa: N802
        return engine_pb2.SetRootResourceResponse()


@contextmanager
def engine_services(stack: str, project: str, stack_urn: str) -> Iterator[tuple[str, RecordingResourceMonitor,
                                                                              RecordingEngine]]:
    """A gRPC server on a free loopback port with the monitor and the engine; yields its address and both."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    monitor, engine = RecordingResourceMonitor(stack, project, stack_urn), RecordingEngine(stack_urn)
    resource_pb2_grpc.add_ResourceMonitorServicer_to_server(monitor, server)
    engine_pb2_grpc.add_EngineServicer_to_server(engine, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", monitor, engine
    finally:
        server.stop(grace=None)


def plugin_command(plugin_dir: Path, engine_address: str, python: str = sys.executable) -> list[str]:
    """What Pulumi's Python language host runs for a plugin folder with a __main__.py: `python <folder>` followed
    by the engine's arguments (its address). The interpreter is this test's by default, whose environment has what
    the plugin's requirements.txt installs (`PLUGIN_PYTHON`: the plugin's own `venv/bin/python`, made as the
    language host makes it)."""
    return [python, str(plugin_dir), engine_address]


@contextmanager
def running_plugin(plugin_dir: Path, engine_address: str) -> Iterator[Any]:
    """Start the plugin, read the port it prints first, and yield a ResourceProvider stub connected to it."""
    python = os.environ.get("PLUGIN_PYTHON", sys.executable)
    process = subprocess.Popen(plugin_command(plugin_dir, engine_address, python), cwd=plugin_dir,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        if not first.isdigit():
            process.kill()
            _, err = process.communicate(timeout=30)
            raise AssertionError(f"the plugin printed {first!r}, not its port; stderr:\n{err}")
        with grpc.insecure_channel(f"127.0.0.1:{first}") as channel:
            yield provider_pb2_grpc.ResourceProviderStub(channel)
    finally:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
