"""Reading `Pulumi.<stack>.yaml` the way the engine hands it to the program: JSON text for structured
values, and every `secure:` value replaced by a marker, so no ciphertext ever reaches the program, a
recording, a plan, a review or an error message.

Stricter than `yaml.safe_load` where silence would hide a mistake: a duplicate key anywhere is an error
(otherwise the last one wins, and a second `delays:` changes a retry policy unnoticed), and so is a
document or `config:` that is not a mapping. Errors name the file, line and column, never a value.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode

from ..model.keys import NAMESPACE

PROJECT = NAMESPACE
"""The Pulumi project's name, which is also its config namespace: a key written without one is the project's."""
SECRET_MARKER = "[secret]"
"""What a `secure:` value reads as, followed by a fingerprint of its ciphertext (see `secret_placeholder`)."""


class StackFileError(Exception):
    """The stack file is missing or cannot be read; the message is one line per problem, no traceback."""


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping, naming where both occurrences are."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key; SafeLoader reports it below
                continue
            if first is not None:
                raise ConstructorError(
                    None, None, f"duplicate key {json.dumps(str(key))} (first at line {first.line + 1}, "
                    f"column {first.column + 1}); keep one", key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _at(mark: Any) -> str:
    return f"{mark.line + 1}:{mark.column + 1}"


def _where(path: Path, error: yaml.MarkedYAMLError) -> str:
    """`file:line:column: what is wrong and what was expected`, at the mistake rather than where the parser
    noticed it (an unclosed `[` is noticed on the next line)."""
    problem, context = error.problem or "", error.context or ""
    mark, opened = error.problem_mark, error.context_mark
    if mark is None:
        return f"{path.name}: {problem or context or 'not valid YAML'}"
    found = f"line {mark.line + 1}, column {mark.column + 1}"
    if opened is not None and context in ("while parsing a flow sequence", "while parsing a flow mapping"):
        bracket, closing = ("[", "]") if "sequence" in context else ("{", "}")
        return (f"{path.name}:{_at(opened)}: this `{bracket}` is not closed: expected `,` or `{closing}` "
                f"before {found}")
    if opened is not None and context.startswith("while scanning a quoted scalar"):
        return f"{path.name}:{_at(opened)}: this quoted string is not closed (no closing quote before {found})"
    if "<stream end>" in problem:
        return f"{path.name}:{_at(mark)}: the file ends inside a value; close every `[`, `{{` and quote it opens"
    if "mapping values are not allowed" in problem:
        return (f"{path.name}:{_at(mark)}: a `key:` where none can start: a line indented deeper than the key "
                "above it, which already has a value (align it with that key), or a second `key:` on one line "
                "(quote a value that contains `: `)")
    if "'\\t'" in problem or "\\t" in problem:
        return f"{path.name}:{_at(mark)}: a tab character; indent with spaces"
    if problem.startswith("expected <block end>") and opened is not None:
        return (f"{path.name}:{_at(mark)}: this line is indented differently from the entries it follows "
                f"(the block starting at line {opened.line + 1}); indent it like its siblings, or add the "
                "missing `- ` of a list entry")
    return f"{path.name}:{_at(mark)}: {problem or context or 'not valid YAML'}"


def not_found(path: Path) -> str:
    """The one line for a stack file that is not there, with the stacks that are: a misspelt STACK= is the usual
    cause, and the right name is then in the line."""
    stacks = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in path.parent.glob("Pulumi.*.yaml"))
    return (f"{path.name} not found in {path.parent}: is STACK={path.stem.split('.', 1)[-1]} a stack of this "
            f"project? (its stacks: {', '.join(stacks) or 'none'})")


def load(path: Path) -> dict[str, Any]:
    """The `config:` mapping of a stack file (empty when there is none)."""
    if not path.exists():
        raise StackFileError(not_found(path))
    try:
        document = yaml.load(path.read_text(), Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        raise StackFileError(_where(path, error)) from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise StackFileError(f"{path.name}: not valid YAML ({type(error).__name__})") from None
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise StackFileError(f"{path.name}: expected a mapping with a `config:` key, got {_kind(document)}")
    if "config" not in document and (settings := sorted(str(k) for k in document if ":" in str(k))):
        raise StackFileError(f"{path.name}: no `config:` key; {', '.join(settings[:3])}"
                             f"{' …' if len(settings) > 3 else ''} must be indented under `config:` (see "
                             "Pulumi.dev.yaml)")
    config = document.get("config")
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise StackFileError(f"{path.name}: `config:` must be a mapping of key: value, got {_kind(config)}")
    return dict(config)


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def secret_placeholder(ciphertext: Any) -> str:
    """`[secret] <fingerprint>`: equal for equal ciphertexts, so a changed secret shows up as a change, and
    nothing of the ciphertext (or the password) can be read back from it."""
    digest = hashlib.sha256(json.dumps(ciphertext, sort_keys=True).encode()).hexdigest()[:12]
    return f"{SECRET_MARKER} {digest}"


def is_secret_placeholder(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SECRET_MARKER)


def without_secrets(value: Any) -> tuple[Any, bool]:
    """`value` with every `{secure: ...}` leaf replaced by its placeholder, and whether there was one."""
    if isinstance(value, Mapping) and set(value) == {"secure"}:
        return secret_placeholder(value["secure"]), True
    if isinstance(value, Mapping):
        items = {k: without_secrets(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, any(secret for _, secret in items.values())
    if isinstance(value, list):
        items_list = [without_secrets(v) for v in value]
        return [v for v, _ in items_list], any(secret for _, secret in items_list)
    return value, False


def stack_config(path: Path) -> tuple[dict[str, str], list[str]]:
    """Config as the engine hands it to the program (`key` → text), and the keys that hold a secret."""
    config, secret_keys = {}, []
    for key, value in load(path).items():
        full_key = str(key) if ":" in str(key) else f"{PROJECT}:{key}"
        value, secret = without_secrets(value)
        if secret:
            secret_keys.append(full_key)
        config[full_key] = value if isinstance(value, str) else json.dumps(value)
    return config, secret_keys
