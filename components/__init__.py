"""rabbitmq-retry components: RabbitMQ retry topologies as Pulumi ComponentResources.

Installed with pip, this package is `rabbitmq_retry`; in its repository it is the Pulumi program's
`components/` folder. Its modules import each other relatively, so both names work."""

from .config import ConfigError, StackConfig, load_delay_levels, load_queue, load_stack_config, load_vhost
from .delay_levels import DelayLevels, DelayLevelsArgs
from .retryable_queue import RetryableQueue, RetryableQueueArgs
from .vhost import Vhost, VhostArgs

__all__ = [
    "ConfigError",
    "DelayLevels",
    "DelayLevelsArgs",
    "RetryableQueue",
    "RetryableQueueArgs",
    "StackConfig",
    "Vhost",
    "VhostArgs",
    "load_delay_levels",
    "load_queue",
    "load_stack_config",
    "load_vhost",
]
