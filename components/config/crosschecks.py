"""Checks across entities: names declared twice, and references from one entity to another.

They run on every entry, refused or not (`parsers.Entry`): a refused entry still declares its name, so a
reference to it is never reported as undeclared, and the only problem reported for it is its own.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..model.config_entries import ApplicationEntry, Entry, OperatorEntry, QueueEntry, VhostEntry
from ..model.fields import INVALID, Problems
from ..model.naming import SHOVEL_USER
from ..model.stack_config import Exchange, Policy


def check_policy_names(p: Problems, policies: Sequence[Entry[Policy]],
                       derived: Collection[str] = ()) -> None:
    """Policy names are unique in a vhost, and none is a name this stack derives for a queue's policy."""
    first: dict[str, str] = {}
    for entry in policies:
        if entry.name is None:
            continue
        where = f"{entry.path}.name"
        if entry.name in first:
            p.add(where, f'duplicate policy "{entry.name}" (also {first[entry.name]}); rename or merge them')
            continue
        first[entry.name] = entry.path
        if entry.name in derived:
            p.add(where, f'"{entry.name}" is the name of a policy this stack derives for that queue; rename the policy')


def _exchange_owners(p: Problems, exchanges: Sequence[Entry[Exchange]]) -> dict[str, str]:
    """The key path that declares each exchange first; one problem per exchange declared again."""
    owners: dict[str, str] = {}
    for name, where in ((e.name, f"{e.path}.name") for e in exchanges if e.name is not None):
        if name in owners:
            p.add(where, f'duplicate exchange "{name}" (also {owners[name]})')
        owners.setdefault(name, where)
    return owners


def check_queue_and_exchange_names(p: Problems, exchanges: Sequence[Entry[Exchange]],
                                   queues: Sequence[QueueEntry]) -> None:
    """No queue or exchange is declared twice, including those a retryable queue derives."""
    queue_owner: dict[str, str] = {}
    exchange_owner = _exchange_owners(p, exchanges)
    declared_by: dict[str, str] = {}
    for queue in queues:
        where = f"{queue.path}.name"
        if queue.name is not None and queue.name in declared_by:
            # One problem for a queue written twice, not one per name it derives.
            p.add(where, f'duplicate queue "{queue.name}" (also {declared_by[queue.name]}); keep one')
            continue
        if queue.name is not None:
            declared_by[queue.name] = where
        for owned, owners, kind in ((queue.owned_queues, queue_owner, "queue"),
                                    (queue.owned_exchanges, exchange_owner, "exchange")):
            for name in owned:
                if name in owners:
                    p.add(where, f'{kind} "{name}" is also declared by {owners[name]}; rename one of them')
                owners.setdefault(name, where)


def check_bindings(p: Problems, exchanges: Sequence[Entry[Exchange]],
                   queues: Sequence[QueueEntry]) -> None:
    """Each binding's exchange is declared in the vhost, or marked external, and not both."""
    written = {e.written for e in exchanges if e.written is not None}
    declared = {e.value.name: e.value for e in exchanges if e.value is not INVALID}
    for queue in queues:
        for entry in queue.bindings:
            if entry.value is INVALID:
                continue
            binding, where = entry.value, entry.path
            if binding.exchange not in written and not binding.external:
                p.add(f"{where}.exchange", f'"{binding.exchange}" is not declared in this vhost; '
                      "add it to exchanges or mark the binding external: true")
            if binding.exchange in written and binding.external:
                p.add(f"{where}.external", f'"{binding.exchange}" is declared in this vhost; remove external: true')
            exchange = declared.get(binding.exchange)
            if exchange is not None and binding.arguments and exchange.type != "headers":
                p.add(f"{where}.arguments", "binding arguments only match on headers exchanges; "
                      f'"{exchange.name}" is {exchange.type}')


def check_names(p: Problems, path: str, names: Sequence[object], known: Collection[str], kind: str) -> bool:
    """Every name of the list is in `known`; reports the first that is not."""
    for i, value in enumerate(names):
        if not isinstance(value, str) or value not in known:
            p.add(f"{path}[{i}]", f"{value!r} is not {kind} of this vhost; declare it or remove it here")
            return False
    return True


def check_application(p: Problems, app: ApplicationEntry, queues: Collection[str], exchanges: Collection[str],
                      all_exchanges: Collection[str]) -> None:
    check_names(p, f"{app.path}.publishes", app.publishes, exchanges, "an exchange")
    if check_names(p, f"{app.path}.consumes", app.consumes, queues, "an input or plain queue"):
        for i, queue in enumerate(app.consumes):
            if queue in all_exchanges:
                p.add(f"{app.path}.consumes[{i}]", f'"{queue}" is also an exchange name: permissions cannot tell '
                      "them apart, so this application could bind the queue to that exchange; rename one of them")
                break
    for topic in app.topics:
        if topic.exchange is not INVALID and (not isinstance(topic.exchange, str) or topic.exchange not in exchanges):
            p.add(f"{topic.path}.exchange", f"{topic.exchange!r} is not an exchange of this vhost")


def check_applications(p: Problems, vhost: VhostEntry) -> None:
    """Applications consume input and plain queues (wait tiers are the broker's, error queues the
    operators') and publish to exchanges the config names (not the retry machinery, reached via the
    contract). Permission regexes do not tell queues from exchanges, so a consumed queue may not share
    its name with any exchange: the read grant would let the application bind to that exchange."""
    queues = {q.written for q in vhost.queues if q.written is not None}
    exchanges = {e.written for e in vhost.exchanges if e.written is not None}
    exchanges |= {b.written for q in vhost.queues for b in q.bindings if b.external and b.written is not None}
    all_exchanges = exchanges | {name for q in vhost.queues for name in q.owned_exchanges}
    for app in vhost.applications:
        check_application(p, app, queues, exchanges, all_exchanges)


def check_vhost(p: Problems, vhost: VhostEntry) -> None:
    """Every check across the entries of one vhost."""
    derived_policy_names = {name for queue in vhost.queues for name in queue.owned_queues}
    check_policy_names(p, vhost.policies, derived_policy_names)
    check_policy_names(p, vhost.operator_policies)
    check_queue_and_exchange_names(p, vhost.exchanges, vhost.queues)
    # A list written as something else (exchanges as a map) is its own one problem: what refers to its names
    # is not checked against an empty list.
    if "exchanges" not in vhost.unreadable:
        check_bindings(p, vhost.exchanges, vhost.queues)
    if not {"exchanges", "queues"} & vhost.unreadable:
        check_applications(p, vhost)


LOCK_OUT = ("pulumi up would overwrite the deploying user's tags and password mid-deploy; give the application "
            "its own user")
"""Why an application may not be the provider's own user: its user gets no tags and the application's password."""


def check_users(p: Problems, vhosts: Sequence[VhostEntry]) -> None:
    """Users are broker-wide: one application or operator per user in the whole stack, and never `guest`, the
    broker's built-in administrator (and the local stack's deploying user)."""
    first: dict[str, str] = {}
    for vhost in vhosts:
        users: tuple[ApplicationEntry | OperatorEntry, ...] = (*vhost.applications, *vhost.operators)
        for entry in users:
            if entry.name is None:
                continue
            where = f"{entry.path}.user"
            if entry.name == "guest":
                p.add(where, f'"guest" is RabbitMQ\'s built-in administrator, often the user deploying this stack: '
                      f"{LOCK_OUT}")
            if entry.name == SHOVEL_USER or entry.name.startswith(f"{SHOVEL_USER}."):
                p.add(where, f'"{SHOVEL_USER}" and names starting "{SHOVEL_USER}." are the migrations\' shovel users '
                      "(one per stack, which the stack creates itself, and the key of its password); give this one "
                      "another name")
            if entry.name in first:
                kind = "operator" if ".operators[" in entry.path else "application"
                p.add(where, f'user "{entry.name}" is also {first[entry.name]}; give each {kind} its own user')
            first.setdefault(entry.name, where)


def check_vhost_names(p: Problems, vhosts: Sequence[VhostEntry]) -> None:
    first: dict[str, str] = {}
    for vhost in vhosts:
        if vhost.name is None:
            continue
        if vhost.name in first:
            p.add(f"{vhost.path}.name", f'duplicate vhost "{vhost.name}" (also {first[vhost.name]}); merge them')
        first.setdefault(vhost.name, vhost.path)
