"""rabbitmq-retry: one Vhost component per vhost of the stack config; exports the retry contracts."""

import pulumi

from components import Vhost
from components.naming import vhost_key
from components.stack import application_passwords, read_stack_config

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
