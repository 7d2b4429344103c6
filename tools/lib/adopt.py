"""Take over a vhost whose topology applications declare at runtime, with nothing lost (`make adopt`,
tools/adopt.py): a fate for every object of a vhost snapshot (import, create beside, retire later, left alone),
the stack file in this project's config schema, and the Markdown report."""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

import yaml

from components import Vhost
from components.config.load import load_vhost
from components.config.pulumi_yaml import PROJECT
from components.config.stack_settings import AMQP_PORT
from components.migrations import move
from components.model import naming, wire
from components.model.durations import format_duration
from components.model.key_paths import entry_paths
from components.model.keys import NAMESPACE
from components.model.naming import binding_id
from components.model.plan_types import Grant
from components.model.problems import ConfigError
from components.model.stack_config import DEFAULT_POLICY_PRIORITY
from components.plan.checks import check_vhost
from components.plan.planner import plan_vhost
from components.pulumi.resources import ShovelAccess
from tools.lib import engine
from tools.lib.drift import COMPARED, binding_label, compare, import_id, markdown_table
from tools.lib.markdown import code, names
from tools.lib.mockrun import Registered, close_event_loop, record
from tools.lib.recognise import Topology, delay_levels, own_policy, recognise, unclear
from tools.lib.snapshot import DefinitionsError, Snapshot
from tools.lib.unowned import kept_detail, unmanageable_exchange, unmanageable_queue

DEFAULT_SUFFIX = ".v2"
PLAIN_ARGUMENTS = frozenset({wire.QUEUE_TYPE.argument})
"""The only argument every plain queue of ours carries."""
QUORUM_GROUP_ARGUMENT = wire.QUORUM_INITIAL_GROUP_SIZE.argument
"""A quorum queue's argument the stack declares too (`quorum_group_size`): an adopted queue keeps it."""

Action = str
IMPORT, BESIDE, RETIRE, ALONE = "import", "create beside", "retire later", "left alone"
GRANT = "granted as it is"
ACTIONS = (IMPORT, GRANT, BESIDE, RETIRE, ALONE)


@dataclass(frozen=True)
class Decision:
    action: Action
    type: str
    name: str
    detail: str = ""


@dataclass
class Adoption:
    """The adopted vhost: its config entry (the `vhosts[]` shape), and the fate of every object."""

    snapshot: Snapshot
    vhost: dict[str, Any]
    topologies: list[Topology] = field(default_factory=list)
    beside: dict[str, str] = field(default_factory=dict)
    """Old queue → the new queue created beside it."""
    decisions: list[Decision] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    """Queue not recognised as a retry topology → what it does, kept as it is (imported with its arguments)."""
    migrations: list[dict[str, Any]] = field(default_factory=list)
    """A `migrations[]` entry (`move.external`) per old queue taken over beside."""
    records: list[Registered] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    required: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Queue (as the stack declares it) → the retry keys still to decide (`Topology.required`): planned with a
    provisional value, written to the stack file as `REQUIRED`, which `make plan` refuses with the key's path."""

    def decide(self, action: Action, type_: str, name: str, detail: str = "") -> None:
        self.decisions.append(Decision(action, type_, name, detail))


def _group_size_of(queue_type: str, value: object) -> bool:
    """Whether `quorum_group_size` can say what the queue's `x-quorum-initial-group-size` says."""
    return queue_type == "quorum" and isinstance(value, int) and not isinstance(value, bool) and value >= 1


VERSIONED = re.compile(r"^(?P<base>.*)\.v(?P<n>[0-9]+)$")
"""A name that already ends in a version (`render.commands.v1`): its successor is the next version, not `.v1.v2`."""


def _free_name(snapshot: Snapshot, queue: str, suffix: str, taken: set[str]) -> str:
    """`queue + suffix` (then `.v3`, `.v4`, … for the default suffix; for a name ending in `.v<n>`, `.v<n+1>`,
    `.v<n+2>`, …), unused by the broker and by this plan, derived names included."""
    versioned = VERSIONED.match(queue) if suffix == DEFAULT_SUFFIX else None
    if versioned:
        base, first = versioned["base"], int(versioned["n"]) + 1
        candidates = [f"{base}.v{n}" for n in range(first, first + 98)]
    else:
        candidates = [f"{queue}{suffix}"] + ([f"{queue}.v{n}" for n in range(3, 100)] if suffix == DEFAULT_SUFFIX
                                             else [])
    for name in candidates:
        derived = {name, *naming.derived_queue_names(name, 9), *naming.derived_exchange_names(name)}
        if not derived & (snapshot.queues.keys() | snapshot.exchanges.keys() | taken):
            taken.add(name)
            return name
    raise DefinitionsError(f"no free name beside queue {queue!r}; pass another --suffix")


def _binding_entry(b: dict[str, Any], managed_exchanges: set[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"exchange": b["source"]}
    if b.get("routing_key"):
        entry["routing_key"] = b["routing_key"]
    if b.get("arguments"):
        entry["arguments"] = dict(b["arguments"])
    if b["source"] not in managed_exchanges:
        entry["external"] = True
    return entry


def _retry_block(topology: Topology) -> dict[str, Any]:
    if topology.kind == "levels":
        retry: dict[str, Any] = {"strategy": "levels", "backoff": dict(topology.backoff)}
    elif topology.kind == "native":
        retry = {"strategy": "native", "min_delay": format_duration(topology.delays_ms[0]),
                 "max_delay": format_duration(topology.delays_ms[1])}
    else:
        retry = {"delays": [format_duration(d) for d in topology.delays_ms]}
    retry["max_retries"] = topology.max_retries
    if "error_retention" in topology.limits:
        retry["error_retention"] = format_duration(topology.limits["error_retention"])
    if "error_max_length" in topology.limits:
        retry["error_max_length"] = topology.limits["error_max_length"]
    return retry


def _policy_entry(policy: dict[str, Any]) -> dict[str, Any] | str:
    """The policy in the config's shape, or why it cannot be written there."""
    definition = {}
    for key, value in (policy.get("definition") or {}).items():
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return f"definition.{key} is {value!r}: the provider's definition holds strings and integers only"
        definition[key] = value
    return {"name": policy["name"], "pattern": policy.get("pattern", ""), "priority": int(policy.get("priority", 0)),
            "apply_to": policy.get("apply-to", "all"), "definition": definition}


@dataclass
class _Owned:
    """What the recognised topologies own, and what the build has placed so far."""

    queues: set[str]
    retired_exchanges: set[str]
    bindings: set[int]
    policies: set[str]
    managed_exchanges: set[str] = field(default_factory=set)
    bound: set[int] = field(default_factory=set)
    """Bindings written into a queue entry (or retired with the queue they bind)."""
    levels: set[str] = field(default_factory=set)
    """The objects of the vhost's delay levels (`delay_levels`), when the stack declares them."""


def build(snapshot: Snapshot, suffix: str = DEFAULT_SUFFIX,
          contracts: Mapping[str, Mapping[str, Any]] | None = None) -> Adoption:
    """The config entry of the vhost and the decisions that do not need the plan (retire, left alone)."""
    vhost: dict[str, Any] = {"name": snapshot.vhost, "existing": True, "exchanges": [], "queues": [],
                             "policies": [], "operator_policies": []}
    topologies = with_contracts(recognise(snapshot), contracts or {})
    adoption = Adoption(snapshot, vhost, topologies)
    owned = _Owned({q for t in topologies for q in t.queues},
                   {x for t in topologies if t.kind not in IN_PLACE for x in t.exchanges},
                   {i for t in topologies for i in t.bindings}, {p for t in topologies for p in t.policies})
    _delay_levels(adoption, owned)
    _exchanges(adoption, owned)
    _take_over(adoption, owned, suffix)
    _queues(adoption, owned, unclear(snapshot, topologies))
    _bindings_left(adoption, owned)
    _policies_of(adoption, owned)
    _access(adoption)
    _drop_refused(adoption)
    successors = {q["name"] for q in vhost["queues"]}
    taken: set[str] = set()
    for migration in adoption.migrations:
        if migration[move.NAME]["to"] in successors:
            name = migration["name"]  # unique among the stack file's migrations: `-2`, `-3`, … appended
            migration["name"] = next(n for n in (name, *(f"{name}-{i}" for i in range(2, 1000))) if n not in taken)
            taken.add(migration["name"])
            vhost.setdefault("migrations", []).append(migration)
    return adoption


IN_PLACE = ("ours", "levels", "native")
"""Topologies of this project's own strategies: imported as they are, never moved."""


def _delay_levels(adoption: Adoption, owned: _Owned) -> None:
    """The vhost's delay levels, when a queue of strategy levels uses them: declared by the stack's `delay_levels`
    (its objects imported); `max_delay` from a levels queue's retry contract, else a decision (the broker keeps only
    how many levels it took)."""
    levels = delay_levels(adoption.snapshot)
    users = [t for t in adoption.topologies if t.kind == "levels"]
    if levels is None or not users:
        return
    told = next((t.limits["max_delay"] for t in users if "max_delay" in t.limits), None)
    entry: dict[str, Any] = {"unit": format_duration(levels.unit_ms),
                             "max_delay": format_duration(told or levels.unit_ms * (2 ** levels.levels - 1)),
                             "type": levels.queue_type}
    if levels.quorum_group_size is not None:
        entry["quorum_group_size"] = levels.quorum_group_size
    if told is None:
        adoption.required[""] = ("max_delay",)
    adoption.vhost["delay_levels"] = entry
    owned.queues |= {n for n in adoption.snapshot.queues if levels.owns(n)}
    owned.policies |= {n for n in adoption.snapshot.policies if levels.owns(n)}
    owned.levels = set(levels.objects)
    owned.bindings |= {i for i, b in enumerate(adoption.snapshot.bindings)
                       if levels.owns(str(b["source"])) or levels.owns(str(b["destination"]))}


def _exchanges(adoption: Adoption, owned: _Owned) -> None:
    """Each exchange: retired with its topology, declared by our retryable queue, left alone, or declared."""
    for name, info in sorted(adoption.snapshot.exchanges.items()):
        if name.startswith(naming.RESERVED_PREFIX):
            continue
        if name in owned.levels:
            owned.managed_exchanges.add(name)  # declared by the vhost's delay levels
            continue
        if name in owned.retired_exchanges:
            sharing = [t.queue for t in adoption.topologies if name in t.exchanges]
            shared = (f"; shared by the loops of {names(sharing)}: each loop's retire keeps it while another's route "
                      "still uses it" if len(sharing) > 1 else "")
            adoption.decide(RETIRE, "Exchange", name, "part of a runtime retry topology; delete it once its queues "
                            "are drained and deleted" + shared)
        elif any(name in naming.derived_exchange_names(t.queue) for t in adoption.topologies if t.kind in IN_PLACE):
            owned.managed_exchanges.add(name)  # declared by the retryable queue that owns it
        elif (why := unmanageable_exchange(info)) is not None:
            adoption.decide(ALONE, "Exchange", name, why)
        else:
            owned.managed_exchanges.add(name)
            adoption.vhost["exchanges"].append({"name": name, "type": info["type"]})


def _queue_entry(adoption: Adoption, owned: _Owned, name: str, queue_type: str, old: str,
                 retry: dict[str, Any] | None = None) -> dict[str, Any]:
    """A queue entry named `name`, bound as `old` is (bindings of `old` the topologies do not own)."""
    entry: dict[str, Any] = {"name": name, "type": queue_type}
    bindings = []
    for i, b in enumerate(adoption.snapshot.bindings):
        if b["destination"] != old or b["destination_type"] != "queue" or i in owned.bindings:
            continue
        owned.bound.add(i)
        if b["source"] in owned.retired_exchanges:
            continue
        bindings.append(_binding_entry(b, owned.managed_exchanges))
        if name != old:
            adoption.decide(RETIRE, "Binding", binding_label(b), "unbound by `make migrate-retire` right after the "
                            "first `pulumi up` (below): the new queue receives these messages from then on")
    if bindings:
        entry["bindings"] = bindings
    if retry is not None:
        entry["retry"] = retry
    return entry


def _take_over(adoption: Adoption, owned: _Owned, suffix: str) -> None:
    """Each recognised topology: ours imported as it is; a runtime one taken over beside, its objects retired."""
    snapshot, taken = adoption.snapshot, set[str]()
    for topology in adoption.topologies:
        if topology.kind in IN_PLACE:
            entry = _queue_entry(adoption, owned, topology.queue, topology.queue_type, topology.queue,
                                 _retry_block(topology))
            entry |= {key: topology.limits[key] for key in ("max_length", "delivery_limit") if key in topology.limits}
            entry |= _priority(adoption.snapshot, topology.queue)
            if topology.required:
                adoption.required[topology.queue] = topology.required
            adoption.vhost["queues"].append(entry)
            continue
        new = _free_name(snapshot, topology.queue, suffix, taken)
        adoption.beside[topology.queue] = new
        if topology.required:
            adoption.required[new] = topology.required
        adoption.vhost["queues"].append(_queue_entry(adoption, owned, new, topology.queue_type, topology.queue,
                                                     _retry_block(topology)))
        adoption.migrations.append(_migration(topology.queue, new, topology))
        for queue in topology.queues:
            adoption.decide(RETIRE, "Queue", queue, f"{topology.kind}: " + _messages(snapshot, queue))
        for i in topology.bindings:
            adoption.decide(RETIRE, "Binding", binding_label(snapshot.bindings[i]),
                            f"{topology.kind} wiring of {code(topology.queue)}")
        for policy_name in topology.policies:
            adoption.decide(RETIRE, "Policy", policy_name, f"sets the dead-lettering of {topology.kind} queues; "
                            "delete it once they are gone")


def _priority(snapshot: Snapshot, queue: str) -> dict[str, int]:
    """`policy_priority` of a queue whose own policy (named as the queue) has another priority than the default."""
    priority = (snapshot.policies.get(queue) or {}).get("priority")
    if not isinstance(priority, int) or priority == DEFAULT_POLICY_PRIORITY:
        return {}
    return {"policy_priority": priority}


def _queues(adoption: Adoption, owned: _Owned, ambiguous: Mapping[str, str]) -> None:
    """Every queue no topology owns: left alone, or imported as it is (with every argument it has when the plain
    shape would drop one)."""
    snapshot, untyped = adoption.snapshot, []
    for name, info in sorted(snapshot.queues.items()):
        if name in owned.queues:
            continue
        if (why := unmanageable_queue(snapshot, name)) is not None:
            adoption.decide(ALONE, "Queue", name, why)
            continue
        arguments = dict(info.get("arguments") or {})
        queue_type = str(arguments.get(wire.QUEUE_TYPE.argument) or info.get("type") or "classic")
        group_size = arguments.get(QUORUM_GROUP_ARGUMENT)
        kept = PLAIN_ARGUMENTS | ({QUORUM_GROUP_ARGUMENT} if _group_size_of(queue_type, group_size) else set())
        entry = _queue_entry(adoption, owned, name, queue_type, name)
        if (policy := own_policy(snapshot, name)) is not None:  # its limits, as the stack derives them again
            owned.policies.add(name)
            definition = policy.get("definition") or {}
            entry |= {ours: int(definition[theirs]) for theirs, ours in ((wire.MAX_LENGTH.key, "max_length"),
                                                                          (wire.DELIVERY_LIMIT.key, "delivery_limit"))
                      if theirs in definition} | _priority(snapshot, name)
        if set(arguments) <= kept and wire.QUEUE_TYPE.argument in arguments and name not in ambiguous:
            if QUORUM_GROUP_ARGUMENT in kept:
                entry["quorum_group_size"] = group_size
        else:
            # Kept as it is, every argument with it: imported, never moved (a message waiting in a TTL queue comes
            # back on time through its own dead-letter route; a shovel would end its wait early).
            entry["arguments"] = arguments
            adoption.kept[name] = "; ".join(filter(None, (kept_detail(snapshot, name), ambiguous.get(name))))
            if wire.QUEUE_TYPE.argument not in arguments:
                untyped.append(name)
        if queue_type == "quorum":
            limit = arguments.get(wire.DELIVERY_LIMIT.argument)
            if isinstance(limit, int) and not isinstance(limit, bool):
                entry["delivery_limit"] = limit
            elif "delivery_limit" not in entry:
                adoption.warnings.append(f"quorum queue {code(name)}: the stack gives it a `delivery-limit` policy "
                                         "(`defaults.delivery_limit`, 20; RabbitMQ 4's default, unlimited on 3.x): "
                                         "set `delivery_limit` on the queue if it needs another")
        adoption.vhost["queues"].append(entry)
    if untyped:
        adoption.warnings.append(
            f"{len(untyped)} queue{'s' * (len(untyped) != 1)} without x-queue-type (RabbitMQ before 4.0 stores none), "
            f"each imported with exactly the arguments it has: {names(untyped)}. RabbitMQ 4 stores `x-queue-type: "
            "classic` on every queue: after upgrading the broker, add `x-queue-type: classic` to their `arguments` "
            "before the next `pulumi up --refresh` (else the provider plans a replacement, which the queue guard "
            "refuses while a queue holds messages)")


def _bindings_left(adoption: Adoption, owned: _Owned) -> None:
    for i, b in enumerate(adoption.snapshot.bindings):
        if i in owned.bindings or i in owned.bound:
            continue
        adoption.decide(ALONE, "Binding", binding_label(b),
                        "to an exchange (not declared by this project)" if b["destination_type"] == "exchange"
                        else "its queue is not managed by the stack")


def names_granted(regex: str, candidates: Iterable[str]) -> list[str] | None:
    """The names among `candidates` that the permission regex allows (applied as RabbitMQ applies it, never parsed),
    when it is exactly what this project grants for them (`Grant.exactly`); else None."""
    try:
        allowed = [n for n in candidates if re.fullmatch(regex, n)]
    except re.error:
        return None
    return sorted(allowed) if Grant.exactly(allowed).regex == regex else None


def _access(adoption: Adoption) -> None:
    """Each user's permissions in the vhost, as the `applications` or `operators` entry that grants exactly them (the
    plan checks them against the broker in `finish`), or left alone: a regex this project does not write."""
    snapshot, vhost = adoption.snapshot, adoption.vhost
    retryable = sorted(naming.error_queue(q["name"]) for q in vhost["queues"] if "retry" in q)
    exchanges = {x["name"] for x in vhost["exchanges"]}
    for user, granted in sorted(snapshot.permissions.items()):
        if user == snapshot.reader:
            continue  # the provider's own user, which RabbitMQ granted when the vhost was created
        read = names_granted(str(granted.get("read")), snapshot.queues)
        write = names_granted(str(granted.get("write")), snapshot.exchanges)
        if granted.get("configure") != "^$" or read is None or write is None:
            adoption.decide(ALONE, "Permissions", user, "not granted the way this project grants them (configure "
                            "`^$`, reads and writes of exact names)")
            continue
        if read and read == retryable:
            vhost.setdefault("operators", []).append({"user": user})
            continue
        application: dict[str, Any] = {"user": user}
        publishes = sorted(n for n in write if n in exchanges)
        topics = [{k: entry[k] for k in ("exchange", "write", "read") if k in entry}
                  for entry in snapshot.topic_permissions.get(user, []) if entry.get("exchange") in publishes]
        limits = {ours: value for theirs, ours in (("max-connections", "max_connections"),
                                                   ("max-channels", "max_channels"))
                  if isinstance(value := (snapshot.user_limits or {}).get(user, {}).get(theirs), int)}
        application |= {k: v for k, v in (("publishes", publishes), ("consumes", read), ("topic_permissions", topics),
                                          ("limits", limits)) if v}
        vhost.setdefault("applications", []).append(application)


def _policies_of(adoption: Adoption, owned: _Owned) -> None:
    """User and operator policies: declared as they are, or left alone with the reason."""
    new_queues = [n for q in adoption.beside.values() for n in naming.derived_queue_names(q, 9)]
    for name, policy in sorted(adoption.snapshot.policies.items()):
        if name in owned.policies:  # retired with its topology, or (ours) derived by the plan again
            continue
        if hits := [q for q in new_queues if re.search(str(policy.get("pattern", "")), q)]:
            adoption.decide(ALONE, "Policy", name, f"its pattern also matches the new queue {code(hits[0])}: narrow "
                            "it (e.g. `^name$`), then add it to the stack's policies")
            continue
        policy_entry = _policy_entry(policy)
        if isinstance(policy_entry, str):
            adoption.decide(ALONE, "Policy", name, policy_entry)
        else:
            adoption.vhost["policies"].append(policy_entry)
    for name, policy in sorted(adoption.snapshot.operator_policies.items()):
        policy_entry = _policy_entry(policy)
        if isinstance(policy_entry, str) or set(policy_entry["definition"]) - set(wire.OPERATOR_POLICY_KEYS):
            why = (policy_entry if isinstance(policy_entry, str)
                   else "keys an operator policy of the config may not hold")
            adoption.decide(ALONE, "OperatorPolicy", name, why)
        else:
            adoption.vhost["operator_policies"].append(policy_entry)


def _migration(old: str, new: str, topology: Topology | None) -> dict[str, Any]:
    """The stack's `migrations[]` entry that carries what `old` holds to `new` and names the old runtime objects
    (`move.external`: not the stack's), so that `make migrate-retire` can retire them once empty."""
    external: dict[str, Any] | bool = True
    if topology is not None:
        rest = [q for q in topology.queues if q not in (topology.queue, topology.error_queue)]
        external = {k: v for k, v in (("error_queue", topology.error_queue), ("queues", rest),
                                      ("exchanges", list(topology.exchanges)),
                                      ("policies", list(topology.policies))) if v}
    slug = re.sub(r"[^a-z0-9]+", "-", old.lower()).strip("-") or "queue"
    return move.written(f"adopt-{slug}"[:60].rstrip("-"), old, new, external or True)


def _messages(snapshot: Snapshot, queue: str) -> str:
    """The queue's message count as read; a live read can lack one (the management API reports a new queue's
    counts only with its next statistics, every few seconds), a definitions file never has one."""
    count = snapshot.messages(queue)
    if count is not None:
        return f"{count} messages now"
    if snapshot.live:
        return "message count not reported yet by the management API (read live); check it before applying"
    return "message count unknown (read from a file)"


ENTRY_SECTIONS = {"policies": "Policy", "operator_policies": "OperatorPolicy", "queues": "Queue",
                  "exchanges": "Exchange", "applications": "Permissions", "operators": "Permissions"}
"""The lists whose entries the adoption may leave alone when the config or the checks refuse them, each with the
type its decisions name."""


def _refused_entry(vhost: Mapping[str, Any], path: str) -> tuple[str, int] | None:
    """(list, index) of the entry a key path is within (`vhost.policies[ha-all].definition.ha-mode`), else None."""
    for section in ENTRY_SECTIONS:
        for index, at in enumerate(entry_paths("vhost", section, vhost.get(section, []))):
            if path == at or path.startswith((f"{at}.", f"{at}[")):
                return section, index
    return None


def _drop_refused(adoption: Adoption) -> None:
    """Entries the config or the preview checks refuse (e.g. a policy that overlaps one of ours, a retired
    3.10 mirroring key) are left alone, with the reason; what remains must plan cleanly. Each problem is placed by
    its key path (a `Problem`'s `path`, a ConfigError's), never by what its message says."""
    for _ in range(100):
        try:
            # Any shovel user plans the same objects; the stack's own is named when the stack file is written.
            plan = plan_vhost(load_vhost(copy.deepcopy(adoption.vhost), "vhost"), "vhost", naming.SHOVEL_USER)
            found = [(problem.path, problem.message) for problem in check_vhost(plan)]
        except ConfigError as error:
            found = [(path, f"{path}: {message}") for path, message in error.problems]
        placed = [(_refused_entry(adoption.vhost, path), text) for path, text in found]
        problems = [(*entry, text) for entry, text in placed if entry is not None]
        unplaced = [text for entry, text in placed if entry is None]
        if unplaced:
            raise DefinitionsError("the adopted config does not plan: " + "; ".join(unplaced))
        if not problems:
            return
        section, index, text = problems[0]
        entry = adoption.vhost[section].pop(index)
        adoption.decide(ALONE, ENTRY_SECTIONS[section], entry.get("name") or entry["user"],
                        f"refused by the config or the preview checks: {text}")
    raise DefinitionsError("the adopted config does not plan")


def _properties_key(routing_key: str) -> str:
    """RabbitMQ's key of a binding without arguments (measured on 3.10.8 and 4.3.6)."""
    return "~" if routing_key == "" else quote_plus(routing_key).replace("~", "%7E")


SHOVEL_PASSWORD_PLACEHOLDER = "set passwords.rabbitmq-retry-shovel"
"""What the adoption's recording gives the shovel user: the stack file's own password is a secret it never has."""
USER_PASSWORD_PLACEHOLDER = "set passwords.<user> to the user's current password"
"""What the adoption's recording gives an application or operator user: the stack file never holds a password."""


def record_vhost(vhost: dict[str, Any], shovel_access: ShovelAccess | None = None,
                 reveal_secrets: bool = False) -> list[Registered]:
    """What the adopted vhost's component registers (its migrations' shovels connect as `shovel_access`, by default
    the stack's shovel user with a placeholder password; `reveal_secrets`: the shovel URIs as the provider gets
    them)."""
    config = copy.deepcopy(vhost)
    access = shovel_access or ShovelAccess(naming.SHOVEL_USER, SHOVEL_PASSWORD_PLACEHOLDER)
    users = [entry["user"] for section in ("applications", "operators") for entry in config.get(section, [])]
    args = {"vhost": config, **({"shovel_access": access} if config.get("migrations") else {}),
            **({"passwords": dict.fromkeys(users, USER_PASSWORD_PLACEHOLDER)} if users else {})}
    try:
        return record(lambda: Vhost(naming.vhost_key(config["name"]), args),  # type: ignore[arg-type]
                      reveal_secrets=reveal_secrets)
    finally:
        close_event_loop()



def finish(adoption: Adoption) -> Adoption:
    """Compare every object the config declares with the broker: import what is equal, create the rest."""
    snapshot = adoption.snapshot
    records = [r for r in record_vhost(adoption.vhost) if r.custom and r.type in COMPARED]
    imports: list[str] = []
    created: list[Registered] = []
    for r in records:
        result = compare(r, snapshot)
        kind = engine.short_type(r.type)
        label = binding_label({"source": r.inputs["source"], "destination": r.inputs["destination"],
                               "routing_key": r.inputs.get("routingKey"), "arguments": {}}) \
            if r.type == engine.BINDING else str(r.inputs["name"])
        if not result.present:
            created.append(r)
            adoption.decide(BESIDE, kind, label, "new")
            continue
        object_id = import_id(result, snapshot)
        if r.type == engine.BINDING and object_id is None and not result.changed and not snapshot.live:
            if r.inputs.get("argumentsJson"):
                adoption.warnings.append(f"binding {label}: its properties_key is only in the live API (a "
                                         "definitions file lacks it); run `make adopt` with ENDPOINT to import it, or "
                                         "`pulumi up` takes it over silently")
                adoption.decide(BESIDE, kind, label, "created over the identical broker binding (see warnings)")
                continue
            object_id = binding_id(snapshot.vhost, r.inputs["source"], r.inputs["destination"],
                                   r.inputs.get("destinationType") or "queue",
                                   _properties_key(r.inputs.get("routingKey") or ""))
        if object_id is None and r.type in (engine.POLICY, engine.OPERATOR_POLICY) and not result.immutable:
            object_id = f"{r.inputs['name']}@{snapshot.vhost}"
            adoption.decide(IMPORT, kind, label, f"`{object_id}`, then updated in place: "
                            + "; ".join(result.changed))
        elif object_id is None:
            raise DefinitionsError(f"{kind} {label} exists with other inputs ({', '.join(result.changed)}): "
                                   "this is a bug of make adopt, which must plan it beside")
        else:
            adoption.decide(IMPORT, kind, label, f"`{object_id}`")
        imports.append(f"{_IMPORT_KIND[r.type]} {object_id}")
    adoption.vhost["import"] = imports
    _check_access(adoption, [r for r in record_vhost(adoption.vhost) if r.type in ACCESS])
    adoption.records = record_vhost(adoption.vhost)  # the plan refuses an import ID that matches nothing
    return adoption


ACCESS = (engine.PERMISSIONS, engine.TOPIC_PERMISSIONS, engine.USER_LIMITS)


def _check_access(adoption: Adoption, records: Sequence[Registered]) -> None:
    """Each user `_access` declared, granted as it is when what the plan grants it reads back equal from the broker
    (the drift comparison); else taken out of the config and left alone, with the differences."""
    for section in ("applications", "operators"):
        for entry in list(adoption.vhost.get(section, [])):
            user = entry["user"]
            mine = [r for r in records if r.inputs.get("user") == user]
            results = [compare(r, adoption.snapshot) for r in mine]
            differ = [f"{engine.short_type(c.record.type)} " + ("absent" if not c.present else ", ".join(c.changed))
                      for c in results if not c.present or c.changed]
            if differ:
                adoption.vhost[section].remove(entry)
                adoption.decide(ALONE, "Permissions", user, "this project would grant it otherwise: "
                                + "; ".join(differ))
            else:
                adoption.decide(GRANT, "Permissions", user, f"{section[:-1]} {code(user)}: "
                                + ", ".join(engine.short_type(r.type) for r in mine))


_IMPORT_KIND = {engine.QUEUE: "queue", engine.EXCHANGE: "exchange", engine.BINDING: "binding",
                engine.POLICY: "policy", engine.OPERATOR_POLICY: "operator_policy"}


def shovel_port(snapshot: Snapshot) -> int | None:
    """The AMQP port the migrations' shovels connect to (they run on the broker, to `localhost`): the broker's own
    plain AMQP listener as its management API lists it (the lowest, should there be several); None when unknown (a
    definitions file) or when the broker has no plain AMQP listener."""
    return snapshot.amqp_ports[0] if snapshot.amqp_ports else None


REQUIRED = ("decide: the old consumers' setting, which the broker does not keep (read from the old stack's retry "
            "contract with `make adopt CONTRACTS=contracts.<stack>.json`, or set it here)")
"""What the stack file holds for a retry key the broker cannot tell: the config refuses it (`expected an integer`)
with the key's path, so `make plan` and `pulumi up` stop until it is decided."""


def with_contracts(topologies: Sequence[Topology], contracts: Mapping[str, Mapping[str, Any]]) -> list[Topology]:
    """Each topology with what its retry contract (`make contracts` of the stack that made it) says the broker cannot
    tell."""
    found = []
    for t in topologies:
        contract = contracts.get(t.queue) or {}
        told: dict[str, Any] = {}
        if isinstance(contract.get("max_retries"), int):
            told["max_retries"] = contract["max_retries"]
        backoff = contract.get("backoff")
        if isinstance(backoff, Mapping) and {"initial_ms", "max_ms", "multiplier", "jitter"} <= backoff.keys():
            told["backoff"] = {"initial": format_duration(backoff["initial_ms"]),
                               "max": format_duration(backoff["max_ms"]),
                               "multiplier": backoff["multiplier"], "jitter": backoff["jitter"]}
        if isinstance(contract.get("max_delay_ms"), int):
            told["limits"] = {**t.limits, "max_delay": contract["max_delay_ms"]}
        read = [k for k in t.required if k in told]
        if read:
            t = dataclasses.replace(t, **told, required=tuple(k for k in t.required if k not in told),
                                    notes=(f"{' and '.join(read)} read from its retry contract",))
        found.append(t)
    return found


def stack_file(adoption: Adoption, endpoint: str | None, tls: Mapping[str, Any] | None = None) -> str:
    """`tls`: the provider's TLS keys the broker was read with (`rabbitmq:cacertFile` …), written beside the endpoint
    so that `pulumi up` and the tools reach it the same way."""
    vhost = {k: v for k, v in copy.deepcopy(adoption.vhost).items() if v not in ([], None)}
    for entry in vhost.get("queues", []):
        for key in adoption.required.get(entry["name"], ()):
            entry["retry"][key] = {"initial": REQUIRED, "max": REQUIRED} if key == "backoff" else REQUIRED
    for key in adoption.required.get("", ()):
        vhost["delay_levels"][key] = REQUIRED
    config: dict[str, Any] = {}
    if endpoint:
        config["rabbitmq:endpoint"] = endpoint
    if vhost.get("migrations") and (port := shovel_port(adoption.snapshot)) is not None:
        config[f"{NAMESPACE}:{AMQP_PORT}"] = port
    config.update(tls or {})
    config["rabbitmq-retry:vhosts"] = [vhost]
    header = (f"# Written by `make adopt` from {adoption.snapshot.source}. Review it with `make plan`, apply it, then\n"
              f"# remove `import:` (after the first `pulumi up` it changes nothing). See the adoption report.\n")
    return header + yaml.safe_dump({"config": config}, sort_keys=False, allow_unicode=True, width=120)


def _retire_steps(adoption: Adoption, stack: str) -> list[str]:
    """Each old queue's migration (`migrations[]` of the stack file, `move.external`), step by step."""
    s = adoption.snapshot
    lines = [f"Each old queue below has a migration in the stack file (`move.external`: the old objects are not the "
             f"stack's, so `pulumi up` never deletes them). Its shovels connect as the stack's own user "
             f"`{naming.shovel_user(PROJECT, stack)}`: "
             f"first set its password, once for the stack: `pulumi config set --secret --path "
             f"'rabbitmq-retry:passwords.{naming.SHOVEL_USER}' <password>`. Every step is in "
             "docs/migrations.md (retire an adopted runtime topology).", ""]
    for migration in adoption.vhost.get("migrations", []):
        old, new, name = migration[move.NAME]["from"], migration[move.NAME]["to"], migration["name"]
        topology = next((t for t in adoption.topologies if t.queue == old), None)
        external = migration[move.NAME]["external"]
        error_queue = external.get("error_queue") if isinstance(external, dict) else None
        retire = f"make migrate-retire STACK={stack} MIGRATION={name}"
        moved = code(old) + (f" and {code(error_queue)} (parked)" if error_queue else "")
        old_topology = set(topology.exchanges) if topology else set()
        bound_from = sorted({b["source"] for b in s.bindings if b["destination"] == old
                             and b["destination_type"] == "queue" and b.get("source")
                             and b["source"] not in old_topology})
        binds = (f", binds it from {names(bound_from)} as {code(old)} is bound" if bound_from else
                 f" ({code(old)} is bound from no exchange but its own topology's: its producers publish to it by "
                 "name)")
        steps = [f"`pulumi up --stack {stack}` creates {code(new)}" + (" with its retry machinery" if topology else "")
                 + f"{binds}, and starts the shovels of migration {code(name)}: they carry "
                 f"what {moved} hold" + ("" if error_queue else "s") + f" to {code(new)}"
                 + (f" and {code(naming.error_queue(new))}" if error_queue else "") + ", acknowledging each message "
                 "at the source only once the successor has confirmed it."]
        if bound_from:
            steps.append(f"Right away, `{retire} APPLY=1` unbinds {code(old)} from the exchanges {code(new)} is now "
                         "bound from (it refuses one the new queue is not bound from the same way): until then both "
                         "queues receive each message and the shovel carries the old copy on, so handlers must be "
                         "idempotent (the retry contract requires it anyway). Without `APPLY=1` it only prints what "
                         "it would do.")
        comes_back = {"dlx-ttl-loop": f" A message still waiting in the old wait queue comes back through the work "
                                      f"exchange, on time, to {code(new)} (and to any other queue bound there).",
                      "sneakers": f" A message still waiting in the old retry queue comes back to {code(old)} on time "
                                  "through its private requeue exchange, and the shovel carries it on."}
        steps.append(f"Start consumers of {code(new)} that follow its retry contract (`pulumi stack output "
                     "retry_contracts`), stop the old consumers, and turn off runtime declarations in the applications "
                     "(they would bind the old queue again; application users get `configure: ^$`)."
                     + comes_back.get(topology.kind if topology else "", ""))
        steps.append(f"Producers that publish to {code(old)} by name (the default exchange, routing key {code(old)}) "
                     f"reach the old queue only: point them at {code(new)} (by name, or through an exchange it is "
                     "bound from). Until then the shovel carries their messages on, and `make migrate-retire` keeps "
                     f"{code(old)} while the management API still sees publishes into it (deleted, it would make "
                     "those publishes unroutable).")
        steps.append(f"`make migrate-status STACK={stack}` reads the old queues' depth; when it says drained, set "
                     f"`step: retire` in migration {code(name)}, commit, and `pulumi up` (the shovels go).")
        steps.append(f"`{retire}` prints what it would delete; `{retire} APPLY=1` deletes the old queues "
                     "(a classic one with `if-empty` and `if-unused`: the broker refuses it while a message or a "
                     "consumer is there), then the old exchanges (`if-unused`) and policies listed under *retire "
                     f"later*, stopping at the first refusal with what to do. Then remove migration {code(name)}.")
        title = f"### {code(old)} → {code(new)}" + (f" ({topology.kind})" if topology else "")
        lines += [title, "", *(f"{n}. {step}" for n, step in enumerate(steps, start=1)), ""]
    return lines


def report(adoption: Adoption, stack: str) -> str:
    s = adoption.snapshot
    counts = {a: sum(d.action == a for d in adoption.decisions) for a in ACTIONS}
    lines = [f"# Adopting vhost `{s.vhost}` into stack `{stack}`", "",
             f"Read from {code(s.source)}" + (f" (RabbitMQ {s.broker_version})" if s.broker_version else "") + ". "
             + ", ".join(f"**{n} {a}**" for a, n in counts.items()) + ".", ""]
    if adoption.topologies:
        lines += ["## Retry topologies recognised", "", *markdown_table(
            ("kind", "work queue", "taken over by", "delays", "max retries", "notes"),
            [(t.kind, t.queue, adoption.beside.get(t.queue, t.queue + " (imported)"),
              ", ".join(format_duration(d) for d in t.delays_ms), str(t.max_retries), "; ".join(t.notes))
             for t in adoption.topologies]), ""]
    if adoption.kept:
        lines += ["## Kept as they are", "",
                  "Not a retry topology a strategy of ours keeps as it works: each queue is declared with every "
                  "argument it has (`arguments`) and imported, never moved. It keeps its name, so producers that "
                  "publish to it by name (the default exchange) keep reaching it, and a message waiting in a TTL queue "
                  "comes back on time through its own dead-letter route: no wait ends early.", "",
                  *markdown_table(("queue", "what it does"), sorted(adoption.kept.items())), ""]
    meaning = {IMPORT: "declared exactly as the broker holds it: Pulumi adopts it (`import_`), nothing is written",
               GRANT: "a user's permissions, topic permissions and limits in the vhost (`applications`, `operators`), "
                      "declared exactly as the broker holds them: `pulumi up` writes the same values. It also writes "
                      "the user's password, the stack's secret `passwords.<user>` (`pulumi up` refuses without it): "
                      "set it to the user's current password, or the applications' connections fail",
               BESIDE: "created by `pulumi up` under a new name; the old object is left alone",
               RETIRE: "the old objects, never the stack's: drained by the migrations' shovels, then deleted by "
                       "`make migrate-retire` (steps below); until then `make drift` lists them as extra",
               ALONE: "not declared by the stack, left as it is"}
    for action in ACTIONS:
        rows = [(d.type, d.name, d.detail) for d in adoption.decisions if d.action == action]
        if rows:
            lines += [f"## {action.capitalize()}", "", meaning[action] + ".", "",
                      *markdown_table(("type", "object", "detail"), rows), ""]
    if adoption.beside:
        lines += ["## Moving consumers and retiring the old objects", "", *_retire_steps(adoption, stack)]
    lines += ["## Before and after the first `pulumi up`", "",
              "- Never `pulumi up` a config that declares an existing queue, exchange or binding without importing "
              "it: with other arguments the broker answers HTTP 400 \"inequivalent arg\"; with equal ones the "
              "stack silently takes it over, and a later destroy deletes it.",
              f"- Review: `make plan STACK={stack}`. Apply: `pulumi up --stack {stack}` (imports, then creates).",
              "- Then delete the `import:` list from the stack file: imported objects are in the stack's state, "
              "so removing it plans no change. `make drift STACK=" + stack + "` then lists only the old objects "
              "still to retire, as extra.", ""]
    if adoption.required:
        lines += ["## Decisions required", "",
                  "What the broker does not keep (the consumers' settings, in the retry contract): the stack file "
                  "holds `decide: …` there, which `make plan` refuses, naming the key, until a value is set (or run "
                  "`make adopt` again with `CONTRACTS=contracts.<old stack>.json`).", "",
                  *markdown_table(("queue", "retry keys"), [(q, names(keys)) for q, keys in
                                                             sorted(adoption.required.items())]), ""]
    if adoption.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in adoption.warnings), ""]
    return "\n".join(lines)


def adopt(snapshot: Snapshot, suffix: str = DEFAULT_SUFFIX,
          contracts: Mapping[str, Mapping[str, Any]] | None = None) -> Adoption:
    """`contracts`: the retry contracts of the vhost's queues by name (`make contracts` of the stack that made it)."""
    if not snapshot.exists:
        raise DefinitionsError(f"vhost {snapshot.vhost!r} is not in {snapshot.source}")
    adoption = finish(build(snapshot, suffix, contracts or {}))
    if adoption.vhost.get("migrations"):
        port = shovel_port(snapshot)
        if port is None:
            adoption.warnings.append(
                "the migrations' shovels run on the broker and connect to its AMQP port, 5672 unless "
                "`rabbitmq-retry:amqp_port` says otherwise: " + ("the broker lists no plain AMQP listener" if
                                                                  snapshot.live else "a definitions file does not say "
                                                                  "the broker's") + "; set it to the broker's own "
                "AMQP port (`make doctor` refuses a port the broker does not listen on)")
    return adoption
