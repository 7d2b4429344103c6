"""rabbitmq-retry's consumer side: follow a stack's retry contract in an application, and operate parked
messages (`rabbitmq-retry parked …`). See docs/contract.md, and docs/operations.md: Parked messages."""

from .connection import DEFAULT_URL, BrokerRefusedError, BrokerUnreachableError, ConnectionParams
from .consumer import DeadlineExceededError, Handler, PermanentError, RetryingConsumer, contract_mode
from .contract import SUPPORTED_STRATEGIES, Contract, ContractError, load_contract, stack_output
from .contract_types import RetryContract
from .management import TlsSettings
from .metrics import Metrics
from .parked import Outcome, Parked, ParkedQueue, Selection
from .publisher import Publisher, publish
from .strategies import MODES, Mode

__all__ = [
    "DEFAULT_URL",
    "MODES",
    "SUPPORTED_STRATEGIES",
    "BrokerRefusedError",
    "BrokerUnreachableError",
    "ConnectionParams",
    "Contract",
    "ContractError",
    "DeadlineExceededError",
    "Handler",
    "Metrics",
    "Mode",
    "Outcome",
    "Parked",
    "ParkedQueue",
    "PermanentError",
    "Publisher",
    "RetryContract",
    "RetryingConsumer",
    "Selection",
    "TlsSettings",
    "contract_mode",
    "load_contract",
    "publish",
    "stack_output",
]
