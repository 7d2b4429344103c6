"""rabbitmq-retry components: RabbitMQ retry topologies as Pulumi ComponentResources.

Installed with pip, this package is `rabbitmq_retry`; in its repository it is the Pulumi program's
`components/` folder. Its modules import each other relatively, so both names work."""

from .args_types import (
    ApplicationSpec,
    BackoffSpec,
    BindingSpec,
    DelayLevelsSpec,
    ExchangeSpec,
    QueueSpec,
    RetryContract,
    RetrySpec,
    VhostSpec,
    VhostStackSpec,
)
from .config import ConfigError, StackConfig, load_delay_levels, load_queue, load_stack_config, load_vhost
from .delay_levels import DelayLevels, DelayLevelsArgs, DelayLevelsPythonArgs
from .retryable_queue import RetryableQueue, RetryableQueueArgs, RetryableQueuePythonArgs
from .vhost import Vhost, VhostArgs, VhostPythonArgs

__all__ = [
    "ApplicationSpec",
    "BackoffSpec",
    "BindingSpec",
    "ConfigError",
    "DelayLevels",
    "DelayLevelsArgs",
    "DelayLevelsPythonArgs",
    "DelayLevelsSpec",
    "ExchangeSpec",
    "QueueSpec",
    "RetryContract",
    "RetrySpec",
    "RetryableQueue",
    "RetryableQueueArgs",
    "RetryableQueuePythonArgs",
    "StackConfig",
    "Vhost",
    "VhostArgs",
    "VhostPythonArgs",
    "VhostSpec",
    "VhostStackSpec",
    "load_delay_levels",
    "load_queue",
    "load_stack_config",
    "load_vhost",
]
