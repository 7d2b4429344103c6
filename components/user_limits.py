"""Per-user limits (`applications[].limits`) as a Pulumi dynamic resource: pulumi-rabbitmq 3.5.3 has no resource
for RabbitMQ's `user-limits`, so this module is the provider, over the management API:
`PUT|DELETE /api/user-limits/<user>/<max-connections|max-channels>` and `GET /api/user-limits/<user>`.

What RabbitMQ 3.10.8 and 4.3.6 answer, measured alike on both (tests/broker/test_user_limits.py): a JSON integer
`value` (a string or a fraction is 400 "should be a number"), -1 for no limit, 0 for none allowed; 400
`no_such_user` for a user that does not exist; any other limit name 400 "Unrecognised terms"; a DELETE of a limit
that is not set 204. A limit binds the whole cluster: a user at its connection limit is refused
on every node (tests/cluster/test_shared_vhosts.py). Lowering a limit closes nothing: it refuses the next ones.

Credentials are never inputs, outputs or part of the serialized provider: `configure` reads the endpoint and the
deploying user from the stack's `rabbitmq:endpoint`, `rabbitmq:username` and `rabbitmq:password` (the provider's
own keys, which the engine hands every dynamic provider), else from `RABBITMQ_ENDPOINT`, `RABBITMQ_USERNAME` and
`RABBITMQ_PASSWORD`, the variables pulumi-rabbitmq reads too; its TLS settings likewise (`rabbitmq:cacertFile`,
`rabbitmq:clientcertFile`, `rabbitmq:clientkeyFile`, `rabbitmq:insecure`, else `RABBITMQ_CACERT`, …: docs/tls.md).
Requests go through the project's one management API client (`rabbitmq_retry_client.management`).
So the state holds the user name and its limits
only, and a rotated deploying password needs no change to the stack's resources.

Its methods are tested on both brokers and on both clusters, its registration under mocks, and the real engine
driving it (`pulumi up`, `preview`, `refresh`, `destroy`, a change by hand refreshed) on both brokers:
tests/broker/test_engine_user_limits.py. The engine runs it with the `python3` first on PATH (pulumi/pulumi#5455):
the Makefile puts the program's venv there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi.dynamic

from rabbitmq_retry_client.management import (
    TIMEOUT_S,
    ManagementClient,
    ManagementError,
    NotFoundError,
    TlsSettings,
    path_escape,
)

LIMIT_NAMES = {"max_connections": "max-connections", "max_channels": "max-channels"}
"""Config key → RabbitMQ's name of each user limit."""
DEFAULT_ENDPOINT = "http://127.0.0.1:15672"
"""pulumi-rabbitmq has no default endpoint; this one is the local broker of `make setup`, used only when neither
`rabbitmq:endpoint` nor RABBITMQ_ENDPOINT is set."""


class UserLimitsError(Exception):
    """A refused management API call, naming the user, the limit and the endpoint."""


class UserLimitsProvider(pulumi.dynamic.ResourceProvider):
    """Inputs and outputs: `user` (its ID too) and `limits`, RabbitMQ's limit name → integer."""

    serialize_as_secret_always = False
    """The serialized provider holds no secret (credentials come from `configure`): not made a secret, so that
    a preview shows the resource's inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoint = ""
        self.username = ""
        self.password = ""
        self.tls = TlsSettings()

    def configure(self, req: pulumi.dynamic.ConfigureRequest) -> None:
        self.endpoint = str(req.config.get("rabbitmq:endpoint") or os.environ.get("RABBITMQ_ENDPOINT")
                            or DEFAULT_ENDPOINT)
        self.username = str(req.config.get("rabbitmq:username") or os.environ.get("RABBITMQ_USERNAME") or "")
        self.password = str(req.config.get("rabbitmq:password") or os.environ.get("RABBITMQ_PASSWORD") or "")
        self.tls = TlsSettings.from_sources(req.config)

    # --- the management API ----------------------------------------------------------------------------------

    def _client(self) -> ManagementClient:
        try:
            return ManagementClient(self.endpoint, self.username, self.password, self.tls, TIMEOUT_S)
        except ManagementError as error:
            raise UserLimitsError(str(error)) from None

    def _put(self, user: str, limits: Mapping[str, int]) -> None:
        client = self._client()
        for name, value in limits.items():
            try:
                client.put(f"user-limits/{path_escape(user)}/{name}", {"value": int(value)})
            except ManagementError as error:
                raise UserLimitsError(f"user {user!r}: setting {name} to {value}: {error}") from None

    def _delete(self, user: str, names: list[str]) -> None:
        client = self._client()
        for name in names:
            try:
                client.delete(f"user-limits/{path_escape(user)}/{name}")
            except ManagementError as error:
                raise UserLimitsError(f"user {user!r}: removing {name}: {error}") from None

    def live(self, user: str) -> dict[str, int] | None:
        """The user's limits on the broker ({} when it has none), None when the user does not exist."""
        try:
            found = self._client().call("GET", f"user-limits/{path_escape(user)}")
        except NotFoundError:
            return None
        except ManagementError as error:
            raise UserLimitsError(f"user {user!r}: reading its limits: {error}") from None
        entry = next((e for e in found or [] if e.get("user") == user), None)
        return {k: int(v) for k, v in (entry or {}).get("value", {}).items()}

    # --- the provider's methods ------------------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = [pulumi.dynamic.CheckFailure(f"limits.{name}", f"{name}: expected one of "
                                                f"{', '.join(LIMIT_NAMES.values())} with an integer ≥ 0, got {value!r}")
                    for name, value in (news.get("limits") or {}).items()
                    if name not in LIMIT_NAMES.values() or not _whole(value) or int(value) < 0]
        if not isinstance(news.get("user"), str) or not news["user"]:
            failures.append(pulumi.dynamic.CheckFailure("user", "expected the user's name"))
        return pulumi.dynamic.CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        limits = _limits(props)
        self._put(props["user"], limits)
        return pulumi.dynamic.CreateResult(props["user"], {"user": props["user"], "limits": limits})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        changed = [key for key in ("user", "limits") if (_limits(olds) if key == "limits" else olds.get(key)) != (
            _limits(news) if key == "limits" else news.get(key))]
        # Another user is another object: its limits are set before the old user's are removed.
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=["user"] if "user" in changed else [],
                                         stables=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        old, new = _limits(olds), _limits(news)
        self._put(news["user"], {k: v for k, v in new.items() if old.get(k) != v})
        self._delete(news["user"], [k for k in old if k not in new])
        return pulumi.dynamic.UpdateResult({"user": news["user"], "limits": new})

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        """The limits this resource set; a user already deleted has none left (RabbitMQ drops them with it)."""
        if self.live(props["user"]) is None:
            return
        self._delete(props["user"], list(_limits(props)))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """What a refresh sees: the limits of the user now (the ones this resource manages), or no resource when
        the user is gone."""
        found = self.live(id_)
        if found is None:
            return pulumi.dynamic.ReadResult("", {})
        managed = {name: found[name] for name in LIMIT_NAMES.values() if name in found}
        return pulumi.dynamic.ReadResult(id_, {"user": id_, "limits": managed})


def _whole(value: Any) -> bool:
    """An integer as the engine hands it over (numbers arrive as floats)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()


def _limits(props: Mapping[str, Any]) -> dict[str, int]:
    return {name: int(value) for name, value in sorted((props.get("limits") or {}).items())}


class UserLimits(pulumi.dynamic.Resource, module="rabbitmq-retry", name="UserLimits"):
    """A user's limits, by RabbitMQ's limit name (`max-connections`, `max-channels`); removing the resource
    removes them. Type token `pulumi-python:dynamic/rabbitmq-retry:UserLimits`."""

    user: pulumi.Output[str]
    limits: pulumi.Output[dict[str, int]]

    def __init__(self, name: str, user: pulumi.Input[str], limits: Mapping[str, int],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(UserLimitsProvider(), name, {"user": user, "limits": dict(limits)}, opts)


TYPE = "pulumi-python:dynamic/rabbitmq-retry:UserLimits"
"""The type token the engine records for `UserLimits`."""
