"""`rabbitmq-retry`: consume a retryable queue with a demo handler, publish test messages, operate parked
messages (`parked list | show | redrive | purge`), and send messages stuck in a wait tier on (`stuck redrive`).

The contract comes from `--contract FILE` (the JSON of `pulumi stack output retry_contracts --json`, or
one contract; `make contracts STACK=<stack>` writes it without the Pulumi CLI) or from `--stack STACK`
(runs `pulumi stack output retry_contracts --json --stack STACK`). The broker is `--url` (before or after
the command) or $RABBITMQ_URL; the vhost is the contract's, and for `publish` the one `--vhost` or the URL
names (`…/%2F` is `/`). A cluster's nodes are several URLs (`--url` repeated, or comma-separated there and in
$RABBITMQ_URL), tried in order on every connect and reconnect. `amqps://` URLs speak TLS, verified with
`--cacert-file` (else $RABBITMQ_CACERT, else the system's CAs), with a client certificate from `--clientcert-file`
and `--clientkey-file` (else $RABBITMQ_CLIENTCERT, $RABBITMQ_CLIENTKEY); without a password in the URL the
certificate is the login (SASL EXTERNAL). docs/tls.md has the names. Only warnings, and the line saying an
unreachable broker answers again, are logged unless `-v`. A refused login or vhost and a certificate the client
does not trust fail at once with what to check, a port that does not speak what the URL says after three closed
handshakes; only an unreachable broker is waited for.

`parked redrive` sends each copy to the failing queue alone (`Q.requeue` for strategies tiers and native, the
delay levels with a zero delay for levels) and says so; `--to-original-exchange` republishes where the message
was first published, which reaches every queue bound there. `stuck redrive` moves every message a wait tier holds
(one that entered while a policy overrode the tier's TTL never expires) to the failing queue alone, the same way.

Exit status: 0 done; 1 error (one `error: …` line); 2 usage, including a purge without a filter or --all.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import logging
import os
import random
import re
import signal
import sys
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any

import pika.exceptions
from pika.spec import BasicProperties

from . import headers as h
from .connection import DEFAULT_URL, BrokerRefusedError, BrokerUnreachableError, hosts, quiet_pika
from .consumer import DEFAULT_PREFETCH, Handler, RetryingConsumer, contract_mode
from .contract import Contract, ContractError, contracts_in, load_contract, read_contracts, stack_output, validate
from .contract_types import RetryContract
from .durations import duration_ms
from .management import TLS_SETTINGS, TlsSettings
from .parked import Outcome, Parked, ParkedQueue, Selection, StuckTiers
from .publisher import Publisher
from .strategies import MODES, behaviour_of

PROG = "rabbitmq-retry"
PROJECT_COMMANDS = {"plan": "plan_report", "review": "review", "drift": "drift", "doctor": "doctor",
                    "definitions": "definitions", "alerts": "alerts", "contracts": "contracts"}
"""The project's tools (`python -m tools.<module>`, `make <command>`) run as `rabbitmq-retry <command>` in the
project's checkout: what `pip install "rabbitmq-retry[tools]"` is for."""
LIST_LIMIT = 10_000
"""Messages `parked list` and `parked summary` read by default: each is held unacknowledged until the read ends
(basic.get cannot page past a message without holding it), so the default bounds what a read holds however
large the error queue; the count and the oldest are exact whatever the limit."""


class UsageError(Exception):
    """A command the tool refuses as given (exit status 2)."""


def duration(value: str) -> timedelta:
    """`90s`, `15m`, `2h`, `7d`, `1h30m` → timedelta (argparse type); the stack config's grammar."""
    ms = duration_ms(value)
    if ms is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not a duration (use 90s, 15m, 2h, 7d or 1h30m)")
    return timedelta(milliseconds=ms)


def regex(value: str) -> re.Pattern[str]:
    try:
        return re.compile(value)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"{value!r} is not a regular expression: {error}") from None


def positive(kind: type[int] | type[float]) -> Any:
    def parse(value: str) -> int | float:
        number = kind(value)
        if number <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
        return number
    return parse


def _contract(args: argparse.Namespace) -> Contract:
    source: Any = args.contract if args.contract is not None else stack_output(args.stack)
    return load_contract(source, args.queue, args.vhost)


def _selection(args: argparse.Namespace) -> Selection:
    return Selection(args.reason, args.older_than, args.newer_than, args.limit)


# --- consume / publish ----------------------------------------------------------------------------

def _flaky_handler(fail_rate: float, seed: int | None) -> Handler:
    rng = random.Random(seed)

    def handle(body: bytes, properties: BasicProperties) -> None:
        print(f"  got {properties.message_id} {body[:80]!r} headers={properties.headers or {}}", flush=True)
        if rng.random() < fail_rate:
            raise RuntimeError(f"simulated failure (fail rate {fail_rate})")

    return handle


def _consume(args: argparse.Namespace) -> int:
    contract = _contract(args)
    how = behaviour_of(contract).describe(contract, args.mode or contract_mode(contract))
    print(f"consuming {contract['vhost']}/{contract['queue']} in {how}; "
          f"max_retries {contract['max_retries']}; parking in {contract['error_queue']}", flush=True)
    consumer = RetryingConsumer(args.url, contract, _flaky_handler(args.fail_rate, args.seed), args.mode,
                                args.prefetch, handler_timeout=args.handler_timeout)

    def stop(signum: int, frame: FrameType | None) -> None:
        print(f"signal {signal.Signals(signum).name}: finishing the delivery in hand, then stopping", flush=True)
        consumer.stop()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
    try:
        consumer.run(max_messages=args.max_messages, idle_timeout=args.idle_timeout)
    finally:
        consumer.close()
        print(f"processed {consumer.processed}, retried {consumer.retried}, parked {consumer.parked} "
              f"({consumer.permanent} permanent), requeued {consumer.requeued}", flush=True)
    return 0


def _publish(args: argparse.Namespace) -> int:
    target = hosts(args.url, args.vhost)
    with Publisher(target, connect_timeout=args.connect_timeout) as publisher:
        for n in range(1, args.count + 1):
            message_id = uuid.uuid4().hex
            body = json.dumps({"n": n, "published_at": h.utc_iso()})
            try:
                publisher.publish(args.exchange, args.routing_key, body, message_id, content_type="application/json")
            except pika.exceptions.UnroutableError:
                print(f"error: message {n} of {args.count} came back unroutable: no queue of vhost "
                      f"{target[0].virtual_host!r} is bound to exchange {args.exchange!r} for routing key "
                      f"{args.routing_key!r}, and nothing more was published; check --exchange, --routing-key and "
                      "--vhost", file=sys.stderr)
                return 1
            print(f"published {message_id} {body}", flush=True)
    return 0


# --- parked ---------------------------------------------------------------------------------------

def _parked_queue(args: argparse.Namespace) -> ParkedQueue:
    return ParkedQueue(args.url, _contract(args), connect_timeout=args.connect_timeout)


def _list(args: argparse.Namespace) -> int:
    with _parked_queue(args) as parked:
        held = parked.count()
        selection = _selection(args)
        groups = parked.summary(selection)
        total = sum(g.count for g in groups)
        if args.json:
            print(json.dumps([{"reason": g.reason, "original_routing_key": g.routing_key, "count": g.count,
                               "redriven_before": g.redriven, "oldest_first_failure_at": _when(g.oldest)}
                              for g in groups], indent=1))
            return 0
        print(f"{total} parked in {parked.contract['vhost']}/{parked.queue}{_read_of(selection, total, held)}")
        if groups:
            print(f"{'count':>7}  {'redriven':>8}  {'oldest first failure':<24}  {'routing key':<24}  reason")
        for g in groups:
            print(f"{g.count:>7}  {g.redriven:>8}  {_when(g.oldest) or '-':<24}  {g.routing_key:<24}  "
                  f"{g.reason[:args.reason_width]}")
    return 0


def _read_of(selection: Selection, total: int, held: int) -> str:
    """What `list` read of the `held` parked messages, after their count: all of them, the selected ones, or the
    first `total` (at `--limit`)."""
    if selection.limit is not None and total >= selection.limit and held > total:
        return (f": the first {total:,} of {held:,} read (--limit {selection.limit:,}: at most that many are held "
                "unacknowledged while they are read); raise --limit to read more")
    return " (selected)" if selection.filtered else ""


def _when(moment: datetime | None) -> str | None:
    """A moment as the headers write it (None for none)."""
    return h.utc_iso(moment) if moment else None


def _summary(args: argparse.Namespace) -> int:
    """Every error queue of a contract file: how many are parked, since when, and why."""
    rows = [_error_queue(args, contract) for contract in _summary_contracts(args)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{sum(r['parked'] for r in rows):,} parked in {len(rows)} error queues; reasons from at most "
          f"{args.limit:,} messages of each (--limit)")
    print(f"{'parked':>9}  {'oldest first failure':<24}  {'queue':<40}  top reasons (of those read)")
    for r in rows:
        top = "; ".join(f"{n}× {reason[:args.reason_width]}" for reason, n in list(r["reasons"].items())[:3])
        print(f"{r['parked']:>9,}  {r['oldest_first_failure_at'] or '-':<24}  {r['vhost'] + '/' + r['queue']:<40}  "
              f"{top}")
    return 0


def _summary_contracts(args: argparse.Namespace) -> list[RetryContract]:
    """The contracts `summary` reads, by vhost and queue (only `--vhost`'s when given)."""
    source: Any = args.contract if args.contract is not None else stack_output(args.stack)
    data = source if isinstance(source, dict) else read_contracts(source)
    contracts = sorted((validate(c) for c in contracts_in(data)), key=lambda c: (c["vhost"], c["queue"]))
    contracts = [c for c in contracts if args.vhost is None or c["vhost"] == args.vhost]
    if not contracts:
        raise ContractError("no contract" + (f" of vhost {args.vhost!r}" if args.vhost else "") + " in the file")
    return contracts


def _error_queue(args: argparse.Namespace, contract: RetryContract) -> dict[str, Any]:
    """One row of `summary`: the contract's error queue, its count, oldest first failure and reasons."""
    with ParkedQueue(args.url, contract, connect_timeout=args.connect_timeout) as parked:
        count = parked.count()
        head = parked.oldest() if count else None
        groups = parked.summary(Selection(limit=args.limit)) if count else []
    reasons: collections.Counter[str] = collections.Counter()
    for g in groups:
        reasons[g.reason] += g.count
    oldest = head.first_failure_at if head is not None else None
    return {"vhost": contract["vhost"], "queue": contract["queue"], "error_queue": contract["error_queue"],
            "parked": count, "read": sum(g.count for g in groups),
            "oldest_first_failure_at": _when(oldest),
            "reasons": dict(sorted(reasons.items(), key=lambda r: (-r[1], r[0])))}


def _show(args: argparse.Namespace) -> int:
    with _parked_queue(args) as parked:
        for n, message in enumerate(parked.selected(_selection(args)), start=1):
            p = message.properties
            body = message.body[:args.body_bytes]
            more = f" … ({len(message.body)} bytes)" if len(message.body) > args.body_bytes else ""
            print(f"#{n} message_id={p.message_id} content_type={p.content_type} timestamp={p.timestamp}")
            for key, value in sorted(message.headers.items()):
                print(f"    {key}: {h.text(value) if isinstance(value, bytes) else value}")
            print(f"    body: {body.decode('utf-8', 'replace')!r}{more}")
    return 0


def _redrive(args: argparse.Namespace) -> int:
    def progress(message: Parked, exchange: str, routing_key: str) -> None:
        if args.verbose:
            print(f"moved {message.properties.message_id} to {exchange!r} {routing_key!r}", flush=True)

    outcome = Outcome()
    try:
        with _parked_queue(args) as parked:
            parked.redrive(_selection(args), to_original=args.to_original_exchange, dry_run=args.dry_run,
                           rate=args.rate, progress=progress, outcome=outcome)
    except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError, OSError) as error:
        if args.dry_run:
            raise
        print(f"error: {type(error).__name__}: {error}: the connection was lost after {outcome.moved} of the "
              f"{outcome.selected} selected so far moved; nothing is lost (what was not moved went back to the error "
              "queue, a copy in flight may arrive twice); run the same command again once the node is back to move "
              "the rest", file=sys.stderr)
        return 1
    where = "; ".join(f"{n} to exchange {x!r} key {k!r}, reaching {parked.reaches(x, k, args.to_original_exchange)}"
                      for (x, k), n in sorted(outcome.destinations.items()))
    verb = "would move" if args.dry_run else "moved"
    print(f"read {outcome.seen}, selected {outcome.selected}, {verb} "
          f"{outcome.selected if args.dry_run else outcome.moved}"
          f" ({outcome.redriven_before} redriven before){': ' + where if where else ''}")
    return 0


def _stuck_redrive(args: argparse.Namespace) -> int:
    moved: list[tuple[str, Outcome]] = []
    with StuckTiers(args.url, _contract(args), connect_timeout=args.connect_timeout) as tiers:
        try:
            for queue in tiers.tiers(args.tier):
                moved.append((queue, tiers.move(queue, dry_run=args.dry_run, rate=args.rate)))
        except (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError, OSError) as error:
            if args.dry_run:
                raise
            print(f"error: {type(error).__name__}: {error}: the connection was lost after "
                  f"{sum(o.moved for _, o in moved)} messages moved; nothing is lost (what was not moved went back "
                  "to its tier, a copy in flight may arrive twice); run the same command again to move the rest",
                  file=sys.stderr)
            return 1
        verb = "would move" if args.dry_run else "moved"
        for queue, outcome in moved:
            count = outcome.seen if args.dry_run else outcome.moved
            print(f"{tiers.contract['vhost']}/{queue}: read {outcome.seen}, {verb} {count} to queue "
                  f"{tiers.input_queue!r} only" + "".join(f" (exchange {x!r})" for x, _ in outcome.destinations))
    return 0


def _purge(args: argparse.Namespace) -> int:
    selection = _selection(args)
    if not args.all and not selection.filtered:
        raise UsageError("refusing to purge every parked message: give a filter (--reason, --older-than, "
                         "--newer-than, --limit) or --all")
    if not args.yes and not args.dry_run:
        raise UsageError("purge deletes parked messages for good: add --yes (or try --dry-run first)")
    with _parked_queue(args) as parked:
        outcome = parked.purge(selection, everything=args.all, dry_run=args.dry_run)
    print(f"read {outcome.seen}, selected {outcome.selected}, "
          + (f"would delete {outcome.selected}" if args.dry_run else f"deleted {outcome.deleted}"))
    return 0


# --- arguments ------------------------------------------------------------------------------------

def _contract_options(parser: argparse.ArgumentParser, pick_one: bool = True) -> None:
    """Where the contracts come from, and (`pick_one`) which of them a command follows."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--contract", type=Path,
                        help="JSON of `pulumi stack output retry_contracts --json` (or `make contracts`), "
                        "or one contract")
    source.add_argument("--stack",
                        help="read the contracts with `pulumi stack output retry_contracts --json --stack STACK`")
    if pick_one:
        parser.add_argument("--queue", help="which input queue, when there are several contracts")
        parser.add_argument("--vhost", help="which vhost, when the queue name is in several")


def _filter_options(parser: argparse.ArgumentParser, limit: int | None = None) -> None:
    parser.add_argument("--reason", type=regex, help="regex searched in error-reason")
    parser.add_argument("--older-than", type=duration, help="first failure at least this long ago (e.g. 2h)")
    parser.add_argument("--newer-than", type=duration, help="first failure less than this long ago (e.g. 15m)")
    parser.add_argument("--limit", type=positive(int), default=limit,
                        help="at most this many messages" + (f" (default {limit})" if limit else ""))
    parser.add_argument("--connect-timeout", type=float, default=10.0,
                        help="seconds to wait for an unreachable broker (default %(default)s)")


def _url_option(parser: argparse.ArgumentParser, root: bool = False) -> None:
    """`--url` on the root and again on every command, where it replaces the root's only when given: it works
    before or after the command. Repeated (or comma-separated), it lists a cluster's nodes (`urls`). The TLS
    settings likewise, under the names the tools and the provider use (docs/tls.md)."""
    default = None if root else argparse.SUPPRESS
    parser.add_argument("--url", action="append", default=default,
                        help="AMQP URL, before or after the command (default $RABBITMQ_URL or "
                        + DEFAULT_URL.replace("%", "%%") + "); the vhost comes from the contract. A cluster: "
                        "repeat it, or separate URLs by commas; one per node, tried in order. amqps:// for TLS")
    for field, setting in TLS_SETTINGS.items():
        if field == "insecure":
            parser.add_argument(setting.flag, dest=field, action="store_true", default=default,
                                help=f"amqps: skip verifying the broker's certificate (else ${setting.env})")
        else:
            parser.add_argument(setting.flag, dest=field, metavar="FILE", default=default,
                                help=f"amqps: PEM file (else ${setting.env})"
                                + ("; without a password in the URL, log in by this certificate (SASL EXTERNAL)"
                                   if field == "clientcert_file" else ""))


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _url_option(root, root=True)
    root.add_argument("-v", dest="log_info", action="store_true",
                      help="log at INFO, pika's connection lines included (default: warnings only)")
    commands = root.add_subparsers(dest="command", required=True)
    for command, module in PROJECT_COMMANDS.items():  # main runs them; listed here for --help
        commands.add_parser(command, help=f"`make {command}` (python -m tools.{module}), run in the project's "
                            f"checkout; its options: rabbitmq-retry {command} --help")

    consume = commands.add_parser("consume", help="consume a retryable queue with a demo handler that fails at random")
    _contract_options(consume)
    consume.add_argument("--mode", choices=MODES,
                         help="how a tiers contract retries (default: the contract's, republish, or reject for a "
                         "single tier); a native or levels contract retries its own way and ignores it")
    consume.add_argument("--fail-rate", type=float, default=0.3, help="probability that one attempt fails")
    consume.add_argument("--seed", type=int, help="seed of the simulated failures")
    consume.add_argument("--prefetch", type=int, default=DEFAULT_PREFETCH,
                         help=f"deliveries sent ahead of the handler (default {DEFAULT_PREFETCH})")
    consume.add_argument("--handler-timeout", type=positive(float), help="seconds one delivery's handler may run")
    consume.add_argument("--max-messages", type=int, help="stop after this many deliveries")
    consume.add_argument("--idle-timeout", type=float, help="stop after this many idle seconds")
    consume.set_defaults(run=_consume)
    _url_option(consume)

    publish = commands.add_parser("publish", help="publish test messages (persistent, confirmed, mandatory)")
    publish.add_argument("--exchange", required=True)
    publish.add_argument("--routing-key", default="")
    publish.add_argument("--count", type=int, default=1)
    publish.add_argument("--vhost", help="vhost of the exchange (default: the URL's; `…/%%2F` is `/`)")
    publish.add_argument("--connect-timeout", type=float, default=10.0,
                         help="seconds to wait for an unreachable broker (default %(default)s)")
    publish.set_defaults(run=_publish)
    _url_option(publish)

    parked = commands.add_parser("parked", help="parked messages of a retryable queue's error queue")
    actions = parked.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="counts by error reason and original routing key, oldest first failure")
    _contract_options(listing)
    _filter_options(listing, limit=LIST_LIMIT)
    listing.add_argument("--json", action="store_true", help="the groups as JSON")
    listing.add_argument("--reason-width", type=int, default=100, help="characters of each reason shown")
    _url_option(listing)
    listing.set_defaults(run=_list)

    summary = actions.add_parser("summary", help="every error queue of the contract file: count, oldest, reasons")
    _contract_options(summary, pick_one=False)
    summary.add_argument("--vhost", help="only this vhost's queues")
    summary.add_argument("--limit", type=positive(int), default=LIST_LIMIT,
                         help="messages read per queue for the reasons, at most that many held unacknowledged at "
                         "once (default %(default)s); the count and the oldest are exact")
    summary.add_argument("--connect-timeout", type=float, default=10.0,
                         help="seconds to wait for an unreachable broker (default %(default)s)")
    summary.add_argument("--json", action="store_true", help="one object per queue")
    summary.add_argument("--reason-width", type=int, default=60, help="characters of each reason shown")
    _url_option(summary)
    summary.set_defaults(run=_summary)

    show = actions.add_parser("show", help="a few parked messages with their headers, bodies truncated")
    _contract_options(show)
    _filter_options(show, limit=5)
    show.add_argument("--body-bytes", type=int, default=200, help="bytes of each body shown (default %(default)s)")
    _url_option(show)
    show.set_defaults(run=_show)

    redrive = actions.add_parser("redrive", help="send parked messages back with a full retry budget")
    _contract_options(redrive)
    _filter_options(redrive)
    route = redrive.add_mutually_exclusive_group()
    route.add_argument("--to-queue", action="store_true",
                       help="the default: each copy reaches the input queue alone (Q.requeue for tiers and native, "
                       "level 0 with a zero delay for levels)")
    route.add_argument("--to-original-exchange", action="store_true",
                       help="publish each copy to the exchange and routing key it was first published with: it "
                       "reaches every queue bound there, not only this one")
    redrive.add_argument("--rate", type=positive(float), default=100.0, help="messages a second (default %(default)s)")
    redrive.add_argument("--dry-run", action="store_true", help="count what would move; move nothing")
    redrive.add_argument("--verbose", action="store_true", help="one line per moved message")
    _url_option(redrive)
    redrive.set_defaults(run=_redrive)

    purge = actions.add_parser("purge", help="delete parked messages: needs --yes, and a filter or --all")
    _contract_options(purge)
    _filter_options(purge)
    purge.add_argument("--all", action="store_true", help="every parked message (queue.purge)")
    purge.add_argument("--yes", action="store_true", help="really delete")
    purge.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    _url_option(purge)
    purge.set_defaults(run=_purge)

    stuck = commands.add_parser("stuck", help="messages stuck in a wait tier (docs/alerts.md, not_draining)")
    stuck_actions = stuck.add_subparsers(dest="action", required=True)
    moving = stuck_actions.add_parser(
        "redrive", help="move every message of the wait tiers to the failing queue alone, as if its wait were over "
        "(fix the policy that overrode the tier's TTL first: `make drift`)")
    _contract_options(moving)
    moving.add_argument("--tier", help="only this tier (its queue or routing key, e.g. wait.2); default: every tier")
    moving.add_argument("--rate", type=positive(float), default=100.0, help="messages a second (default %(default)s)")
    moving.add_argument("--dry-run", action="store_true", help="count what would move; move nothing")
    moving.add_argument("--connect-timeout", type=float, default=10.0,
                        help="seconds to wait for an unreachable broker (default %(default)s)")
    _url_option(moving)
    moving.set_defaults(run=_stuck_redrive)
    return root


def urls(given: Sequence[str] | None, environment: str | None) -> list[str]:
    """The AMQP URLs to try in order: every `--url` (each may hold several, comma-separated), else
    $RABBITMQ_URL (comma-separated too), else the local default. An empty entry is a usage error."""
    listed = [part.strip() for value in (given or [environment or DEFAULT_URL]) for part in value.split(",")]
    if not all(listed):
        raise UsageError(f"--url / RABBITMQ_URL: an empty URL in {', '.join(given or [environment or ''])!r}; "
                         "separate URLs by single commas")
    return listed


def project_command(command: str, argv: list[str], project: Path) -> int:
    """`rabbitmq-retry plan …`: the project's own tool, run from its checkout (the current directory), so that the
    stack is evaluated by the components it is deployed with; nothing of Pulumi's is imported before."""
    if not (project / "tools" / "__init__.py").is_file() or not (project / "__main__.py").is_file():
        print(f"{PROG} {command}: error: {project} is not a rabbitmq-retry project (no tools/ and __main__.py): run "
              "it in the project's checkout, where Pulumi.yaml is", file=sys.stderr)
        return 1
    sys.path.insert(0, str(project))
    tool = importlib.import_module(f"tools.{PROJECT_COMMANDS[command]}")
    return int(tool.main(argv))


def _log(verbose: bool) -> None:
    """Warnings only (pika logs a line per connection step at INFO); our own lines (a broker reachable again)
    stay. `verbose` (-v): everything at INFO."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("rabbitmq_retry_client").setLevel(logging.DEBUG if verbose else logging.INFO)
    if verbose:
        logging.getLogger("pika").setLevel(logging.INFO)
    else:
        quiet_pika()  # pika logs a refused login at ERROR with a traceback; our error line says it once


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PROJECT_COMMANDS:
        return project_command(argv[0], argv[1:], Path.cwd())
    args = parser().parse_args(argv)
    _log(args.log_info)
    try:
        tls = TlsSettings.from_sources(None, os.environ, {f: getattr(args, f, None) for f in TLS_SETTINGS})
        try:
            args.url = hosts(urls(args.url, os.environ.get("RABBITMQ_URL")), None, tls)
        except ValueError as error:
            raise UsageError(f"--url / RABBITMQ_URL: {error}") from None
        return int(args.run(args))
    except UsageError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except (BrokerUnreachableError, BrokerRefusedError, ContractError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError, pika.exceptions.AMQPError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
