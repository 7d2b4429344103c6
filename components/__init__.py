"""rabbitmq-retry components: RabbitMQ retry topologies as Pulumi ComponentResources.

Installed with pip, this package is `rabbitmq_retry`; in its repository it is the Pulumi program's
`components/` folder. Its modules import each other relatively, so both names work."""

from .config import ConfigError, StackConfig, load_queue, load_stack_config, load_vhost
from .retryable_queue import RetryableQueue, RetryableQueueArgs
from .vhost import Vhost, VhostArgs

__all__ = [
    "ConfigError",
    "RetryableQueue",
    "RetryableQueueArgs",
    "StackConfig",
    "Vhost",
    "VhostArgs",
    "load_queue",
    "load_stack_config",
    "load_vhost",
]
