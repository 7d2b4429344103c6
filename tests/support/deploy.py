"""Which brokers to test against, throw-away vhosts, and applying the program's `Vhost` component to a
broker like `pulumi up` (recorded under mocks, applied through tests/support/mirror.py).

Brokers come from RABBITMQ_BROKERS ("name=host:amqp_port:management_port,..."), credentials from
RABBITMQ_TEST_USERNAME / RABBITMQ_TEST_PASSWORD. Their TLS listeners (scripts/brokers.sh) from
RABBITMQ_TLS_BROKERS (same form: AMQPS and HTTPS ports), verified with the CA and client certificate scripts/brokers.sh
made in RABBITMQ_TLS_DIR.
"""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from components.config.load import load_vhost
from components.plan.planner import plan_vhost
from rabbitmq_retry_client.management import ManagementError, TlsSettings
from tests.conftest import record_vhost
from tests.support.mirror import BeforeDelete, Broker, MirrorError, apply, apply_update, call, esc
from tools.lib.engine import Step
from tools.lib.mockrun import Registered

DEFAULT_BROKERS = "3.10=127.0.0.1:5672:15672,4.3=127.0.0.1:5673:15673"
DEFAULT_TLS_BROKERS = "3.10=127.0.0.1:5671:15671,4.3=127.0.0.1:5674:15674"
DEFAULT_TLS_DIR = "/var/lib/rabbitmq-retry/tls"
TLS_CLIENT_CN = "rabbitmq-retry-tls-client"
"""The client certificate's common name: the user SASL EXTERNAL logs in as (`ssl_cert_login_from = common_name`)."""


def tls_dir() -> Path:
    return Path(os.environ.get("RABBITMQ_TLS_DIR", DEFAULT_TLS_DIR))


def tls_settings() -> TlsSettings:
    """The test CA and the client certificate of scripts/brokers.sh."""
    where = tls_dir()
    return TlsSettings(str(where / "ca.pem"), str(where / "client.pem"), str(where / "client.key"))


def configured_tls_brokers() -> list[Broker]:
    """The TLS listeners of the brokers (RABBITMQ_TLS_BROKERS, default scripts/brokers.sh's), with `tls_settings`;
    by default only those of the brokers this run tests (RABBITMQ_BROKERS: scripts/test.sh runs one pytest per
    broker, and each tests its own broker's TLS listeners)."""
    explicit = os.environ.get("RABBITMQ_TLS_BROKERS")
    tested = {b.name for b in configured_brokers()}
    return [replace(b, name=f"{b.name}-tls", tls=tls_settings())
            for b in parse_brokers(explicit or DEFAULT_TLS_BROKERS, os.environ.get("RABBITMQ_TEST_USERNAME", "guest"),
                                   os.environ.get("RABBITMQ_TEST_PASSWORD", "guest"))
            if explicit or b.name in tested]


def parse_brokers(spec: str, username: str, password: str) -> list[Broker]:
    """"3.10=127.0.0.1:5672:15672,..." → brokers, in the order given."""
    brokers = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, address = item.partition("=")
        host, amqp, management = address.rsplit(":", 2)
        brokers.append(Broker(name.strip(), host, int(amqp), int(management), username, password))
    return brokers


def configured_brokers() -> list[Broker]:
    """The brokers of RABBITMQ_BROKERS (default: the local 3.10 and 4.3 of scripts/brokers.sh)."""
    return parse_brokers(os.environ.get("RABBITMQ_BROKERS", DEFAULT_BROKERS),
                         os.environ.get("RABBITMQ_TEST_USERNAME", "guest"),
                         os.environ.get("RABBITMQ_TEST_PASSWORD", "guest"))


def unreachable(broker: Broker) -> str | None:
    """Why the broker's management API does not answer, or None when it does."""
    try:
        call(broker, "GET", "overview")
    except (ManagementError, MirrorError) as error:
        return f"RabbitMQ {broker.name} management API at {broker.management_url} does not answer: {error}"
    return None


@contextmanager
def throwaway_vhost(broker: Broker, prefix: str = "test") -> Iterator[str]:
    """A fresh vhost name starting with `prefix`; the program creates the vhost, and it is deleted afterwards with
    everything in it."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        call(broker, "DELETE", f"vhosts/{esc(name)}")


@dataclass
class Deployment:
    """What one `pulumi up` of a Vhost component applied: the recording and the retry contracts."""

    vhost: str
    config: dict[str, Any]
    resources: list[Registered]
    contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    """For an update: the plan that was applied."""


def _recorded(vhost_config: Mapping[str, Any], **vhost_args: Any) -> tuple[list[Registered], dict[str, Any]]:
    """Record `Vhost(...)` under mocks; the contracts come from its registered outputs, or the plan."""
    config = copy.deepcopy(dict(vhost_config))
    # The broker gets what the provider gets: secrets as they are, not masked as plans show them.
    resources = record_vhost(config, name="t", reveal_secrets=True, **vhost_args)
    component = next(r for r in resources if r.type == "rabbitmq-retry:index:Vhost")
    contracts = component.outputs.get("retry_contracts")
    if not contracts:
        plan = plan_vhost(load_vhost(config, "vhost"))
        contracts = {r.config.name: r.contract(config["name"]) for r in plan.retryables}
    return resources, _integers(contracts)


def _integers(value: Any) -> Any:
    """Mocked outputs come back with floats for integers (delay_ms 1000.0)."""
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


class Deployer:
    """`deploy(config)` applies a vhost config from scratch; `deploy.update(before, config)` applies a change."""

    def __init__(self, broker: Broker, vhost: str) -> None:
        self.broker, self.vhost = broker, vhost

    def _config(self, vhost_config: Mapping[str, Any]) -> dict[str, Any]:
        return {"name": self.vhost, **copy.deepcopy(dict(vhost_config))}

    def record(self, vhost_config: Mapping[str, Any], **vhost_args: Any) -> Deployment:
        """What `deploy(config)` would apply, recorded and not applied (a test may apply it in parts)."""
        config = self._config(vhost_config)
        resources, contracts = _recorded(config, **vhost_args)
        return Deployment(self.vhost, config, resources, contracts)

    def __call__(self, vhost_config: Mapping[str, Any], **vhost_args: Any) -> Deployment:
        deployment = self.record(vhost_config, **vhost_args)
        apply(self.broker, deployment.resources)
        return deployment

    def update(self, before: Deployment, vhost_config: Mapping[str, Any], *, before_delete: BeforeDelete | None = None,
               **vhost_args: Any) -> Deployment:
        """`before_delete`: run the resource hooks of what the update deletes (tests/support/mirror.py)."""
        config = self._config(vhost_config)
        resources, contracts = _recorded(config, **vhost_args)
        steps = apply_update(self.broker, before.resources, resources, before_delete)
        return Deployment(self.vhost, config, resources, contracts, steps)
