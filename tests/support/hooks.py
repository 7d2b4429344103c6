"""The engine's part of an update that the mirror (tests/support/mirror.py) cannot do: calling the program's resource
hooks. `ProgramHooks` calls the program's own callbacks (components/pulumi/guard.py), by the hook names a record is
bound to, with the `ResourceHookArgs` the engine passes, and with the provider's settings as `pulumi up` hands them over
(environment variables) and the stack's `delete_with_messages`. When the engine calls them is the mirror's model
(`apply_update`); that the engine calls them at all is not verified here (no Pulumi CLI).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pulumi
from pulumi.runtime.config import set_all_config

from components.pulumi.guard import PATH_GUARD, QUEUE_GUARD, guard_path_change, guard_queue_delete
from tests.support.mirror import Broker
from tools.lib import engine
from tools.lib.mockrun import Registered

CALLBACKS: dict[str, Callable[[pulumi.ResourceHookArgs], None]] = {
    QUEUE_GUARD: guard_queue_delete,
    PATH_GUARD: guard_path_change,
}
"""Each hook name the program registers, and the callback it registers under it."""


def _id(record: Registered) -> str:
    """The ID the provider gave the object: `name@vhost` for the types the guards read, else the logical name."""
    if record.type == engine.QUEUE:
        return f"{record.inputs['name']}@{record.inputs.get('vhost') or '/'}"
    return record.name


def _outputs(record: Registered) -> dict[str, Any]:
    """The state's outputs: a Stash stores its `input` as `input` (and its first one as `output`)."""
    if record.type == engine.STASH:
        return {"input": record.inputs.get("input"), "output": record.inputs.get("input")}
    return {**record.inputs, "id": _id(record)}


class ProgramHooks:
    """`before_delete` / `before_update` for `mirror.apply_update`: run every hook the record is bound to, in order;
    the first to raise fails the step. `calls` lists each hook run, as (event, record)."""

    def __init__(self, broker: Broker, delete_with_messages: Iterable[str] = ()) -> None:
        self.broker = broker
        self.delete_with_messages = list(delete_with_messages)
        self.calls: list[tuple[str, Registered]] = []

    @contextmanager
    def _provider_settings(self) -> Iterator[None]:
        variables = {"RABBITMQ_ENDPOINT": self.broker.management_url, "RABBITMQ_USERNAME": self.broker.username,
                     "RABBITMQ_PASSWORD": self.broker.password}
        saved = {key: os.environ.get(key) for key in variables}
        os.environ.update(variables)
        config = {"rabbitmq-retry:delete_with_messages": json.dumps(self.delete_with_messages)}
        set_all_config(config if self.delete_with_messages else {}, [])
        try:
            yield
        finally:
            set_all_config({}, [])
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _run(self, event: str, record: Registered, args: pulumi.ResourceHookArgs) -> None:
        for name in record.hooks.get(event, []):
            self.calls.append((event, record))
            with self._provider_settings():
                CALLBACKS[name](args)

    def queues_checked(self) -> list[str]:
        """The queues whose deletion the queue guard was asked about."""
        return [r.inputs["name"] for event, r in self.calls if event == "before_delete" and r.type == engine.QUEUE]

    def path_guards_run(self) -> list[tuple[str, str]]:
        """(event, logical name) of each path guard hook run."""
        return [(event, r.name) for event, r in self.calls if r.type == engine.STASH]

    def before_delete(self, record: Registered) -> None:
        self._run("before_delete", record, pulumi.ResourceHookArgs(
            urn=record.urn, id=_id(record), name=record.name, type=record.type,
            old_inputs=record.inputs, old_outputs=_outputs(record)))

    def before_update(self, old: Registered, new: Registered) -> None:
        self._run("before_update", new, pulumi.ResourceHookArgs(
            urn=new.urn, id=_id(old), name=new.name, type=new.type,
            old_inputs=old.inputs, old_outputs=_outputs(old), new_inputs=new.inputs))
