"""Key paths of list entries, as every config message writes them: an entry of a list of named things by its name.

`vhosts[shop].queues[orders.invoices].retry.delays[1]` is found in a stack file at once, where
`vhosts[0].queues[2]` has to be counted. The rule (docs/config.md, "Key paths in messages"):

- an entry of a list in `NAME_KEYS` is shown by the name it is written with (`name`, or `user` for applications
  and operators), when that name is a non-empty string no other entry of the list is written with;
- any other entry, and every entry of any other list (delays, bindings, `import`, `publishes`, …), by its index
  from 0: a name that is missing, not a string, or written twice is no way to find the entry;
- a name is written bare inside the brackets unless it could be misread: one that is all digits (an index), or holds
  a bracket, a double quote, whitespace or a character that does not print is written as a JSON string
  (`queues["0"]`, `queues["a]b"]`, `queues["my queue"]`). Dots need no quoting: the brackets delimit the name.

Pure and dependency-free, so that the parsers (raw mappings) and the plan (parsed entities) name an entry the same.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

NAME_KEYS: Mapping[str, str] = {
    "vhosts": "name",
    "exchanges": "name",
    "queues": "name",
    "policies": "name",
    "operator_policies": "name",
    "applications": "user",
    "operators": "user",
    "migrations": "name",
}
"""The lists whose entries are named in key paths, with the key (or attribute) that names an entry."""

_BARE = re.compile(r'[^\s\[\]"]+')
_INDEX = re.compile(r"[0-9]+")


def shown_name(name: str) -> str:
    """`name` as it goes between the brackets of a key path: bare, or a JSON string when it could be misread."""
    if _BARE.fullmatch(name) and name.isprintable() and not _INDEX.fullmatch(name):
        return name
    return json.dumps(name, ensure_ascii=False)


def _written_name(entry: object, key: str) -> str | None:
    """The entry's name as written (a raw mapping's key, or a parsed entity's attribute); None when it has none."""
    value = entry.get(key) if isinstance(entry, Mapping) else getattr(entry, key, None)
    return value if isinstance(value, str) and value else None


def entry_labels(key: str, entries: Sequence[object]) -> tuple[str, ...]:
    """What names each entry of the list `key` after the list's own path, in order: `[name]` or `[index]` (module
    docstring). `entries`: the list as written, or its parsed entities (which carry the same names)."""
    name_key = NAME_KEYS.get(key)
    names = [None if name_key is None else _written_name(entry, name_key) for entry in entries]
    written = Counter(names)
    return tuple(f"[{shown_name(name) if name is not None and written[name] == 1 else index}]"
                 for index, name in enumerate(names))


def entry_paths(parent: str, key: str, entries: Sequence[object]) -> tuple[str, ...]:
    """The key path of each entry of the list `key` of the mapping at `parent` ("" at the top), in order:
    `parent.key[name]` or `parent.key[index]` (`entry_labels`)."""
    list_path = f"{parent}.{key}" if parent else key
    return tuple(f"{list_path}{label}" for label in entry_labels(key, entries))


def entry_path(parent: str, key: str, entries: Sequence[object], index: int) -> str:
    """The key path of entry `index` of the list `key` at `parent` (`entry_paths`)."""
    return entry_paths(parent, key, entries)[index]


def with_paths(parent: str, key: str, entries: Sequence[T]) -> list[tuple[str, T]]:
    """(key path, entry) of each entry of the list `key` at `parent` (`entry_paths`)."""
    return list(zip(entry_paths(parent, key, entries), entries, strict=True))
