"""`python -m rabbitmq_retry_client`: the `rabbitmq-retry` command."""

import sys

from .cli import main

sys.exit(main())
