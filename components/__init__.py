"""rabbitmq-retry components: RabbitMQ retry topologies as Pulumi ComponentResources.

Installed with pip, this package is `rabbitmq_retry`; in its repository it is the Pulumi program's
`components/` folder. Its modules import each other relatively, so both names work."""

from .config import load
from .model.stack_config import StackConfig
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
from .pulumi.boundary import ConfigError, reported
from .pulumi.delay_levels import DelayLevels, DelayLevelsArgs, DelayLevelsPythonArgs
from .pulumi.guard import queue_guard
from .pulumi.retryable_queue import RetryableQueue, RetryableQueueArgs, RetryableQueuePythonArgs
from .pulumi.vhost import Vhost, VhostArgs, VhostPythonArgs

# The loaders a program calls itself refuse a config as a component does: a `pulumi.RunError` (pulumi/boundary.py).
load_delay_levels = reported(load.load_delay_levels)
load_queue = reported(load.load_queue)
load_stack_config = reported(load.load_stack_config)
load_vhost = reported(load.load_vhost)

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
    "queue_guard",
]
