"""Does a change to a user, its permissions or its topic permissions grant more than before? Exact for
the permission regexes this project writes (anchored lists of names); anything else counts as more."""

from __future__ import annotations

import re

from tools.lib import engine
from tools.lib.engine import Step

LITERAL = re.compile(r"(?:[^\\.^$*+?{}\[\]|()]|\\[^A-Za-z0-9])*")


def literals(regex: str) -> frozenset[str] | None:
    """The names a permission regex allows when it is a finite list (`^a$`, `^(a|b)$`), else None.
    RabbitMQ treats "" as matching nothing."""
    if regex == "":
        return frozenset()
    match = re.fullmatch(r"\^(?:\((?:\?:)?(.*)\)|(.*))\$", regex)
    if match is None:
        return None
    parts = match[1].split("|") if match[1] is not None else [match[2]]
    if not all(LITERAL.fullmatch(part) for part in parts):
        return None
    return frozenset(re.sub(r"\\(.)", r"\1", part) for part in parts)


def narrows(old: str, new: str) -> bool:
    """Does `new` allow nothing that `old` did not? Exact for finite name lists; any other change of a
    regex is treated as widening (deciding regex inclusion in general is not worth the risk)."""
    names = literals(new)
    if old == new:
        return True
    try:
        return names is not None and all(old != "" and re.search(old, name) for name in names)
    except re.error:
        return False


def widens(step: Step) -> bool:
    """An update of a User (a new tag), Permissions or TopicPermissions (per exchange) that grants more."""
    old, new = step.old or {}, step.new or {}
    if step.type == engine.USER:  # a new tag (e.g. administrator) grants more
        return not set(new.get("tags") or []) <= set(old.get("tags") or [])
    if step.type == engine.PERMISSIONS:
        before, after = old.get("permissions") or {}, new.get("permissions") or {}
        return not all(narrows(str(before.get(k, "")), str(after.get(k, ""))) for k in ("configure", "write", "read"))
    before_by = {p.get("exchange"): p for p in old.get("permissions") or []}  # TopicPermissions: per exchange
    return not all(p.get("exchange") in before_by and all(
        narrows(str(before_by[p.get("exchange")].get(k, "")), str(p.get(k, ""))) for k in ("write", "read"))
        for p in new.get("permissions") or [])
