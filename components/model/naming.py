"""Physical RabbitMQ names, Pulumi logical keys and policy patterns: every name this project mints.

Every name here is part of the deployed contract: changing a physical name, or a logical key
(which is part of a resource's URN), replaces the resource and loses the messages of a queue.
`tests/snapshots/` and `tests/recordings/` pin them. The planners take every name from here.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from urllib.parse import quote

MAX_NAME_BYTES = 255
RESERVED_PREFIX = "amq."
ATTEMPT_HEADER = "retry-count"
"""Attempt counter for republished retries. Not `x-`: RabbitMQ 4 ignores client-set `x-death`."""


def retry_exchange(queue: str) -> str:
    return f"{queue}.retry"


def wait_queue(queue: str, tier: int) -> str:
    """Wait queues are named by tier index, never by delay: editing a delay must not rename one."""
    return f"{queue}.wait.{tier}"


def wait_routing_key(tier: int) -> str:
    return f"wait.{tier}"


def requeue_exchange(queue: str) -> str:
    return f"{queue}.requeue"


def error_exchange(queue: str) -> str:
    return f"{queue}.error"


def error_queue(queue: str) -> str:
    return f"{queue}.error"


def derived_queue_names(queue: str, tiers: int) -> list[str]:
    """Every queue a retryable queue `queue` with `tiers` wait tiers owns, input first."""
    return [queue, *(wait_queue(queue, n) for n in range(1, tiers + 1)), error_queue(queue)]


def derived_exchange_names(queue: str) -> list[str]:
    """Every exchange a retryable queue `queue` of strategy `tiers` owns (the other strategies keep only the
    error exchange: `strategies.<name>.owned_names`)."""
    return [retry_exchange(queue), requeue_exchange(queue), error_exchange(queue)]


DELAY_PREFIX = "rabbitmq-retry.delay"
"""Strategy `levels`: every name of a vhost's shared delay levels starts with it; a config name may not."""
DELAY_WORDS = 28
"""Bit words of a `levels` routing key, whatever `max_delay`: a longer maximum only adds top levels, and the
word each existing level reads never moves under a waiting message."""
DELIVERY_EXCHANGE = f"{DELAY_PREFIX}.deliver"
"""Topic exchange after level 0: routes a message whose delay is over to exactly its queue."""
UNDELIVERABLE = f"{DELAY_PREFIX}.undeliverable"
"""Fanout exchange and queue: the delivery exchange's alternate exchange, for a copy whose queue is gone."""
TOPIC_WILDCARDS = ("*", "#")


def delay_level(level: int) -> str:
    """Level k's topic exchange and its queue (both named so): the queue holds a message `unit × 2^k`."""
    return f"{DELAY_PREFIX}.{level}"


def _bit_position(level: int) -> str:
    """The `*.` words before level k's bit: bits are most significant first, level 0's last."""
    return "*." * (DELAY_WORDS - 1 - level)


def delay_level_pattern(level: int, bit: str) -> str:
    """Level k's binding for its bit: `1` to its queue, `0` on to the next level down."""
    return f"{_bit_position(level)}{bit}.#"


def delivery_pattern(queue: str) -> str:
    """The delivery binding of `queue`: exactly DELAY_WORDS bit words, then the queue's name. Word for word,
    so it never matches a longer name that ends the same (`#.orders.billing` would match `x.orders.billing`)."""
    return "*." * DELAY_WORDS + queue


def delay_routing_key(units: int, queue: str) -> str:
    """What a client publishes to the top level: the delay in units, most significant bit first, then the queue."""
    if not 0 <= units < 2**DELAY_WORDS:
        raise ValueError(f"{units} units do not fit in {DELAY_WORDS} bits")
    return "".join(f"{bit}." for bit in format(units, f"0{DELAY_WORDS}b")) + queue


def exact_pattern(name: str) -> str:
    """A policy pattern that matches exactly `name` and nothing else."""
    return f"^{re.escape(name)}$"


# --- Logical keys ---------------------------------------------------------------------------------------------
# A component's child is registered as `logical_name(component, key)`; the key is part of its URN.


def logical_name(component: str, key: str) -> str:
    """A child's Pulumi name. Joined with "-", so distinct keys can meet: see `checks.check_logical_names`."""
    return f"{component}-{key}"


def id_vhost(vhost: str) -> str:
    """A vhost as the provider's binding IDs write it: `%` and `/` escaped, nothing else (`/` separates the ID's
    parts); the one place this escaping is written."""
    return vhost.replace("%", "%25").replace("/", "%2F")


def binding_id(vhost: str, source: str, destination: str, destination_type: str, properties_key: str) -> str:
    """The provider's ID of a binding, what an `import` entry names and its Read returns."""
    return f"{id_vhost(vhost)}/{source}/{destination}/{destination_type}/{properties_key}"


def vhost_key(vhost: str) -> str:
    """Logical name of a vhost component: the vhost name, path-escaped so `/` cannot appear."""
    return quote(vhost, safe="")


VHOST_KEY = "vhost"
"""The VHost resource a Vhost component creates."""
DELAY_LEVELS_KEY = "delay-levels"
"""The DelayLevels component of a Vhost component."""
PATH_GUARD_KEY = "path-guard"
"""The path guard of a component that owns retry paths (`resources.open_path_guard`)."""
REMOVAL_GUARD_KEY = "removal-guard"
"""Its removal guard (`resources.close_path_guard`)."""


def retryable_key(queue: str) -> str:
    """A RetryableQueue component of a Vhost component: the queue's name."""
    return queue


def exchange_key(exchange: str) -> str:
    """A config exchange of a vhost."""
    return f"exchange-{exchange}"


def plain_queue_key(queue: str) -> str:
    """A queue without retries."""
    return f"queue-{queue}"


def plain_queue_policy_key(queue: str) -> str:
    """The limits policy of a queue without retries."""
    return f"queue-{queue}-policy"


def config_policy_key(policy: str) -> str:
    """A vhost's `policies[]` entry."""
    return f"policy-{policy}"


def operator_policy_key(policy: str) -> str:
    """A vhost's `operator_policies[]` entry."""
    return f"operator-policy-{policy}"


def binding_key(queue: str, exchange: str, routing_key: str, arguments: Mapping[str, object]) -> str:
    """Stable logical key of a config binding; header arguments add a short digest."""
    key = f"binding-{queue}-{exchange}-{routing_key}" if routing_key else f"binding-{queue}-{exchange}"
    if arguments:
        digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()[:8]
        key = f"{key}-{digest}"
    return key


def permissions_key(user: str) -> str:
    return f"permissions-{user}"


def user_key(user: str) -> str:
    return f"user-{user}"


def user_limits_key(user: str) -> str:
    return f"limits-{user}"


def topic_permissions_key(user: str) -> str:
    return f"topic-{permissions_key(user)}"


# Children of a RetryableQueue component.
INPUT_KEY = "input"
ERROR_KEY = "error"
QUEUE_POLICY_KEY = "policy"
"""The input queue's policy (limits; `native`: its delays too)."""
ERROR_POLICY_KEY = "error-policy"
RETRY_EXCHANGE_KEY = "retry-exchange"
REQUEUE_EXCHANGE_KEY = "requeue-exchange"
ERROR_EXCHANGE_KEY = "error-exchange"
REQUEUE_BINDING_KEY = "requeue-binding"
ERROR_BINDING_KEY = "error-binding"
DELIVERY_BINDING_KEY = "delivery-binding"
"""`levels`: the input queue's binding to the delay levels' delivery exchange."""


def wait_key(tier: int) -> str:
    return f"wait-{tier}"


def wait_binding_key(tier: int) -> str:
    return f"{wait_key(tier)}-binding"


def wait_policy_key(tier: int) -> str:
    return f"{wait_key(tier)}-policy"


# Children of a DelayLevels component.
DELIVER_KEY = "deliver"
UNDELIVERABLE_KEY = "undeliverable"
UNDELIVERABLE_EXCHANGE_KEY = f"{UNDELIVERABLE_KEY}-exchange"
UNDELIVERABLE_BINDING_KEY = f"{UNDELIVERABLE_KEY}-binding"
UNDELIVERABLE_POLICY_KEY = f"{UNDELIVERABLE_KEY}-policy"


def level_key(level: int) -> str:
    """Level k's queue; its exchange, bindings and policy add a suffix."""
    return f"level-{level}"


def level_exchange_key(level: int) -> str:
    return f"{level_key(level)}-exchange"


def level_wait_key(level: int) -> str:
    """Level k's binding of a 1 bit to its own queue."""
    return f"{level_key(level)}-wait"


def level_pass_key(level: int) -> str:
    """Level k's binding of a 0 bit on to the level below."""
    return f"{level_key(level)}-pass"


def level_policy_key(level: int) -> str:
    return f"{level_key(level)}-policy"


# Migrations (`vhosts[].migrations[]`).
MIGRATE_PREFIX = "rabbitmq-retry.migrate"
SHOVEL_USER = "rabbitmq-retry-shovel"
"""What every stack's shovel user shares: the start of its name (`shovel_user`), the key of its password in
`passwords`, and the user part of its logical names (a stack has one shovel user, so these need not say which)."""


def shovel_user(project: str, stack: str) -> str:
    """The user the shovels of Pulumi stack `stack` of project `project` connect as. Users are broker-wide and
    teams share brokers: a name of its own per stack keeps two migrating stacks from overwriting each other's
    password, or deleting the user the other's shovels still use."""
    return f"{SHOVEL_USER}.{project}.{stack}"


def shovel(migration: str, error: bool = False) -> str:
    """A migration's shovel: of the old queue, or (`error`) of its error queue."""
    return f"{MIGRATE_PREFIX}.{migration}{'.error' * error}"


def shovel_key(migration: str, error: bool = False) -> str:
    """A shovel of a Vhost component."""
    return f"shovel-{migration}{'-error' * error}"


def migration_binding_key(migration: str) -> str:
    """Step retire of a move: the successor's binding to the delivery exchange for the old queue's key."""
    return f"migration-{migration}-delivery-binding"


def shovel_uri(user: str, password: str, port: int, vhost: str) -> str:
    """The AMQP URI a shovel of `vhost` reads and writes through: the broker the stack deploys to, as the shovel
    user. The one place that decides it (host, port, escaping)."""
    return f"amqp://{quote(user, safe='')}:{quote(password, safe='')}@localhost:{port}/{quote(vhost, safe='')}"


def byte_length(name: str) -> int:
    return len(name.encode("utf-8"))
