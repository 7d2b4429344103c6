"""What a migration kind is: the one interface every module of `migrations/` implements.

A kind owns everything that differs between kinds of `migrations[]` entry: its key in the entry and the keys of
its body, its steps, its parser and its checks against the vhost, what it does to the vhost's plan in each step,
whether its step needs the shovel user, and what `make review` and `make migrate-status` say of it. Everything
else (the shovels' settings, the shovel user's permissions, the components, the guard, `make migrate-retire` of an
external move) is kind-free; `migrations/__init__.py` maps names to modules.

Pure and Pulumi-free, like the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..model.config_entries import Entry, QueueEntry
from ..model.fields import Invalid, Problems
from ..model.plan_types import DelayLevelsPlan, MigrationPlan, RetryablePlan
from ..model.stack_config import DelayLevels, Migration, Vhost

Format = Callable[[str], str]
"""How the caller shows a queue's name in a sentence (the review: a Markdown code span)."""


@dataclass
class CheckScope:
    """What a vhost's migrations are checked against, shared by its entries in config order."""

    path: str
    """The vhost's key path, e.g. "vhosts[shop]"."""
    queues: Sequence[QueueEntry]
    exchanges: Sequence[Entry[Any]]
    delay_levels: DelayLevels | Invalid | None
    declared: Mapping[str, QueueEntry]
    """The vhost's queues by name as written."""
    migration_paths: Sequence[str]
    """The key path of each `migrations[]` entry as written, by index (`key_paths.entry_paths`)."""
    moving_out: dict[str, Migration] = field(default_factory=dict)
    """Each queue a migration checked so far moves out of, with that migration (a queue moves to one successor)."""

    def migration_path(self, m: Migration) -> str:
        return self.migration_paths[m.index]


@dataclass
class Migrating:
    """A vhost's plan parts while its migrations apply, in config order: each kind's `plan` reads and replaces
    them."""

    vhost: Vhost
    path: str
    """The vhost's key path, e.g. "vhosts[shop]"."""
    retryables: dict[str, RetryablePlan[Any]]
    """The retryable queues' plans by queue name, planned from the current config."""
    delay_levels: DelayLevelsPlan | None
    imports: tuple[str, ...]
    plan_retryable: Callable[..., RetryablePlan[Any]]
    """Plans a queue of the old config the way the current one was planned (`plan.plan_retryable`)."""
    plan_levels: Callable[..., DelayLevelsPlan]
    """Plans the old config's delay levels (`strategies.levels.plan_delay_levels`)."""
    shovel_user: str | None
    """The stack's shovel user (`naming.shovel_user`), which a move's shovels connect as."""


class Reviewed(Protocol):
    """A migration as the tools read it from the plan (`tools/lib/review/migrations.py` `MigrationInfo`)."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def shovels(self) -> tuple[tuple[str, str, str], ...]: ...

    @property
    def shovel_user(self) -> str | None: ...

    @property
    def old_queues(self) -> tuple[str, ...]: ...

    @property
    def straggler_binding(self) -> bool: ...

    @property
    def max_delay_ms(self) -> int | None: ...


class MigrationKind(Protocol):
    """A module of `migrations/`; its functions are documented there."""

    NAME: str
    """The entry's key that says its kind (`move: {…}`), and the kind `make migrate-status` prints."""
    KEYS: tuple[str, ...]
    """The keys of that mapping (`components/model/keys.py`, docs/config.md)."""
    STEPS: tuple[str, ...]
    """Its steps in order, the last `retire`; each is one commit whose `pulumi up` applies it."""
    KEEPS_OUT_OF_CONTRACT: bool
    """Before its step retire, its old queues stay declared out of the contract (a drain), so that what a consumer
    on the old contract routes there breaks only at step retire; a move's old queue keeps its own contract."""

    def parse(self, p: Problems, where: str, body: Mapping[str, Any], name: str, step: str,
              index: int) -> Migration | Invalid:
        """The entry of this kind from its body (the mapping at `where`), its name, step and index."""
        ...

    def check(self, p: Problems, m: Migration, vhost: CheckScope) -> None:
        """`m` against the vhost's queues and delay levels, in config order."""
        ...

    def check_across(self, p: Problems, m: Migration, vhost: CheckScope) -> None:
        """`m` against what every migration of the vhost was found to do by `check`."""
        ...

    def runs_shovels(self, m: Migration) -> bool:
        """Its step moves messages with shovels, which connect as the stack's shovel user (it needs a password)."""
        ...

    def plan(self, m: Migration, mpath: str, vhost: Migrating) -> MigrationPlan:
        """What `m` adds and retires in this step; what it keeps replaces the vhost's plan parts in `vhost`."""
        ...

    def title(self, m: Reviewed, code: Format) -> str:
        """What it does, in a few words (the review's heading of it)."""
        ...

    def review_first_step(self, m: Reviewed, code: Format, status: str) -> list[str]:
        """The review's lines of its first step (the stack's own objects; an external move has its own), `status`
        the command that says where it stands."""
        ...

    def review_retire(self, m: Reviewed, code: Format) -> list[str]:
        """The review's lines of its step retire, after what it deletes."""
        ...

    def retired_family(self, m: Reviewed) -> str | None:
        """The queue whose every queue its step retire deletes, including those the plan no longer names (a move's
        old queue: its wait tiers are found on the broker); None when its old queues are all named."""
        ...

    def drained(self, m: Reviewed) -> str:
        """`make migrate-status`'s next step once its old queues are empty (the stack's own objects)."""
        ...
