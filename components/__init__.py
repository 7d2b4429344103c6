"""rabbitmq-retry components: RabbitMQ retry topologies as Pulumi ComponentResources.

Installed with pip, this package is `rabbitmq_retry`; in its repository it is the Pulumi program's
`components/` folder. Its modules import each other relatively, so both names work."""

from .config import StackConfig, load_delay_levels, load_queue, load_stack_config, load_vhost
from .model.problems import ConfigError
from .pulumi.args_types import (
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
from .pulumi.delay_levels import DelayLevels, DelayLevelsArgs, DelayLevelsPythonArgs
from .pulumi.retryable_queue import RetryableQueue, RetryableQueueArgs, RetryableQueuePythonArgs
from .pulumi.vhost import Vhost, VhostArgs, VhostPythonArgs

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
