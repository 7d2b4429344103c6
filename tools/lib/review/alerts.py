"""The review's alerting-rules section: the Prometheus rules a change adds, removes or changes, each side's rules
as its own program exports them in its one evaluation (tools/lib/evaluation.py), beside the topology diff. A queue
the change adds shows its new rules here, so none ships without them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.plan.alert_rules import rules_by_key
from tools.lib import markdown

SHOWN = 40
"""Rules listed per kind of change in a pull-request comment; the full review lists every one."""


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    parts = [f"{key} {old.get(key, '(none)')} → {new.get(key, '(none)')}" for key in ("expr", "for")
             if old.get(key) != new.get(key)]
    for group in ("labels", "annotations"):
        before, after = old.get(group) or {}, new.get(group) or {}
        parts += [f"{group[:-1]} {k}: {before.get(k, '(none)')} → {after.get(k, '(none)')}"
                  for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]
    return parts


def _line(key: str, rule: Mapping[str, Any]) -> str:
    kind, _, where = key.partition(" ")
    return f"{markdown.code(rule.get('alert', kind))} {markdown.code(where) if where else '(the broker)'}"


Diff = tuple[list[str], list[str], list[tuple[str, list[str]]]]
"""(added, removed, changed) rules as Markdown lines, each changed one with what changed."""


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> Diff | None:
    """(added, removed, changed) rules between BASE's (`old`) and HEAD's (`new`) exported rule files, as lines; None
    when HEAD's program exports none. BASE without rules (an older program, or no stack file) counts as none."""
    if new is None:
        return None
    before, after = rules_by_key(old or {}), rules_by_key(new)
    added = [_line(k, after[k]) for k in sorted(set(after) - set(before))]
    removed = [_line(k, before[k]) for k in sorted(set(before) - set(after))]
    changed = [(_line(k, after[k]), parts) for k in sorted(set(before) & set(after))
               if (parts := _changed(before[k], after[k]))]
    return added, removed, changed


def section(found: Diff | None, limit: int | None) -> str:
    """The section's Markdown; `limit`: rules listed per kind of change (None: all)."""
    if found is None:
        return ""
    added, removed, changed = found
    if not (added or removed or changed):
        return "\n\n### Alerting rules\n\nNo rule added, removed or changed (`make alerts` writes them)."
    out = ["", "", "### Alerting rules", "",
           f"**{len(added):,} added, {len(removed):,} removed, {len(changed):,} changed** (docs/alerts.md; "
           "`make alerts` writes them)"]
    for title, lines in (("Added", added), ("Removed", removed),
                         ("Changed", [f"{line}: {markdown.text('; '.join(parts))}" for line, parts in changed])):
        if not lines:
            continue
        shown = lines if limit is None else lines[:limit]
        out += ["", f"{title}:", "", *(f"- {line}" for line in shown)]
        if len(shown) < len(lines):
            out.append(f"- … {len(lines) - len(shown):,} more in the full report")
    return "\n".join(out)
