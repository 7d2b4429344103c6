"""rabbitmq-retry: one Vhost component per vhost of the stack config; exports the retry contracts."""

import gc

import pulumi

from components import Vhost
from components.plan.alert_rules import rule_file, stack_rules
from components.pulumi.program_settings import read_stack_settings
from components.pulumi.stack_resources import application_passwords, declare_shovel_user, plan_stack, register_guard

# A short-lived process whose SDK object graph only grows: the cyclic collector's repeated passes over it were
# most of the cost of a big stack (measured by `make bench`, P3: bench/README.md).
gc.disable()
settings = read_stack_settings()  # everything the stack says, parsed once (components/config/stack_settings.py)
config = settings.config
passwords = application_passwords(settings)
retry_contracts = {}
plans = plan_stack(config)  # planned and checked once; each component registers its part
# The queues' before-delete hook (components/pulumi/guard.py), whatever the stack still declares.
register_guard(plans, settings.delete_with_messages)
# When a migration moves a queue (components/model/plan_types.py).
shovel_access = declare_shovel_user(plans, passwords, settings.amqp_port)
for name, plan in plans:
    component = Vhost(name, {
        "plan": plan,
        "protect_queues": config.protect,
        "retain_error_queues": config.retain_error_queues,
        "passwords": {user: passwords[user] for user, _ in plan.config.user_paths()},
        **({"shovel_access": shovel_access} if shovel_access is not None and plan.shovels else {}),
    })
    retry_contracts[plan.config.name] = component.retry_contracts

pulumi.export("retry_contracts", retry_contracts)
# Prometheus alerting rules derived from the same plans (components/plan/alert_rules.py, docs/alerts.md): `make alerts`
# writes them as a rule file, and a new queue never ships without its rules.
alert_rules = rule_file(stack_rules(pulumi.get_stack(), config.alerts, [plan for _, plan in plans]))
pulumi.export("alert_rules", alert_rules)
