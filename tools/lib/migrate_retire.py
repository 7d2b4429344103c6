"""Retiring the old objects of an external move (`make migrate-retire`, tools/migrate_retire.py): the runtime
topology an application declared and `make adopt` took over beside, which the stack never declared and so
`pulumi up` never deletes.

What it does depends on the migration's step in the stack file:
- **step move** (after `pulumi up` created the successor, its bindings and the shovels): unbind the old queue
  from every exchange it is bound from, each only once the successor is bound there the same way (same routing
  key and arguments), so new publishes reach the successor alone and the shovel duplicates nothing;
- **step retire** (after `pulumi up` removed the shovels): the same unbinding if any is left, then delete the
  old queues (wait queues first, then the old queue, then its error queue), the old exchanges, the old policies.

Every deletion is refused by the broker itself when it would lose something: a classic queue is deleted with
`queue.delete(if_empty, if_unused)` (atomic: a message or a consumer still there refuses it); an exchange with
`exchange.delete(if_unused)` (refused while it routes to any queue). RabbitMQ refuses both flags on quorum queues
(3.10.8 and 4.3.6 answer 540 NOT_IMPLEMENTED, measured by tests/broker/test_migrate_retire.py), so a quorum queue
is read first (ready by passive declare, unacknowledged and pending dead letters, consumers) and deleted only when
all are 0: not atomic, which is why its bindings and wait queues go first. A policy is deleted only when it
matches no queue but the old ones. The first refusal stops the run, with what to do; running it again carries on.
Read-only (it prints what it would do, with each queue's depth now) unless `apply`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from components.model.stack_config import Migration, StackConfig
from rabbitmq_retry_client.connection import amqp_failure, quiet_pika, reason
from rabbitmq_retry_client.depth import TIMEOUT_S, BrokerAccess, DepthError, DepthReader, QueueDepth
from rabbitmq_retry_client.management import ManagementError, path_escape
from tools.lib.drift import binding_label
from tools.lib.markdown import names
from tools.lib.recognise import dead_letter
from tools.lib.routing import Message, Route, arrival_keys, route
from tools.lib.snapshot import Snapshot

UNBIND, DELETE_QUEUE, DELETE_EXCHANGE, DELETE_POLICY = "unbind", "delete queue", "delete exchange", "delete policy"


class RetireError(Exception):
    """The command cannot run (no such migration, not an external move, broker unreachable): one line."""


@dataclass(frozen=True)
class Action:
    """One thing to do on the broker, in order."""

    kind: str
    name: str
    """The queue, exchange or policy; for an unbind, the old queue."""
    binding: Mapping[str, Any] | None = None
    """An unbind's binding as the management API lists it."""
    refused: str | None = None
    """Known before anything runs (from the vhost as read): why it may not be done, and what to do."""
    gone: bool = False
    """An exchange or policy the vhost no longer has (deleting a missing exchange is not an error in AMQP)."""
    shared: str | None = None
    """Another queue's retry route still uses it: kept (said, not done), and the run goes on."""

    def describe(self) -> str:
        if self.kind == UNBIND and self.binding is not None:
            return f"unbind {binding_label(dict(self.binding))}"
        if self.kind == DELETE_QUEUE:
            return f"delete queue {self.name} if empty and unused"
        if self.kind == DELETE_EXCHANGE:
            return f"delete exchange {self.name} if unused"
        return f"delete policy {self.name}"


@dataclass(frozen=True)
class Found:
    """The external move to retire, and where its vhost is."""

    vhost: str
    migration: Migration


def find(config: StackConfig, name: str) -> Found:
    """The migration `name` of the stack; RetireError unless it is an external move."""
    for vhost in config.vhosts:
        for m in vhost.migrations:
            if m.name == name:
                if m.external is None:
                    raise RetireError(f"migration {name} (vhost {vhost.name}) moves a queue the stack declares: "
                                      "`pulumi up` retires its old objects in step retire; make migrate-retire is "
                                      "for move.external (an adopted runtime topology)")
                return Found(vhost.name, m)
    known = [m.name for v in config.vhosts for m in v.migrations]
    raise RetireError(f"no migration {name!r} in the stack" + (f" (it has: {names(known)})" if known else
                                                               " (it declares none)"))


def _same_binding(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a.get("source"), a.get("routing_key") or "", dict(a.get("arguments") or {})) == (
        b.get("source"), b.get("routing_key") or "", dict(b.get("arguments") or {}))


def _queue_bindings(snapshot: Snapshot, queue: str) -> list[Mapping[str, Any]]:
    """The queue's bindings from named exchanges (the default exchange's implicit one cannot be removed)."""
    return [b for b in snapshot.bindings if b.get("destination") == queue and b.get("destination_type") == "queue"
            and b.get("source")]


@dataclass(frozen=True)
class OtherRoutes:
    """The dead-letter routes of every queue a migration does not retire (another loop's, or a queue kept as it is),
    followed with the routing model: what each uses, so that retiring one loop never breaks another."""

    routes: Mapping[str, Route]

    @classmethod
    def of(cls, snapshot: Snapshot, retired: Sequence[str]) -> OtherRoutes:
        found = {}
        for q in sorted(snapshot.queues):
            letter = dead_letter(snapshot, q)
            if q in retired or letter.exchange is None:
                continue
            found[q] = route(snapshot, letter.exchange, Message(arrival_keys(snapshot, q)).dead_lettered(
                letter.routing_key))
        return cls(found)

    def using(self, kind: str, name: str = "", binding: int | None = None) -> str | None:
        """Why `name` (a queue or exchange) or the binding at index `binding` may not go, or None."""
        users = [q for q, r in self.routes.items()
                 if (kind == DELETE_QUEUE and name in r.queues | r.partly)
                 or (kind == DELETE_EXCHANGE and name in r.exchanges) or (kind == UNBIND and binding in r.bindings)]
        if not users:
            return None
        what = "it receives what" if kind == DELETE_QUEUE else "it routes what"
        also = f" (and {names(users[1:])})" if users[1:] else ""
        return (f"still on the retry route of another loop: {what} {names(users[:1])} dead-letters{also}; kept, it "
                "goes with the last loop that uses it")


def plan(found: Found, snapshot: Snapshot) -> list[Action]:
    """What to do, in order, from the vhost as read now."""
    m = found.migration
    assert m.external is not None
    old_queues = (*m.external.queues, m.source, *((m.external.error_queue,) if m.external.error_queue else ()))
    routes = OtherRoutes.of(snapshot, old_queues)
    old_exchanges = set(m.external.exchanges)
    successor = _queue_bindings(snapshot, m.target)
    actions = []
    for b in _queue_bindings(snapshot, m.source):
        if b["source"] in old_exchanges:
            continue  # part of the old topology: it goes with the queue or the exchange
        refused = None
        if m.target not in snapshot.queues:
            refused = (f"the successor {m.target} does not exist yet: apply step move first (`pulumi up`), then run "
                       "this again")
        elif not any(_same_binding(b, s) for s in successor):
            refused = (f"the successor {m.target} is not bound from exchange {b['source']} with routing key "
                       f"{b.get('routing_key') or '(empty)'} and these arguments: unbinding {m.source} first would "
                       f"leave publishes unrouted. Add the binding to {m.target}'s bindings in the stack file and "
                       "apply it, then run this again")
        index = next(i for i, x in enumerate(snapshot.bindings) if x is b)
        actions.append(Action(UNBIND, m.source, binding=b, refused=refused,
                              shared=routes.using(UNBIND, binding=index)))
    if not m.retiring:
        return actions
    actions += [Action(DELETE_QUEUE, q, shared=routes.using(DELETE_QUEUE, q)) for q in old_queues]
    actions += [Action(DELETE_EXCHANGE, x, gone=x not in snapshot.exchanges,
                       shared=routes.using(DELETE_EXCHANGE, x)) for x in m.external.exchanges]
    others = [q for q in snapshot.queues if q not in old_queues]
    for policy in m.external.policies:
        definition = snapshot.policies.get(policy)
        hits = [q for q in others if definition is not None and re.search(str(definition.get("pattern", "")), q)]
        refused = (f"policy {policy} also applies to queue {hits[0]}, which is not retired: remove it from "
                   f"external.policies of migration {m.name} (or narrow its pattern), then run this again"
                   if hits else None)
        actions.append(Action(DELETE_POLICY, policy, refused=refused, gone=definition is None))
    return actions


class Broker:
    """The writes of a retire on one broker: AMQP for unbinding and deleting (the broker's own preconditions), the
    management API to read depths and delete policies. Opened with `connect`."""

    def __init__(self, access: BrokerAccess, vhost: str) -> None:
        self.access = access
        self.vhost = vhost
        self.reader = DepthReader(access)
        self._connection: pika.BlockingConnection | None = None
        self._channel: BlockingChannel | None = None

    def depth(self, queue: str) -> QueueDepth | None:
        return self.reader.read(self.vhost, queue)

    @contextmanager
    def connect(self) -> Iterator[Broker]:
        try:
            host, port, tls = self.reader.amqp_address()
            params = self.access.amqp_parameters(host, port, tls, self.vhost, TIMEOUT_S)
        except DepthError as error:
            raise RetireError(str(error)) from None
        quiet_pika()
        try:
            self._connection = pika.BlockingConnection(params)
        except (pika.exceptions.AMQPError, ssl.SSLError) as error:
            raise RetireError(amqp_failure(error, params)
                              or f"AMQP at {host}:{port} vhost {self.vhost!r}: {reason(error)}") from None
        try:
            yield self
        finally:
            if self._connection.is_open:
                self._connection.close()

    def _call(self, operation: Callable[[BlockingChannel], Any]) -> tuple[int, str] | None:
        """Run one AMQP method; None when done, else the broker's (reply code, text), the channel reopened."""
        assert self._connection is not None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._connection.channel()
        try:
            operation(self._channel)
            return None
        except pika.exceptions.ChannelClosedByBroker as error:
            self._channel = None
            return error.reply_code, error.reply_text

    def unbind(self, binding: Mapping[str, Any]) -> tuple[int, str] | None:
        return self._call(lambda ch: ch.queue_unbind(str(binding["destination"]), str(binding["source"]),
                                                     str(binding.get("routing_key") or ""),
                                                     dict(binding.get("arguments") or {}) or None))

    def delete_queue(self, queue: str, quorum: bool) -> tuple[int, str] | None:
        if quorum:  # both flags are refused on quorum queues (540): read, then delete
            return self._call(lambda ch: ch.queue_delete(queue))
        return self._call(lambda ch: ch.queue_delete(queue, if_unused=True, if_empty=True))

    def delete_exchange(self, exchange: str) -> tuple[int, str] | None:
        return self._call(lambda ch: ch.exchange_delete(exchange, if_unused=True))

    def delete_policy(self, policy: str) -> tuple[int, str] | None:
        try:
            answer = self.access.client(TIMEOUT_S).request(
                "DELETE", f"policies/{path_escape(self.vhost)}/{path_escape(policy)}")
        except (ManagementError, DepthError) as error:
            raise RetireError(str(error)) from None
        if answer.status < 400:
            return None
        info = answer.data if isinstance(answer.data, dict) else {}
        return answer.status, str(info.get("reason") or info.get("error") or answer.data or "")

    def publish_rate(self, queue: str) -> float:
        """Messages a second published into `queue` in the management API's last sample (0 when it reports none:
        a queue that received nothing since it was declared has no message_stats)."""
        try:
            answer = self.access.client(TIMEOUT_S).request(
                "GET", f"queues/{path_escape(self.vhost)}/{path_escape(queue)}")
        except (ManagementError, DepthError) as error:
            raise RetireError(str(error)) from None
        info = answer.data if answer.status < 400 and isinstance(answer.data, dict) else {}
        rate = ((info.get("message_stats") or {}).get("publish_details") or {}).get("rate")
        return float(rate) if isinstance(rate, (int, float)) else 0.0


def _queue_refusal(found: Found, queue: str, depth: QueueDepth) -> str:
    m = found.migration
    if depth.messages:
        todo = (f"the shovel of step move carries what {queue} holds to {m.target}: go back to step move, or consume "
                f"it, until `make migrate-status` says drained" if queue == m.source else
                f"wait until it is empty (a wait queue empties on time into {m.source}; parked messages move with "
                f"external.error_queue's shovel in step move)")
        return f"{queue} holds {depth.describe()}: {todo}; then run this again"
    return (f"{queue} has {depth.consumers} consumer(s): stop the old application's consumers (in step move the "
            "shovel is one: apply step retire first); then run this again")


def _still_published(found: Found, queue: str, rate: float) -> str:
    """Why an empty old queue that still receives messages is not deleted: once it is gone, a publish to the default
    exchange with its name as routing key is unroutable (dropped, or returned to a mandatory publisher)."""
    m = found.migration
    return (f"{queue} is empty but still receives messages ({rate:g}/s in the management API's last sample): something "
            f"publishes to it, by its name through the default exchange (producers that address queue {queue} "
            "directly) or as a wait of the old topology expiring into it. Deleted now, those publishes would be "
            f"unroutable. Point such producers at {m.target} (by name, or through an exchange it is bound from), "
            "wait until nothing arrives (a few seconds of no publishes), then run this again")


def _outcome(answer: tuple[int, str] | None) -> tuple[str, str | None]:
    """("done" or "already gone", None), or ("", why the broker refused)."""
    if answer is None:
        return "done", None
    if answer[0] == 404:
        return "already gone", None
    return "", f"{answer[0]} {answer[1]}"


def run(found: Found, actions: Sequence[Action], broker: Broker, apply: bool,
        out: Callable[[str], None]) -> bool:
    """Print each action and, with `apply`, do it; stop at the first refusal. True when nothing was refused."""
    for number, action in enumerate(actions, start=1):
        line = f"{number}. {action.describe()}"
        if action.shared is not None and not action.gone:
            out(f"{line}: refused: {action.shared}")
            continue
        if action.refused is not None:
            out(f"{line}: refused: {action.refused}")
            return False
        if action.gone:
            out(f"{line}: already gone")
            continue
        if action.kind == DELETE_QUEUE:
            depth = broker.depth(action.name)
            if depth is None:
                out(f"{line}: already gone")
                continue
            if depth.messages > 0 or depth.consumers > 0:
                out(f"{line}: refused: {_queue_refusal(found, action.name, depth)}")
                return False
            if (rate := broker.publish_rate(action.name)) > 0:
                out(f"{line}: refused: {_still_published(found, action.name, rate)}")
                return False
            if not apply:
                out(f"{line}: would delete (now {depth.describe()})")
                continue
            done, refusal = _outcome(broker.delete_queue(action.name, depth.queue_type == "quorum"))
            if refusal is not None and refusal.startswith("406 "):
                after = broker.depth(action.name)
                refusal = _queue_refusal(found, action.name, after) if after is not None else refusal
        elif not apply:
            out(f"{line}: would do")
            continue
        elif action.kind == UNBIND:
            assert action.binding is not None
            done, refusal = _outcome(broker.unbind(action.binding))
        elif action.kind == DELETE_EXCHANGE:
            done, refusal = _outcome(broker.delete_exchange(action.name))
            if refusal is not None and refusal.startswith("406 "):
                refusal = (f"exchange {action.name} still routes to a queue ({refusal}): it is shared with a queue "
                           "that is not retired; remove it from external.exchanges (or unbind that queue), then run "
                           "this again")
        else:
            done, refusal = _outcome(broker.delete_policy(action.name))
        if refusal is not None:
            out(f"{line}: refused: {refusal}")
            return False
        out(f"{line}: {done}")
    return True


def header(found: Found, where: str, apply: bool) -> str:
    m = found.migration
    what = ("unbind the old queue where the successor is bound" if not m.retiring else
            "retire the old objects, each only when empty and unused")
    mode = "applying" if apply else "read-only: nothing is changed (pass --apply, or APPLY=1 to make, to do it)"
    return (f"Migration {m.name} (vhost {found.vhost}, step {m.step}): {m.source} → {m.target}, at {where}: "
            f"{what}; {mode}")


def footer(found: Found, finished: bool, apply: bool) -> str:
    m = found.migration
    if not finished:
        return "Stopped at the first refusal: nothing after it was done. Nothing was lost: the broker refuses a " \
               "deletion that would lose a message."
    if not apply:
        return "Nothing refused now; run again with --apply to do it."
    if not m.retiring:
        return (f"Done: new publishes reach {m.target} alone and the shovel carries what {m.source} holds. Next: when "
                f"`make migrate-status` says drained, set step: retire in a commit, apply it, and run this again.")
    return f"Done: the old objects are gone. The migration entry {m.name} may be removed from the stack file."


def retire(found: Found, snapshot: Snapshot, broker: Broker, apply: bool, out: Callable[[str], None]) -> bool:
    """Plan from `snapshot`, then run on `broker`; True when nothing was refused."""
    actions = plan(found, snapshot)
    out(header(found, broker.access.management_url, apply))
    if not actions:
        out("Nothing to do: the old queue is bound from no exchange.")
        out(footer(found, True, True))
        return True
    try:
        with broker.connect():
            finished = run(found, actions, broker, apply, out)
    except DepthError as error:
        raise RetireError(str(error)) from None
    out(footer(found, finished, apply))
    return finished

