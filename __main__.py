"""rabbitmq-retry: one Vhost component per vhost of the stack config; exports the retry contracts."""

import gc

import pulumi

from components import Vhost
from components.naming import vhost_key
from components.stack import application_passwords, read_stack_config

# A short-lived process whose SDK object graph only grows: the cyclic collector's repeated passes over it were
# most of the cost of a big stack (bench/results, P3: 1,000 queues 45.3 s with it, 16.8 s without, 11 % more memory).
gc.disable()
config = read_stack_config()
passwords = application_passwords(config)
retry_contracts = {}
for index, vhost in enumerate(config.vhosts):
    component = Vhost(vhost_key(vhost.name), {
        "vhost": vhost,
        "config_path": f"vhosts[{index}]",
        "protect_queues": config.protect,
        "retain_error_queues": config.retain_error_queues,
        "passwords": {user: passwords[user] for user, _ in vhost.user_paths()},
    })
    retry_contracts[vhost.name] = component.retry_contracts

pulumi.export("retry_contracts", retry_contracts)
