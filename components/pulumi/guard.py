"""The apply-time guard: a queue that holds messages is never deleted by `pulumi up`, unless the stack says so.

Every Queue the components declare is bound to one `before_delete` resource hook (`QUEUE_GUARD`). The engine
calls it before it deletes the queue, which is also the first step of every replacement (explicitly named
resources are replaced delete-before-replace). The hook reads the queue on the broker (`rabbitmq_retry_client.
depth`: ready messages by passive declare, unacknowledged ones and a quorum queue's pending dead letters from the
management API) and raises when it holds any, or when the broker cannot say: the engine then fails that step,
and nothing is deleted. The escape hatch is explicit and reviewed: `rabbitmq-retry:delete_with_messages`, a list
of `<vhost>/<queue>` that may be deleted with what they hold (`make review` lists each one as data loss).

What only the engine does (calling the hook; `pulumi destroy` runs it only with `--run-program`) cannot be run
here: docs/guard.md.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pulumi

from rabbitmq_retry_client.depth import BrokerAccess, DepthError, DepthReader, QueueDepth
from rabbitmq_retry_client.management import TlsSettings, truthy

from ..config.stack_settings import DELETE_WITH_MESSAGES
from ..model.keys import NAMESPACE
from ..model.names import names
from ..model.plan_types import VhostPlan
from ..model.problems import ConfigError
from ..plan.paths import at_risk
from .program_settings import runtime_guard_settings, runtime_provider_settings

QUEUE_GUARD = "rabbitmq-retry-queue-guard"
"""The hook's name, recorded in the stack's state for every queue: the program must register a hook of this name
in every later run, or the engine cannot delete those queues (`hook … was not registered`)."""
PATH_GUARD = "rabbitmq-retry-path-guard"
"""The hook of the path guards (docs/guard.md, "The path guard"), recorded in the stack's state like QUEUE_GUARD."""


class GuardError(Exception):
    """The guard refuses a deletion; the message names the queue, what it holds and what to do."""


def queue_key(vhost: str, queue: str) -> str:
    """`<vhost>/<queue>`, as `delete_with_messages` names a queue (the default vhost: `//orders`)."""
    return f"{vhost}/{queue}"


def planned_queues(plans: Iterable[VhostPlan]) -> set[str]:
    """`<vhost>/<queue>` of every queue the plans declare."""
    found: set[str] = set()
    for plan in plans:
        queues = [*plan.queues, *(q for r in plan.retryables for q in r.queues),
                  *(plan.delay_levels.queues if plan.delay_levels is not None else ())]
        found.update(queue_key(plan.config.name, q.name) for q in queues)
    return found


def unplanned_entries(allowed: Iterable[str], plans: Iterable[VhostPlan]) -> list[str]:
    """Entries of `delete_with_messages` that name no queue of the plans: right only for a queue this update
    removes, and a forgotten waiver otherwise."""
    planned = planned_queues(plans)
    return sorted(entry for entry in allowed if entry not in planned)


def refusal(vhost: str, queue: str, depth: QueueDepth | None, allowed: frozenset[str]) -> str | None:
    """Why the guard refuses to let `queue` be deleted, or None when it may go (missing, empty, or waived)."""
    if depth is None or depth.messages == 0 or queue_key(vhost, queue) in allowed:
        return None
    return (f'refusing to delete queue "{queue}" in vhost "{vhost}": it holds {depth.messages:,} message'
            f"{'s' * (depth.messages != 1)} ({depth.describe()}), which deleting it would lose. Drain it first "
            "(consume or move every message, and let consumers settle what they hold), then run `pulumi up` again; "
            f'or, to delete it with its messages on purpose, add "{queue_key(vhost, queue)}" to '
            f"{NAMESPACE}:{DELETE_WITH_MESSAGES} (reviewed: `make review` lists it as data loss)")


def check_queue_delete(vhost: str, queue: str, read: Callable[[str, str], QueueDepth | None],
                       allowed: frozenset[str], warn: Callable[[str], None] = pulumi.log.warn) -> None:
    """Raise GuardError when deleting `queue` would lose messages, or when `read` cannot tell (DepthError); `warn`
    when it loses them because `delete_with_messages` lists it."""
    try:
        depth = read(vhost, queue)
    except DepthError as error:
        if queue_key(vhost, queue) in allowed:
            warn(f'deleting queue "{queue}" in vhost "{vhost}" unread ({error}): listed in '
                 f"{NAMESPACE}:{DELETE_WITH_MESSAGES}")
            return
        raise GuardError(f'refusing to delete queue "{queue}" in vhost "{vhost}": cannot prove it is empty ({error}). '
                         f"Make the broker reachable from here, or add \"{queue_key(vhost, queue)}\" to "
                         f"{NAMESPACE}:{DELETE_WITH_MESSAGES} to delete it whatever it holds") from None
    if (why := refusal(vhost, queue, depth, allowed)) is not None:
        raise GuardError(why)
    if depth is not None and depth.messages:
        warn(f'deleting queue "{queue}" in vhost "{vhost}" with {depth.messages:,} messages ({depth.describe()}): '
             f"listed in {NAMESPACE}:{DELETE_WITH_MESSAGES}")


ENVIRONMENT = (("endpoint", "RABBITMQ_ENDPOINT"), ("username", "RABBITMQ_USERNAME"), ("password", "RABBITMQ_PASSWORD"),
               ("cacert_file", "RABBITMQ_CACERT"), ("insecure", "RABBITMQ_INSECURE"),
               ("clientcert_file", "RABBITMQ_CLIENTCERT"), ("clientkey_file", "RABBITMQ_CLIENTKEY"))
"""Each provider setting the guard reads, with the environment variable the provider falls back to when it is unset
(docs/provider.md §9)."""


def _access(settings: Mapping[str, str], amqp_port: int | None) -> BrokerAccess:
    """The access of the `ENVIRONMENT` settings, each already the setting or else its variable ("" when neither)."""
    return BrokerAccess(settings["endpoint"], settings["username"], settings["password"], amqp_port, TlsSettings(
        settings["cacert_file"] or None, settings["clientcert_file"] or None, settings["clientkey_file"] or None,
        truthy(settings["insecure"])))


def provider_access() -> BrokerAccess:
    """The broker and user `pulumi up` deploys with: the provider's config, else its environment variables
    (`ENVIRONMENT`); `rabbitmq-retry:amqp_port` when the AMQP port cannot be read from the broker. DepthError
    without an endpoint."""
    port = runtime_guard_settings().amqp_port
    provider = runtime_provider_settings()
    return _access({name: getattr(provider, name) or os.environ.get(variable, "") for name, variable in ENVIRONMENT},
                   port)


def allowed_deletions(refusing: str) -> frozenset[str]:
    """The `delete_with_messages` entries as the engine hands them over when the hook runs; when they are wrong, a
    GuardError that says what it is `refusing`."""
    try:
        return runtime_guard_settings().delete_with_messages
    except ConfigError as error:
        raise GuardError(f"{refusing}: {error}") from None


def _queue_of(args: pulumi.ResourceHookArgs) -> tuple[str, str]:
    """(vhost, name) of the queue being deleted: its outputs as the provider last read them, else its inputs."""
    for values in (args.old_outputs, args.old_inputs):
        if values and values.get("name"):
            return str(values.get("vhost") or "/"), str(values["name"])
    name, _, vhost = args.id.partition("@")  # the provider's ID: name@vhost
    return vhost or "/", name


def read_at_provider(vhost: str, queue: str) -> QueueDepth | None:
    """What `queue` holds on the broker `pulumi up` deploys to (`provider_access`); DepthError when it cannot tell."""
    try:
        return DepthReader(provider_access()).read(vhost, queue)
    except ConfigError as error:
        raise DepthError(str(error)) from None


Read = Callable[[str, str], QueueDepth | None]
"""(vhost, queue) → what the queue holds on the broker the hook guards, None when it is not there; DepthError when
it cannot tell."""


def guard_queue_delete(args: pulumi.ResourceHookArgs, read: Read = read_at_provider) -> None:
    """The hook: refuse the deletion (raise) unless the queue is missing, empty, or listed to go anyway."""
    vhost, queue = _queue_of(args)
    allowed = allowed_deletions(f'refusing to delete queue "{queue}" in vhost "{vhost}"')
    check_queue_delete(vhost, queue, read, allowed)


async def explicit_provider_access(provider: pulumi.ProviderResource) -> BrokerAccess:
    """The broker and user an explicit `rabbitmq.Provider` deploys with: its outputs of the `ENVIRONMENT` settings,
    each else its environment variable, as the provider itself falls back. The stack's `rabbitmq:*` config and
    `rabbitmq-retry:amqp_port` are the default provider's, not this one's: the AMQP port is read from the broker's
    /api/overview. `insecure` is not an output of the provider: only RABBITMQ_INSECURE turns it on here."""
    async def setting(attribute: str, variable: str) -> str:
        output = getattr(provider, attribute, None)
        value = await output.future() if isinstance(output, pulumi.Output) else output
        return str(value) if value else os.environ.get(variable, "")

    return _access({name: await setting(name, variable) for name, variable in ENVIRONMENT}, None)


_providers_named: weakref.WeakKeyDictionary[pulumi.Resource, dict[str, pulumi.ProviderResource]] = (
    weakref.WeakKeyDictionary())


def _provider_key(provider: pulumi.ProviderResource) -> str:
    """The suffix of an explicit provider's hooks: its logical name (the SDK keeps it as `_name`), stable across runs
    as the engine needs a hook name to be. Two providers of one name (under different parents) cannot share hooks."""
    name = str(getattr(provider, "_name"))  # noqa: B009 - the SDK has no public accessor for it
    root = pulumi.runtime.get_root_resource()
    known = _providers_named.setdefault(root, {}).setdefault(name, provider) if root is not None else provider
    if known is not provider:
        raise ConfigError([("provider", f'two rabbitmq providers are named "{name}": the queue guard binds one hook '
                                        "per provider name; give each provider a name of its own")])
    return name


_hooks: dict[str, weakref.WeakKeyDictionary[pulumi.Resource, pulumi.ResourceHook]] = {}
_hooks_without_stack: dict[str, pulumi.ResourceHook] = {}


def _registered(name: str, hook: Callable[[pulumi.ResourceHookArgs], Any]) -> pulumi.ResourceHook:
    """The program's one hook `name`, registered on first use. The engine refuses a second hook of the same name, so
    each program run (each root Stack resource) gets exactly one."""
    root = pulumi.runtime.get_root_resource()
    if root is None:
        if name not in _hooks_without_stack:
            _hooks_without_stack[name] = pulumi.ResourceHook(name, hook)
        return _hooks_without_stack[name]
    per_root = _hooks.setdefault(name, weakref.WeakKeyDictionary())
    if root not in per_root:
        per_root[root] = pulumi.ResourceHook(name, hook)
    return per_root[root]


def _hook(name: str, check: Callable[[pulumi.ResourceHookArgs, Read], None],
          provider: pulumi.ProviderResource | None) -> pulumi.ResourceHook:
    """The program's one hook `name`, which runs `check` off the event loop (the engine may run several hooks at once,
    and the reads block); for an explicit provider, `name.<provider name>`, which reads on that provider's broker
    (`explicit_provider_access`)."""
    if provider is None:
        async def guard(args: pulumi.ResourceHookArgs) -> None:
            await asyncio.to_thread(check, args, read_at_provider)
        return _registered(name, guard)

    async def explicit_guard(args: pulumi.ResourceHookArgs) -> None:
        read = DepthReader(await explicit_provider_access(provider)).read
        await asyncio.to_thread(check, args, read)
    return _registered(f"{name}.{_provider_key(provider)}", explicit_guard)


def queue_guard(provider: pulumi.ProviderResource | None = None) -> pulumi.ResourceHook:
    """The program's one `QUEUE_GUARD` hook (`guard_queue_delete`); for the queues of an explicit provider,
    `QUEUE_GUARD.<provider name>` (`_hook`)."""
    return _hook(QUEUE_GUARD, guard_queue_delete, provider)


def guarded(provider: pulumi.ProviderResource | None = None) -> pulumi.ResourceHookBinding:
    """The hooks option of every queue: `queue_guard(provider)` before it is deleted."""
    return pulumi.ResourceHookBinding(before_delete=[queue_guard(provider)])


def path_refusal(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                 read: Callable[[str, str], QueueDepth | None], allowed: frozenset[str]) -> str | None:
    """Why going from inventory `old` to `new` (None: the guard itself is deleted, with every path it lists) must
    not happen: a queue of a path needs a part the change deletes or replaces (`paths.at_risk`), and holds a message
    that `delete_with_messages` does not waive, or cannot be read. None when it may go. Every queue at risk is read,
    so the refusal names all of them."""
    vhost = str((old or {}).get("vhost") or "/")
    reasons: list[str] = []
    for path, queues in at_risk(old, new).items():
        holding: list[str] = []
        for queue, parts in queues.items():
            if queue_key(vhost, queue) in allowed:
                continue
            try:
                depth = read(vhost, queue)
            except DepthError as error:
                holding.append(f'"{queue}" cannot be read ({error})')
                continue
            if depth is not None and depth.messages:
                shown = names(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
                holding.append(f'"{queue}" holds {depth.messages:,} message{"s" * (depth.messages != 1)} '
                               f"({depth.describe()}) and needs {shown}, which this update would delete or replace")
        if holding:
            reasons.append(f'the retry path of "{path}": {"; ".join(holding)}')
    if not reasons:
        return None
    return (f'refusing to change vhost "{vhost}": nothing on a retry path is deleted while a message waiting on it '
            f"needs it, and {'; and '.join(reasons)}. Nothing of these paths is touched. Let them drain (consumers "
            "settle, waits expire back into their queues, parked messages are redriven or removed), then run "
            "`pulumi up` again; or, to lose those messages on purpose, add each queue named above as "
            f'"<vhost>/<queue>" to {NAMESPACE}:{DELETE_WITH_MESSAGES} (reviewed: `make review` lists it as data loss)')


def _stashed(values: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The inventory a path guard (a Stash) holds in its `input`."""
    stashed = (values or {}).get("input")
    return stashed if isinstance(stashed, Mapping) else None


def guard_path_change(args: pulumi.ResourceHookArgs, read: Read = read_at_provider) -> None:
    """The path guards' hook: before a path guard is updated (a change deletes or replaces a part of a path it
    lists) or deleted (everything it lists goes), refuse (raise) while a touched path holds a message."""
    old = _stashed(args.old_inputs) or _stashed(args.old_outputs)
    new = _stashed(args.new_inputs) if args.new_inputs is not None else None
    allowed = allowed_deletions(f"refusing to change the retry paths of {args.name}")
    if (why := path_refusal(old, new, read, allowed)) is not None:
        raise GuardError(why)


def path_guard(provider: pulumi.ProviderResource | None = None) -> pulumi.ResourceHook:
    """The program's one PATH_GUARD hook (`guard_path_change`); for the paths of an explicit provider,
    `PATH_GUARD.<provider name>` (`_hook`)."""
    return _hook(PATH_GUARD, guard_path_change, provider)
