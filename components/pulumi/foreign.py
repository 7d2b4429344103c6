"""Args from another language: what a TypeScript, Go, C#, Java or YAML program sends through the component
provider (`pulumi package add`), made what the Python path takes, and errors said in the caller's spelling.

Two things differ from a Python call. Integers arrive as floats (`maxRetries: 3.0`, nested too; pulumi 3.272's
component provider converts them and then overwrites the conversion): a whole float where the typed args say
`int` is taken as that integer, any other (`3.5`) is refused with its key path, before the config parser sees
it. And the caller wrote the schema's camelCase names (`retry.maxRetries`), so a `ConfigError` raised while the
component is built names its keys that way. The outputs handed back name their fields the schema's way
too, lists and maps of objects included (`for_state`). A Python program's call is untouched: this applies only when the
process is the package's plugin (`python -m pulumi.run.plugin rabbitmq-retry`, every caller another program
through the engine)."""

import contextvars
import functools
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..model.key_paths import entry_labels
from ..model.problems import ConfigError
from .boundary import reported

F = TypeVar("F", bound=Callable[..., None])
_constructing: contextvars.ContextVar[bool] = contextvars.ContextVar("rabbitmq_retry_constructing", default=False)
"""Set while the plugin builds the component another language asked for: its children are Python calls."""
_TOKEN = re.compile(r'\[(?:"(?:[^"\\]|\\.)*"|[^\]]*)\]|[^.\[]+|\.')
"""A key path's parts: an entry's `[…]` (a name in it may hold dots, a quoted one brackets too), a key, a dot."""


def schema_name(field: str) -> str:
    """The schema's spelling of a field (`max_retries` → `maxRetries`), as Pulumi's analyzer writes it."""
    head, *rest = field.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def python_name(name: str) -> str:
    """A field's own spelling from the schema's (`operatorPolicies` → `operator_policies`)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def field_hints(typed_dict: type) -> dict[str, Any]:
    """A TypedDict's field types, NotRequired taken off. Not `typing.get_type_hints`: `pulumi.Input` holds a
    forward reference to `Output` that it cannot resolve."""
    wrappers: tuple[Any, ...] = (typing.NotRequired, typing.Required)
    hints = {}
    for key, hint in typed_dict.__annotations__.items():
        if typing.get_origin(hint) in wrappers:
            hint = typing.get_args(hint)[0]
        hints[key] = hint
    return hints


def _typed_dicts(annotation: Any) -> Iterator[type]:
    """Every TypedDict an annotation names, at any depth of lists, dicts, unions and Inputs."""
    if typing.is_typeddict(annotation):
        yield annotation
        for hint in field_hints(annotation).values():
            yield from _typed_dicts(hint)
    for arg in typing.get_args(annotation):
        yield from _typed_dicts(arg)


def _wants_int(hint: Any) -> bool:
    """`int`, or a union with `int` and no `float` (Optional[int], Input[int])."""
    if hint is int:
        return True
    args = typing.get_args(hint)
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    return is_union and int in args and float not in args


Fields = Callable[[Mapping[str, Any], type, str], Any]
"""Rebuilds a mapping a TypedDict types, at its key path: `(mapping, typed_dict, path)`."""


def rebuilt(value: Any, hint: Any, path: str, fields: Fields,
            leaf: Callable[[Any, Any, str], Any] = lambda value, hint, path: value) -> Any:
    """`value`, typed by `hint`, rebuilt at key path `path`: a mapping a TypedDict types by `fields` (which walks
    its fields on), the entries of a list (each named as `key_paths` names it) and the values of a dict by their
    hint, a union by its one member that holds objects, and anything else by `leaf`. The one walk of typed args and
    outputs."""
    if typing.is_typeddict(hint) and isinstance(value, Mapping):
        return fields(value, hint, path)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and isinstance(value, list):
        labels = entry_labels(python_name(path.rpartition(".")[2]), value)
        return [rebuilt(item, args[0], f"{path}{label}", fields, leaf)
                for label, item in zip(labels, value, strict=True)]
    if origin is dict and isinstance(value, Mapping):
        return {key: rebuilt(item, args[1], f"{path}.{key}" if path else str(key), fields, leaf)
                for key, item in value.items()}
    if origin in (typing.Union, types.UnionType):
        typed = [arg for arg in args if typing.is_typeddict(arg) or typing.get_origin(arg) in (list, dict)]
        if len(typed) == 1:
            return rebuilt(value, typed[0], path, fields, leaf)
    return leaf(value, hint, path)


def integers(value: Any, hint: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """`value` with every whole float that `hint` types as an integer made an int; a fractional one is a problem
    at `path` (schema spelling). Everything else is returned as it is, for the config parser to check."""
    def fields(value: Mapping[str, Any], typed_dict: type, path: str) -> dict[str, Any]:
        hints = field_hints(typed_dict)
        return {key: rebuilt(item, hints[key], f"{path}.{schema_name(key)}", fields, integer) if key in hints
                else item for key, item in value.items()}

    def integer(value: Any, hint: Any, path: str) -> Any:
        if isinstance(value, float) and _wants_int(hint):
            if value.is_integer():
                return int(value)
            problems.append((path, f"expected an integer, got {value!r}"))
        return value

    return rebuilt(value, hint, path, fields, integer)


def spelled(path: str, where: str, fields: frozenset[str]) -> str:
    """A key path of a ConfigError in the schema's spelling: `where.retry.max_retries` → `where.retry.maxRetries`.
    Only our own field names change; user data (queue names, header names) is left as written."""
    if not path.startswith(where):
        return path

    return where + "".join(schema_name(part) if part in fields else part for part in _TOKEN.findall(path[len(where):]))


def schema_spelled(value: Any, hint: Any) -> Any:
    """`value`, typed by `hint`, with every field of every TypedDict in it named as the schema names it."""
    def fields(value: Mapping[str, Any], typed_dict: type, path: str) -> dict[str, Any]:
        hints = field_hints(typed_dict)
        return {schema_name(key) if key in hints else key: rebuilt(item, hints.get(key), path, fields)
                for key, item in value.items()}

    return rebuilt(value, hint, "", fields)


def for_state(value: Any, hint: Any) -> Any:
    """An output value as the SDK's component provider should hand it to another language. pulumi 3.272 renames
    the fields of an output object, and of objects directly inside it, but copies a list or a map of objects as it
    is: `contract.tiers[0].routing_key`, every contract of `Vhost.retry_contracts`. Those are spelled here, the
    rest left for the SDK."""
    if typing.is_typeddict(hint) and isinstance(value, Mapping):
        hints = field_hints(hint)
        return {key: for_state(item, hints[key]) if key in hints else item for key, item in value.items()}
    return schema_spelled(value, hint)


def _state_hints(component: type) -> dict[str, Any]:
    """The component's outputs (its class annotations `pulumi.Output[T]`) whose T holds objects (`for_state`
    leaves the others as they are)."""
    hints = {}
    for name, hint in component.__annotations__.items():
        inner = typing.get_args(hint)[0] if typing.get_args(hint) else hint
        if any(True for _ in _typed_dicts(inner)):
            hints[name] = inner
    return hints


def hosted() -> bool:
    """Is this process the package's plugin, building components for programs of other languages?"""
    from pulumi.provider.experimental import host

    return bool(host.is_hosting)


def accepts_other_languages(args_type: type, component: str) -> Callable[[F], F]:
    """Decorates a component's `__init__(self, name, args, opts)`: when the process is the plugin, the args'
    integers are made ints (or refused), a ConfigError's key paths are spelled as the schema spells them, and the
    outputs the SDK would pass on half-renamed are spelled for it (`for_state`); what the component registers is
    untouched; a ConfigError or TopologyError leaves it as a `pulumi.RunError` (`boundary.reported`).
    `functools.wraps` keeps the annotations the analyzer reads."""
    fields = frozenset(name for typed_dict in _typed_dicts(args_type) for name in field_hints(typed_dict))

    def decorate(init: F) -> F:
        @functools.wraps(init)
        @reported
        def wrapper(self: Any, name: str, args: Any, opts: Any = None) -> None:
            if not hosted() or _constructing.get():  # a Python call, or a child of the component being constructed
                init(self, name, args, opts)
                return
            token = _constructing.set(True)
            try:
                _construct(self, name, args, opts)
            finally:
                _constructing.reset(token)

        def _construct(self: Any, name: str, args: Any, opts: Any) -> None:
            where = f"{component}({name})"
            if isinstance(args, Mapping):
                problems: list[tuple[str, str]] = []
                args = integers(args, args_type, where, problems)
                if problems:
                    raise ConfigError(problems)
            try:
                init(self, name, args, opts)
            except ConfigError as error:
                raise ConfigError([(spelled(path, where, fields), message) for path, message in error.problems]) \
                    from error
            for output, hint in _state_hints(type(self)).items():
                value = getattr(self, output)
                setattr(self, output, value.apply(functools.partial(for_state, hint=hint)))

        return typing.cast(F, wrapper)

    return decorate
