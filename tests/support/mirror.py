"""Apply recorded Pulumi resources to a real RabbitMQ the way pulumi-rabbitmq 3.5.3 would.

Test support, not product: the mock recording (tools/lib/mockrun.py) says what the program declares;
this module sends exactly what the provider (terraform-provider-rabbitmq v1.10.1 over rabbit-hole
v3.2.0) sends for it, so the broker's answer is the answer `pulumi up` would get. It mirrors, from
docs/provider.md:
- §1 transport (rabbit-hole `client.go`): Go `url.PathEscape` of every path segment, Basic auth,
  JSON content type, no keep-alive, DELETE 404 = success, other >= 400 = "Error <code> (<error>): <reason>";
- §2, §3, §6 per resource (`resource_vhost.go`, `resource_queue.go`, `resource_exchange.go`,
  `resource_binding.go`, `resource_policy.go`, `resource_operator_policy.go`, `resource_user.go`,
  `resource_permissions.go`, `resource_topic_permissions.go`, `resource_shovel.go` with rabbit-hole's
  `shovels.go`): paths and exact JSON bodies, string-only
  `arguments` vs typed `argumentsJson` (§3.2), binding `properties_key` from the Location header (§5);
- §4 the policy definition ParseInt conversion on write and FormatFloat on read;
- §2 and tools/lib/engine.py for the plan: delete-before-replace for named resources, so a replaced
  queue loses its messages here as in real life;
- §7 the Read functions for `read_back`: what a `pulumi refresh` / next `pulumi up` would see differ
  (e.g. RabbitMQ 4's injected `x-queue-type`, §3.3).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from components.model.naming import binding_id
from components.user_limits import UserLimitsProvider
from rabbitmq_retry_client.management import TLS_SETTINGS, ManagementClient, TlsSettings
from tools.lib import engine
from tools.lib.drift import read_policy_value
from tools.lib.engine import Step, tf_string
from tools.lib.mockrun import Registered

TIMEOUT_S = 30
LIMITS = {"maxConnections": "max-connections", "maxQueues": "max-queues"}
_INT64 = re.compile(r"[+-]?[0-9]+")


@dataclass
class Broker:
    name: str
    host: str
    amqp_port: int
    management_port: int
    username: str = "guest"
    password: str = "guest"
    binding_keys: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    """properties_key of each applied binding, by vhost and URN: the part of the binding ID Pulumi's state keeps."""
    tls: TlsSettings | None = None
    """Set: the management API is HTTPS (`management_port` is its TLS port) and `amqp_port` is AMQPS, verified
    with these settings (the provider's `rabbitmq:cacertFile`, `clientcertFile`, `clientkeyFile`)."""

    @property
    def management_url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://{self.host}:{self.management_port}"

    @property
    def amqp_url(self) -> str:
        """`amqp(s)://user:password@host:port/` (the default vhost)."""
        return (f"{'amqps' if self.tls is not None else 'amqp'}://{quote(self.username, safe='')}:"
                f"{quote(self.password, safe='')}@{self.host}:{self.amqp_port}/%2F")

    def client(self) -> ManagementClient:
        """The project's management API client for this broker, with its TLS settings."""
        return ManagementClient(self.management_url, self.username, self.password, self.tls, TIMEOUT_S)

    def provider_config(self) -> dict[str, Any]:
        """The stack's `rabbitmq:` keys that point the provider (and the project's dynamic provider) here."""
        config: dict[str, Any] = {"rabbitmq:endpoint": self.management_url, "rabbitmq:username": self.username,
                                  "rabbitmq:password": self.password}
        if self.tls is not None:
            for field_name, setting in TLS_SETTINGS.items():
                value = getattr(self.tls, field_name)
                if value:
                    config[setting.config] = "true" if value is True else value
        return config


def user_limits_provider(broker: Broker) -> UserLimitsProvider:
    """The project's own provider for `UserLimits` (no Terraform provider to mirror: the provider is this code),
    configured as the engine would configure it from the stack's `rabbitmq:` keys."""
    import pulumi.dynamic

    from components.model.keys import NAMESPACE

    provider = UserLimitsProvider()
    provider.configure(pulumi.dynamic.ConfigureRequest(pulumi.dynamic.Config(broker.provider_config(), NAMESPACE)))
    return provider


def _limits_inputs(r: Registered) -> dict[str, Any]:
    """The inputs as the engine hands them to the provider (checked first, as `pulumi up` does)."""
    inputs = {"user": r.inputs["user"], "limits": dict(r.inputs.get("limits") or {})}
    failures = UserLimitsProvider().check({}, inputs).failures
    if failures:
        raise MirrorError(400, "check failed", f"{r.name}: " + "; ".join(f"{f.property}: {f.reason}" for f in failures))
    return inputs


class MirrorError(Exception):
    """A failed management API call, rendered as the provider reports it."""

    def __init__(self, status: int, error: str, reason: str) -> None:
        self.status, self.error, self.reason = status, error, reason
        unauthorized = "Error: API responded with a 401 Unauthorized"
        super().__init__(unauthorized if status == 401 else f"Error {status} ({error}): {reason}")


class ProtectedError(Exception):
    """Pulumi refuses to delete or replace a protected resource."""


class ImportRefusedError(Exception):
    """Pulumi refuses the import: the object is absent, or its inputs differ in a way that needs a replace
    ("previously-imported resources that still specify an ID may not be replaced")."""


def esc(segment: str) -> str:
    """Go's url.PathEscape."""
    return quote(segment, safe="$&+:=@")


def call(broker: Broker, method: str, path: str, body: Any = None) -> tuple[int, Any, dict[str, str]]:
    """One management API request as rabbit-hole makes it (Basic auth, a JSON body, no keep-alive, over TLS with
    the CA and client certificate of the provider's settings); returns (status, decoded JSON, headers)."""
    answer = broker.client().request(method, path, body)
    status, data, headers = answer.status, answer.data, answer.headers
    if status == 404 and method == "DELETE":
        return status, data, headers
    if status >= 400:
        info = data if isinstance(data, dict) else {}
        raise MirrorError(status, str(info.get("error", "")), str(info.get("reason", data)))
    return status, data, headers


def get(broker: Broker, path: str) -> Any:
    """GET, with None for 404 (the provider's checkDeleted: the resource is gone)."""
    try:
        return call(broker, "GET", path)[1]
    except MirrorError as error:
        if error.status == 404:
            return None
        raise


def _go_json(text: str) -> Any:
    """json.Unmarshal into `any` then Marshal: every number is a float64, printed without ".0"."""
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 1e21 else value
    return walk(json.loads(text, parse_int=float))


def _strings(arguments: dict[str, Any] | None) -> dict[str, str]:
    """A map<string> input: the bridge stringifies numbers and booleans (§3.1)."""
    return {k: tf_string(v) for k, v in (arguments or {}).items()}


def _arguments(settings: dict[str, Any]) -> dict[str, Any]:
    """Queue and binding arguments: typed from argumentsJson, else the string map."""
    if settings.get("argumentsJson"):
        return dict(_go_json(settings["argumentsJson"]))
    return _strings(settings.get("arguments"))


def _definition(definition: dict[str, Any], is_policy: bool) -> dict[str, Any]:
    """putPolicy / putOperatorPolicy: ha-params split for ha-mode=nodes, ParseInt of every value."""
    out: dict[str, Any] = {k: tf_string(v) for k, v in definition.items()}
    if is_policy and out.get("ha-mode") == "nodes" and isinstance(out.get("ha-params"), str):
        out["ha-params"] = out["ha-params"].split(",")
    for key, value in out.items():
        if isinstance(value, str) and _INT64.fullmatch(value) and -(2**63) <= int(value) < 2**63:
            out[key] = int(value)
    return out


def _atoi(value: Any) -> int:
    text = tf_string(value)
    return int(text) if _INT64.fullmatch(text) else 0


def _binding_path(i: dict[str, Any]) -> str:
    kind = "q" if i.get("destinationType") == "queue" else "e"
    return f"bindings/{esc(i['vhost'])}/e/{esc(i['source'])}/{kind}/{esc(i['destination'])}"


def _path(r: Registered) -> str:
    if r.type == engine.BINDING:
        return _binding_path(r.inputs)
    vhost, name, user = (esc(r.inputs.get(k) or d) for k, d in (("vhost", "/"), ("name", ""), ("user", "")))
    paths = {engine.VHOST: f"vhosts/{name}", engine.QUEUE: f"queues/{vhost}/{name}",
             engine.EXCHANGE: f"exchanges/{vhost}/{name}", engine.POLICY: f"policies/{vhost}/{name}",
             engine.OPERATOR_POLICY: f"operator-policies/{vhost}/{name}", engine.USER: f"users/{name}",
             engine.PERMISSIONS: f"permissions/{vhost}/{user}",
             engine.TOPIC_PERMISSIONS: f"topic-permissions/{vhost}/{user}",
             engine.SHOVEL: f"parameters/shovel/{vhost}/{name}"}
    if r.type not in paths:
        raise NotImplementedError(f"the mirror does not handle {r.type}")
    return paths[r.type]


SHOVEL_FIELDS: tuple[tuple[str, str, Any], ...] = (
    # (ShovelInfo input, JSON key of rabbit-hole's ShovelDefinition, the provider schema's default)
    ("ackMode", "ack-mode", "on-confirm"),
    ("addForwardHeaders", "add-forward-headers", None),
    ("deleteAfter", "delete-after", None),
    ("destinationAddForwardHeaders", "dest-add-forward-headers", None),
    ("destinationAddTimestampHeader", "dest-add-timestamp-header", False),
    ("destinationAddress", "dest-address", None),
    ("destinationApplicationProperties", "dest-application-properties", None),
    ("destinationExchange", "dest-exchange", None),
    ("destinationExchangeKey", "dest-exchange-key", None),
    ("destinationProperties", "dest-properties", None),
    ("destinationProtocol", "dest-protocol", "amqp091"),
    ("destinationPublishProperties", "dest-publish-properties", None),
    ("destinationQueue", "dest-queue", None),
    ("destinationQueueArguments", "dest-queue-args", None),
    ("prefetchCount", "prefetch-count", None),
    ("reconnectDelay", "reconnect-delay", 1),
    ("sourceAddress", "src-address", None),
    ("sourceDeleteAfter", "src-delete-after", None),
    ("sourceExchange", "src-exchange", None),
    ("sourceExchangeKey", "src-exchange-key", None),
    ("sourcePrefetchCount", "src-prefetch-count", None),
    ("sourceProtocol", "src-protocol", "amqp091"),
    ("sourceQueue", "src-queue", None),
)
"""`resource_shovel.go` (v1.10.1) `setShovelDefinition`: each `info` field into rabbit-hole v3.2.0's
`ShovelDefinition`, whose JSON tags are all `omitempty` (false, 0, "" and empty maps are not sent)."""
_DELETE_AFTER = frozenset({"delete-after", "src-delete-after"})


def shovel_definition(info: dict[str, Any]) -> dict[str, Any]:
    """The `value` the provider PUTs for a Shovel's `info`: both URIs as one-element lists, the schema's defaults
    filled in, empty values left out, and `delete-after` as a JSON integer when it is digits (`DeleteAfter`'s
    MarshalJSON), else the string (`"never"`, `"queue-length"`)."""
    value: dict[str, Any] = {"dest-uri": [info["destinationUri"]], "src-uri": [info["sourceUri"]]}
    for field_, key, default in SHOVEL_FIELDS:
        given = info.get(field_)
        given = default if given is None else given
        if given in (None, False, 0, "", {}):
            continue
        if key in _DELETE_AFTER:
            text = tf_string(given)
            value[key] = int(text) if _INT64.fullmatch(text) else text
        elif isinstance(given, float) and given.is_integer():
            value[key] = int(given)  # a Pulumi number is a float; the schema's TypeInt
        else:
            value[key] = given
    return value


def _masked(value: Any) -> Any:
    """A shovel URI's password hidden, as a failure message may show it (`amqp://user:***@host/vhost`)."""
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return re.sub(r"^(amqps?://[^:/@]*:).*@", r"\1***@", value) if isinstance(value, str) else value


def _vhost_body(i: dict[str, Any]) -> dict[str, Any]:
    """`tags` is always "" (the provider's field is commented out), so existing vhost tags are cleared."""
    body: dict[str, Any] = {"description": i.get("description") or "", "tags": ""}
    if i.get("defaultQueueType"):
        body["default_queue_type"] = i["defaultQueueType"]
    return {**body, "tracing": bool(i.get("tracing"))}


def _put_limits(broker: Broker, r: Registered) -> None:
    for key, limit in LIMITS.items():
        if r.inputs.get(key) not in (None, ""):
            call(broker, "PUT", f"vhost-limits/{esc(r.inputs['name'])}/{limit}", {"value": _atoi(r.inputs[key])})


def _create(broker: Broker, r: Registered) -> None:
    if r.type == engine.STASH:
        return  # a path guard: the engine stores its input in the state, nothing reaches the broker
    if r.type == engine.USER_LIMITS:
        user_limits_provider(broker).create(_limits_inputs(r))
        return
    i, path = r.inputs, _path(r)
    settings = i.get("settings") or {}
    if r.type == engine.VHOST:
        call(broker, "PUT", path, _vhost_body(i))
        _put_limits(broker, r)
    elif r.type in (engine.QUEUE, engine.EXCHANGE):
        body = {"type": settings.get("type", "") if r.type == engine.EXCHANGE else "",
                "durable": bool(settings.get("durable"))}
        if settings.get("autoDelete"):
            body["auto_delete"] = True
        if arguments := _arguments(settings) if r.type == engine.QUEUE else _strings(settings.get("arguments")):
            body["arguments"] = arguments
        call(broker, "PUT", path, body)
    elif r.type == engine.BINDING:
        body = {"source": i["source"], "vhost": i["vhost"], "destination": i["destination"],
                "destination_type": i.get("destinationType", ""), "routing_key": i.get("routingKey") or "",
                "arguments": _arguments(i)}
        _, _, headers = call(broker, "POST", path, body)
        location = next(v for k, v in headers.items() if k.lower() == "location")
        broker.binding_keys[f"{i['vhost']}|{r.urn}"] = unquote(location.rstrip("/").rsplit("/", 1)[-1])
    elif r.type in (engine.POLICY, engine.OPERATOR_POLICY):
        policy = i["policy"]
        call(broker, "PUT", path, {"vhost": i["vhost"], "pattern": policy["pattern"], "apply-to": policy["applyTo"],
                                   "name": i["name"], "priority": int(policy["priority"]),
                                   "definition": _definition(policy["definition"], r.type == engine.POLICY)})
    elif r.type == engine.USER:
        body = {"name": "", "tags": ",".join(i.get("tags") or [])}
        if i.get("password"):
            body["password"] = i["password"]
        call(broker, "PUT", path, body)
    elif r.type == engine.PERMISSIONS:
        p = i["permissions"]
        call(broker, "PUT", path, {"configure": p["configure"], "write": p["write"], "read": p["read"]})
    elif r.type == engine.TOPIC_PERMISSIONS:
        for p in i.get("permissions") or []:
            call(broker, "PUT", path, {"exchange": p["exchange"], "write": p["write"], "read": p["read"]})
    elif r.type == engine.SHOVEL:
        call(broker, "PUT", path, {"value": shovel_definition(i["info"])})


def _update(broker: Broker, old: Registered, new: Registered) -> None:
    """Only in-place types get here (every Queue/Exchange/Binding change is a replace)."""
    if new.type == engine.STASH:
        return
    if new.type == engine.USER_LIMITS:
        user_limits_provider(broker).update(old.inputs["user"], _limits_inputs(old), _limits_inputs(new))
        return
    if new.type == engine.TOPIC_PERMISSIONS:
        call(broker, "DELETE", _path(old))
    if new.type == engine.VHOST:
        call(broker, "PUT", _path(new), _vhost_body(new.inputs))
        for limit in LIMITS.values():
            call(broker, "DELETE", f"vhost-limits/{esc(new.inputs['name'])}/{limit}")
        _put_limits(broker, new)
    else:
        _create(broker, new)


def _binding_key(broker: Broker, r: Registered) -> str | None:
    """From state; without it, the broker binding with the same routing key and arguments."""
    i = r.inputs
    if (key := broker.binding_keys.get(f"{i['vhost']}|{r.urn}")) is not None:
        return key
    wanted = (i.get("routingKey") or "", _arguments(i))
    return next((b["properties_key"] for b in get(broker, _binding_path(i)) or []
                 if (b.get("routing_key"), b.get("arguments") or {}) == wanted), None)


BeforeDelete = Callable[[Registered], None]
"""Runs a record's `before_delete` resource hooks as the engine would before deleting it; raising stops the update
there (e.g. the queue guard: tests/broker/test_guard.py)."""
BeforeUpdate = Callable[[Registered, Registered], None]
"""Runs a record's `before_update` resource hooks (old, new) as the engine would before updating it in place; raising
fails that step (e.g. the path guards: tests/broker/test_path_guard.py)."""


def _delete(broker: Broker, r: Registered, before_delete: BeforeDelete | None = None) -> None:
    if before_delete is not None and r.hooks.get("before_delete"):
        before_delete(r)
    if r.retain_on_delete or r.type == engine.STASH:
        return  # Pulumi drops it from state and leaves it on the broker; a path guard is only in the state
    if r.type == engine.USER_LIMITS:
        user_limits_provider(broker).delete(r.inputs["user"], _limits_inputs(r))
    elif r.type == engine.BINDING:
        key = _binding_key(broker, r)
        if key is not None:
            call(broker, "DELETE", f"{_path(r)}/{esc(key)}")
    else:
        call(broker, "DELETE", _path(r) + ("?" if r.type == engine.QUEUE else ""))


def _custom(resources: Sequence[Registered]) -> list[Registered]:
    return [r for r in resources if r.custom]


def _import_target(r: Registered) -> str:
    """The ID the provider would give the object the record declares (a binding's without its key)."""
    i = r.inputs
    if r.type == engine.BINDING:
        return binding_id(i["vhost"], i["source"], i["destination"], i.get("destinationType") or "queue", "")
    return f"{i.get('name')}@{i.get('vhost') or '/'}"


def import_existing(broker: Broker, r: Registered) -> list[str]:
    """`import_`: Read by ID, then compare the program's inputs with what Read stored. Equal: nothing is
    written. Different in place (policies): import, then update. Different in a replace-forcing input, or
    absent: Pulumi fails the import. Returns the differences found."""
    target = _import_target(r)
    if not (r.import_id.startswith(target) if r.type == engine.BINDING else r.import_id == target):
        raise ImportRefusedError(f"{r.name}: import ID {r.import_id!r} names another object than the program "
                                 f"({target!r})")
    if r.type == engine.BINDING:
        broker.binding_keys[f"{r.inputs['vhost']}|{r.urn}"] = r.import_id.rsplit("/", 1)[-1]
    differences = _read_one(broker, r)
    if any(line.endswith("(recreate)") or line.endswith("(replace)") or "refresh fails" in line
           for line in differences):
        raise ImportRefusedError(f"{r.name}: cannot import {r.import_id!r}: " + "; ".join(differences))
    if differences:
        _update(broker, r, r)
    return differences


def apply(broker: Broker, resources: Sequence[Registered]) -> None:
    """`pulumi up` from empty state: create every custom resource in dependency order, or import it when
    it carries an import ID (read and compare; no write unless an in-place update is due)."""
    records = engine.creation_order(_custom(resources))
    for record in records:  # Pulumi checks every import before it creates anything
        if record.import_id:
            _check_import_target(broker, record)
    for record in records:
        if record.import_id:
            import_existing(broker, record)
        else:
            _create(broker, record)


def _check_import_target(broker: Broker, r: Registered) -> None:
    if r.type != engine.BINDING and get(broker, _path(r)) is None:
        raise ImportRefusedError(f"{r.name}: import ID {r.import_id!r}: not found on the broker")


def _run_in_order(records: Sequence[Registered], waits_for: Callable[[Registered], set[str]],
                  run: Callable[[Registered], None]) -> Exception | None:
    """Run each record once everything it waits for has run; a record whose run raised, and everything that waits for
    it, is not run. Everything else is: the engine starts every step whose prerequisites are done, in parallel, and a
    failure stops only what has not started, so any step that does not wait for the failed one may already have run
    (the worst case, for the tests). Returns the first failure."""
    failed: set[str] = set()
    first: Exception | None = None
    for record in records:
        if waits_for(record) & failed:
            failed.add(record.urn)
            continue
        try:
            run(record)
        except Exception as error:  # any step's failure stops what waits for it, as the engine's does
            failed.add(record.urn)
            first = first or error
    return first


def _dependents(records: Sequence[Registered]) -> dict[str, set[str]]:
    """urn → the urns among `records` that depend on it or are its children (deleted before it)."""
    urns = {r.urn for r in records}
    users: dict[str, set[str]] = {r.urn: set() for r in records}
    for r in records:
        for dep in [*r.dependencies, r.parent]:
            if dep in urns and dep != r.urn:
                users[dep].add(r.urn)
    return users


def apply_update(broker: Broker, old: Sequence[Registered], new: Sequence[Registered],
                 before_delete: BeforeDelete | None = None, before_update: BeforeUpdate | None = None) -> list[Step]:
    """`pulumi up` from `old` to `new` in the engine's order, with the hooks where the engine calls them:
    1. creates, updates and replacements in dependency order (a record's step waits for the steps of what it depends
       on; `before_update` before an update). A replacement of a named resource is delete-before-replace: at its
       step, the old resource and the dependents replaced with it are deleted (dependents first, `before_delete`
       before each), then it is created;
    2. only when every step of 1 succeeded: deletions of what `new` no longer declares (and create-before-delete
       leftovers), dependents first (`before_delete` before each).
    A failed step stops whatever waits for it, and phase 2; everything else may have run, so it does here
    (`_run_in_order`). Raises the first failure, with a note of what the update did before it stopped, as the engine
    lists it. `before_delete`/`before_update`: None skips the engine's part (running the hooks)."""
    steps = engine.diff(old, new)
    blocked = [s.name for s in steps if s.custom and s.protect and s.op in ("replace", "delete")]
    if blocked:
        raise ProtectedError(f"unable to delete or replace protected resources: {', '.join(blocked)}")
    old_by = {r.urn: r for r in old}
    step_by = {s.urn: s for s in steps if s.custom}
    replaced_first = [old_by[s.urn] for s in step_by.values() if s.op == "replace" and s.delete_before_replace]
    replaced_users = _dependents(replaced_first)
    deleted: set[str] = set()
    done: list[str] = []

    def delete(record: Registered) -> None:
        _delete(broker, record, before_delete)
        deleted.add(record.urn)
        done.append(f"deleted {engine.short_type(record.type)} {record.inputs.get('name') or record.name}")

    def with_dependents(urn: str) -> list[Registered]:
        found, todo = {urn}, [urn]
        while todo:
            for user in replaced_users.get(todo.pop(), ()):
                if user not in found:
                    found.add(user)
                    todo.append(user)
        return [r for r in engine.deletion_order(replaced_first) if r.urn in found and r.urn not in deleted]

    def step(record: Registered) -> None:
        current = step_by[record.urn]
        if current.op == "replace" and current.delete_before_replace:
            for gone in with_dependents(record.urn):
                delete(gone)
        if current.op in ("create", "replace"):
            _create(broker, record)
            done.append(f"{current.op}d {engine.short_type(record.type)} {record.inputs.get('name') or record.name}")
        elif current.op == "update":
            if before_update is not None and record.hooks.get("before_update"):
                before_update(old_by[record.urn], record)
            _update(broker, old_by[record.urn], record)
            done.append(f"updated {engine.short_type(record.type)} {record.inputs.get('name') or record.name}")

    creating = engine.creation_order(_custom(new))
    index = {r.urn for r in creating}
    failure = _run_in_order(creating, lambda r: {d for d in [*r.dependencies, r.parent] if d in index}, step)
    if failure is None:
        leftovers = [old_by[s.urn] for s in step_by.values()
                     if s.op == "delete" or (s.op == "replace" and not s.delete_before_replace)]
        users = _dependents(leftovers)
        failure = _run_in_order(engine.deletion_order(leftovers), lambda r: users[r.urn], delete)
    if failure is not None:
        failure.add_note(f"applied before the update stopped: {', '.join(done) or 'nothing'}")
        raise failure
    return steps


def destroy(broker: Broker, resources: Sequence[Registered]) -> None:
    """`pulumi destroy`: dependents first; protected resources stop it."""
    records = _custom(resources)
    if blocked := [r.name for r in records if r.protect]:
        raise ProtectedError(f"unable to delete protected resources: {', '.join(blocked)}")
    for record in engine.deletion_order(records):
        _delete(broker, record)


def _compare(label: str, type_: str, path: str, program: Any, broker: Any) -> list[str]:
    verdict = "replace" if engine.forces_replace(type_, path) else "update in place"
    return [f"{label}: {path}: program {program!r}, broker {broker!r} ({verdict})"]


def _read_one(broker: Broker, r: Registered) -> list[str]:
    i, t = r.inputs, r.type
    label = f"{t.rsplit(':', 1)[-1]} {r.name}"
    if t == engine.USER_LIMITS:
        read = user_limits_provider(broker).read(i["user"], _limits_inputs(r))
        if not read.id:
            return [f"{label}: gone from the broker (recreate)"]
        wanted, found = _limits_inputs(r)["limits"], (read.outs or {}).get("limits", {})
        return [line for k in sorted(set(wanted) | set(found)) if wanted.get(k) != found.get(k)
                for line in _compare(label, t, f"limits.{k}", wanted.get(k), found.get(k))]
    if t == engine.BINDING:
        try:
            listed = get(broker, _binding_path(i)) or []
        except MirrorError as error:  # ReadBinding returns list errors as they are
            return [f"{label}: refresh fails: {error}"]
        key = _binding_key(broker, r)
        return [] if any(b["properties_key"] == key for b in listed) else [f"{label}: gone from the broker (recreate)"]
    info = get(broker, _path(r))
    if info is None:
        return [f"{label}: gone from the broker (recreate)"]
    pairs: list[tuple[str, Any, Any]] = []
    settings = i.get("settings") or {}
    if t == engine.VHOST:
        pairs += [("description", i.get("description") or "", info.get("description") or ""),
                  ("tracing", bool(i.get("tracing")), bool(info.get("tracing")))]
        limits = [entry.get("value", {}) for entry in get(broker, f"vhost-limits/{esc(i['name'])}") or []]
        if limits:
            pairs += [(key, _atoi(i[key]) if i.get(key) else None, limits[0].get(name)) for key, name in LIMITS.items()]
    elif t in (engine.QUEUE, engine.EXCHANGE):
        pairs += [("settings.durable", bool(settings.get("durable")), bool(info.get("durable"))),
                  ("settings.autoDelete", bool(settings.get("autoDelete")), bool(info.get("auto_delete")))]
        if t == engine.EXCHANGE:
            pairs.append(("settings.type", settings.get("type"), info.get("type")))
        wanted = _arguments(settings) if t == engine.QUEUE else _strings(settings.get("arguments"))
        found = info.get("arguments") or {}
        where = "settings.argumentsJson" if settings.get("argumentsJson") else "settings.arguments"
        for path in engine.json_changes(wanted, found, where):
            key = path[len(where) + 1:]
            pairs.append((path, wanted.get(key, "<absent>"), found.get(key, "<absent>")))
    elif t in (engine.POLICY, engine.OPERATOR_POLICY):
        policy = i["policy"]
        pairs += [("policy.pattern", policy["pattern"], info.get("pattern")),
                  ("policy.applyTo", policy["applyTo"], info.get("apply-to")),
                  ("policy.priority", int(policy["priority"]), info.get("priority"))]
        wanted = {k: tf_string(v) for k, v in policy["definition"].items()}
        found = {k: read_policy_value(v) for k, v in (info.get("definition") or {}).items()}
        pairs += [(f"policy.definition.{k}", wanted.get(k, "<absent>"), found.get(k, "<absent>"))
                  for k in sorted(set(wanted) | set(found))]
    elif t == engine.USER:
        tags = info.get("tags") or []
        tags = tags.split(",") if isinstance(tags, str) else tags
        if tags:  # Read sets tags only when non-empty; the password is never read
            pairs.append(("tags", list(i.get("tags") or []), list(tags)))
    elif t == engine.PERMISSIONS:
        pairs += [(f"permissions.{k}", i["permissions"][k], info.get(k)) for k in ("configure", "write", "read")]
    elif t == engine.TOPIC_PERMISSIONS:
        def entries(items: Any) -> list[tuple[str, str, str]]:
            return sorted((p["exchange"], p["write"], p["read"]) for p in items or [])
        pairs.append(("permissions", entries(i.get("permissions")), entries(info)))
    elif t == engine.SHOVEL:
        # ReadShovel reads every field back from the parameter; the program's info, as sent, against it.
        wanted, found = shovel_definition(i["info"]), dict(info.get("value") or {})
        pairs += [(f"info.{key}", _masked(wanted.get(key, "<absent>")), _masked(found.get(key, "<absent>")))
                  for key in sorted(set(wanted) | set(found))]
    return [line for path, want, have in pairs if want != have for line in _compare(label, t, path, want, have)]


def read_back(broker: Broker, resources: Sequence[Registered]) -> list[str]:
    """What a refresh would find different from the program; [] means the next `pulumi up` plans nothing."""
    return [line for record in engine.creation_order(_custom(resources)) if record.type != engine.STASH
            for line in _read_one(broker, record)]
