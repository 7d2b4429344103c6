"""`make alerts STACK=<stack> [FORMAT=prometheus|prometheus-rule] [OUTPUT=file]`: the stack's Prometheus alerting
rules, derived from its plan (components/alerts.py; docs/alerts.md), as the program exports them (`alert_rules`):
a rule file for Prometheus's `rule_files:`, or a Kubernetes `PrometheusRule` manifest for the Prometheus operator.
No engine, broker or secrets.

    python -m tools.alerts --stack dev [--format prometheus-rule] [--output alerts.dev.yml]

Exit status 0, or 1 with one `error: …` line set (a config error as `pulumi preview` prints it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from components.alerts import FORMATS, prometheus_rule
from tools.lib.alerts import AlertsError, stack_alert_rules
from tools.lib.mockrun import ROOT
from components.config.stack_file import StackFileError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.alerts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--root", type=Path, default=ROOT, help="project directory holding __main__.py")
    parser.add_argument("--format", choices=FORMATS, default="prometheus")
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        rules = stack_alert_rules(args.stack, args.root)
    except (AlertsError, StackFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    assert rules is not None, "this project's components derive alerting rules"
    document = rules if args.format == "prometheus" else prometheus_rule(args.stack, rules)
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
        count = sum(len(g["rules"]) for g in rules["groups"])
        print(f"wrote {args.output}: {count} alerting rules of stack {args.stack} ({args.format})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
