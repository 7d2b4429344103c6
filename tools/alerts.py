"""`make alerts STACK=<stack> [FORMAT=prometheus|prometheus-rule] [OUTPUT=file]`: the stack's Prometheus alerting
rules, derived from its plan (components/plan/alert_rules.py; docs/alerts.md), as the program exports them
(`alert_rules`): a rule file for Prometheus's `rule_files:`, or a Kubernetes `PrometheusRule` manifest for the
Prometheus operator.
No engine, broker or secrets: the program runs under Pulumi's mocks (tools/lib/evaluation.py).

    python -m tools.alerts --stack dev [--format prometheus-rule] [--output alerts.dev.yml]

Exit status 0, or 1 with one `error: …` line set (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import sys

import yaml

from components.plan.alert_rules import FORMATS, prometheus_rule
from tools.lib.cli import Written, stack_file_command
from tools.lib.evaluation import Evaluation


def _format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=FORMATS, default="prometheus")


def _alerts(args: argparse.Namespace, evaluated: Evaluation) -> Written:
    rules = evaluated.alert_rules
    assert rules is not None, "this project's program exports alerting rules"
    document = rules if args.format == "prometheus" else prometheus_rule(args.stack, rules)
    count = sum(len(g["rules"]) for g in rules["groups"])
    return Written(yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120),
                   f"{count} alerting rules of stack {args.stack} ({args.format})")


def main(argv: list[str] | None = None) -> int:
    return stack_file_command(__doc__ or "", "python -m tools.alerts", argv, _alerts, arguments=_format)


if __name__ == "__main__":
    sys.exit(main())
