"""The keys each mapping of the stack config may hold, written once.

The parser refuses any other key, the fuzz test builds and misspells configs from these tables, and
`tests/test_config_reference.py` keeps the tables of docs/config.md ("Stack-file keys") equal to them. The
order is the order of those tables and of "unknown key (allowed: …)" messages.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import wire
from .alerts import QUEUE_ALERTS_KEYS, RULE_KEYS, STACK_ALERTS_KEYS, VHOST_ALERTS_KEYS

NAMESPACE = "rabbitmq-retry"
"""The Pulumi config namespace of every key below (`rabbitmq-retry:vhosts`, …), named once."""

TOP_LEVEL_KEYS = ("protect", "retain_error_queues", "defaults", "vhosts", "passwords", "broker", "delete_with_messages",
                  "amqp_port", "alerts")
"""`delete_with_messages` and `amqp_port` belong to the queue guard, which parses them (components/pulumi/guard.py);
the topology parser only accepts them. `alerts` (here, in a vhost and in a queue) is parsed by `alerts.py`."""
BROKER_KEYS = ("version",)
DEFAULTS_KEYS = ("queue_type", "policy_priority", "delivery_limit", "quorum_group_size")
VHOST_KEYS = ("name", "existing", "exchanges", "queues", "policies", "operator_policies", "applications", "operators",
              "limits", "default_queue_type", "delay_levels", "import", "migrations", "alerts")
DELAY_LEVELS_KEYS = ("unit", "max_delay", "type", "quorum_group_size")
IMPORT_KINDS = ("queue", "exchange", "binding", "policy", "operator_policy")
"""What a `vhosts[].import` entry may adopt, written `<kind> <provider ID>`."""
EXCHANGE_KEYS = ("name", "type")
QUEUE_KEYS = ("name", "type", "bindings", "max_length", "delivery_limit", "retry", "policy_priority",
              "max_length_bytes", "message_ttl", "single_active_consumer", "quorum_group_size", "arguments", "alerts")
BINDING_KEYS = ("exchange", "routing_key", "arguments", "external")
RETRY_KEYS = ("strategy", "delays", "backoff", "min_delay", "max_delay", "max_retries", "error_retention",
              "error_max_length")
"""`strategy`, `max_retries` and `error_*` belong to every strategy; each strategy module says which of the
others are its own (`RETRY_KEYS`)."""
BACKOFF_KEYS = ("initial", "multiplier", "max", "jitter")
POLICY_KEYS = ("name", "pattern", "priority", "apply_to", "definition")
MIGRATION_KEYS = ("name", "move", "drain_tiers", "drain_levels", "step")
MOVE_KEYS = ("from", "to", "external")
EXTERNAL_KEYS = ("error_queue", "queues", "exchanges", "policies")
DRAIN_TIERS_KEYS = ("queue", "delays")
DRAIN_LEVELS_KEYS = ("max_delay",)
APPLICATION_KEYS = ("user", "publishes", "consumes", "topic_permissions", "limits")
USER_LIMITS_KEYS = ("max_connections", "max_channels")
TOPIC_PERMISSION_KEYS = ("exchange", "write", "read")
OPERATOR_KEYS = ("user",)
LIMITS_KEYS = ("max_connections", "max_queues")
PROVIDER_KEYS = ("endpoint", "username", "password", "insecure", "cacertFile", "clientcertFile", "clientkeyFile",
                 "proxy")
"""The `rabbitmq:` keys the pulumi-rabbitmq provider reads; it ignores any other, so a misspelt one is refused."""

KEY_TABLES: Mapping[str, tuple[str, ...]] = {
    "rabbitmq-retry": TOP_LEVEL_KEYS,
    "defaults": DEFAULTS_KEYS,
    "broker": BROKER_KEYS,
    "vhosts[]": VHOST_KEYS,
    "vhosts[].exchanges[]": EXCHANGE_KEYS,
    "vhosts[].queues[]": QUEUE_KEYS,
    "vhosts[].queues[].bindings[]": BINDING_KEYS,
    "vhosts[].queues[].retry": RETRY_KEYS,
    "vhosts[].queues[].retry.backoff": BACKOFF_KEYS,
    "vhosts[].delay_levels": DELAY_LEVELS_KEYS,
    "vhosts[].policies[]": POLICY_KEYS,
    "vhosts[].operator_policies[].definition": wire.OPERATOR_POLICY_KEYS,
    "vhosts[].applications[]": APPLICATION_KEYS,
    "vhosts[].applications[].topic_permissions[]": TOPIC_PERMISSION_KEYS,
    "vhosts[].applications[].limits": USER_LIMITS_KEYS,
    "vhosts[].operators[]": OPERATOR_KEYS,
    "vhosts[].limits": LIMITS_KEYS,
    "vhosts[].migrations[]": MIGRATION_KEYS,
    "vhosts[].migrations[].move": MOVE_KEYS,
    "vhosts[].migrations[].move.external": EXTERNAL_KEYS,
    "vhosts[].migrations[].drain_tiers": DRAIN_TIERS_KEYS,
    "vhosts[].migrations[].drain_levels": DRAIN_LEVELS_KEYS,
    "alerts": STACK_ALERTS_KEYS,
    "alerts.<rule>": RULE_KEYS,
    "vhosts[].alerts": VHOST_ALERTS_KEYS,
    "vhosts[].queues[].alerts": QUEUE_ALERTS_KEYS,
}
"""Each table by the config path of the mapping it belongs to (`[]`: every item of a list). Operator
policies take the keys of `vhosts[].policies[]`; their definition is limited to those RabbitMQ accepts in one
(`wire.OPERATOR_POLICY_KEYS`)."""
