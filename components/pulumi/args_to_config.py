"""The components' typed args in the stack file's shape, for the config parser; its errors said back as the caller
wrote the keys.

The typed args (`args_types.py`) differ from a stack file in two ways, both forced by what a `TypedDict` and the
package schema can say:
- A key that is a Python keyword (`move.from`, `import`, an alert rule's `for`) is a field with a trailing
  underscore (`from_`). Pulumi's analyzer names the schema property without it (its `camel_case` drops the empty
  last part), so another language writes `from`, and the SDK's component provider hands it over as `from_`.
  A Python program writes `from_`, as the types say; it may also write the stack file's `from`, so that an entry
  read from a stack file passes as it is (both in one mapping is refused). A stack file takes `from` only.
- A plain queue's `arguments` are strings (the schema has no unions): an integer argument RabbitMQ takes only as
  an integer is written as its digits (`"x-message-ttl": "60000"`), `x-single-active-consumer` as `"true"` or
  `"false"`. Such a string is made the integer (the boolean) here; a stack file writes the integer itself.

A ConfigError's key path names each renamed key as the caller wrote it: `Vhost(shop).vhost.migrations[m].move.from_`
from Python, `…move.from` from another language (`foreign.spelled` makes `from_` the schema's `from`). Pulumi-free."""

import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..model import wire
from ..model.problems import ConfigError
from .args_types import QueueSpec
from .foreign import field_hints, rebuilt

T = TypeVar("T")


def stack_key(field_name: str) -> str:
    """The stack file's name of a typed field: `from_` → `from`; any other name is its own."""
    bare = field_name.removesuffix("_")
    return bare if bare != field_name and keyword.iskeyword(bare) else field_name


def _queue_argument(name: str, value: Any) -> Any:
    """A queue argument written as a string where RabbitMQ takes an integer or a boolean (`wire.py`), as that value."""
    row = wire.BY_ARGUMENT.get(name)
    if not isinstance(value, str) or row is None:
        return value
    if row.type == "integer" and value.isascii() and value.isdigit():
        return int(value)
    if row.type == "boolean" and value in ("true", "false"):
        return value == "true"
    return value


STRINGS_OF: Mapping[tuple[type, str], Callable[[str, Any], Any]] = {(QueueSpec, "arguments"): _queue_argument}
"""Maps of strings whose values stand for other types, by (TypedDict, field): what each value is made."""


@dataclass
class Shaped:
    """Where the caller spelled a key otherwise than the stack file, found while taking args to its shape."""

    written: dict[str, str] = field(default_factory=dict)
    """Relative key path as the parser names it (`migrations[m].move.from`) → as the caller wrote it (`….from_`)."""
    problems: list[tuple[str, str]] = field(default_factory=list)

    def spelled(self, path: str) -> str:
        """A key path below the args, with the longest renamed key path it starts with spelled as the caller wrote
        it."""
        matches = [stack for stack in self.written if path == stack or path.startswith((f"{stack}.", f"{stack}["))]
        if not matches:
            return path
        stack = max(matches, key=len)
        return f"{self.written[stack]}{path[len(stack):]}"

    def caller_path(self, path: str, where: str) -> str:
        """`path`, under `where`, as the caller spelled it (`spelled`)."""
        return f"{where}.{self.spelled(path[len(where) + 1:])}" if path.startswith(f"{where}.") else path

    def fields(self, value: Mapping[str, Any], hint: type, path: str) -> dict[Any, Any]:
        """A mapping `hint` types, at `path` as the parser names it, in the stack file's shape (`foreign.rebuilt`)."""
        hints = field_hints(hint)
        by_stack_key = {stack_key(name): name for name in hints}
        caller = self.spelled(path)
        out: dict[Any, Any] = {}
        spelled_as: dict[Any, Any] = {}  # each key of `out`, as the caller wrote it
        for key, item in value.items():
            typed = key if key in hints else by_stack_key.get(key) if isinstance(key, str) else None
            name = stack_key(key) if key in hints else key
            if name in out:
                self.problems.append((_child(caller, key), f"also written as {spelled_as[name]}; write one "
                                      f"({key if key in hints else spelled_as[name]} is the typed spelling)"))
                continue
            if name != key:
                self.written[_child(path, name)] = _child(caller, key)
            convert = STRINGS_OF.get((hint, typed)) if typed is not None else None
            if convert is not None and isinstance(item, Mapping):
                out[name] = {k: convert(k, v) for k, v in item.items()}
            else:
                out[name] = rebuilt(item, hints[typed] if typed is not None else None, _child(path, name), self.fields)
            spelled_as[name] = key
        return out


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def load_typed(load: Callable[[Any, str], T], raw: Any, hint: type, path: str) -> T:
    """`load(raw, path)`, `raw` typed by `hint` (a `VhostSpec`, a `QueueSpec`) and taken to the stack file's shape
    first; each ConfigError names the keys the way the caller wrote them."""
    shaped = Shaped()
    value = rebuilt(raw, hint, "", shaped.fields)
    if shaped.problems:
        raise ConfigError([(f"{path}.{key}", problem) for key, problem in shaped.problems])
    try:
        return load(value, path)
    except ConfigError as error:
        raise ConfigError([(shaped.caller_path(at, path), problem) for at, problem in error.problems]) from error
