"""The mutations `make mutate` applies (tools/mutate.py), each to a throw-away copy of the working tree, and
the tests that should catch each one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutation:
    name: str
    """What the breakage would do to a user, in a few words."""
    path: str
    original: str
    mutated: str
    tests: tuple[str, ...]
    """The test files expected to catch it."""


MUTATIONS = (
    Mutation("the requeue exchange is no longer bound to its queue (retries vanish)",
             "components/strategies/tiers.py", 'BindingPlan(naming.REQUEUE_BINDING_KEY, requeue_x, name),', "",
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("the input queue dead-letters to the requeue exchange instead of the retry exchange (hot loop)",
             "components/strategies/tiers.py", "wire.DEAD_LETTER_EXCHANGE.argument: retry_x,",
             "wire.DEAD_LETTER_EXCHANGE.argument: requeue_x,",
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("queues are declared non-durable (lost on restart; refused by 4.3)",
             "components/pulumi/resources.py", "durable=True,  # the provider defaults to false",
             "durable=False,  # the provider defaults to false", ("tests/test_components.py",)),
    Mutation("the preview-time checks of a Vhost used on its own are skipped",
             "components/pulumi/vhost.py", "raise TopologyError(", "print(",
             ("tests/test_checks.py",)),
    Mutation("the program's preview-time checks, once for the whole stack, are skipped",
             "components/pulumi/stack_resources.py", 'raise TopologyError("the stack", problems)',
             'print("the stack", problems)',
             ("tests/test_checks.py",)),
    Mutation("a wait tier's delay policy loses its TTL",
             "components/strategies/tiers.py", "{wire.MESSAGE_TTL.key: str(t.delay_ms), **", "{**",
             ("tests/test_plan.py", "tests/test_components.py")),
    Mutation("a levels queue's delivery binding also takes the delayed copies of queues whose name ends like its own",
             "components/strategies/levels.py", "naming.delivery_pattern(queue.name))", '"#." + queue.name)',
             ("tests/test_levels_strategy.py",)),
    Mutation("a native queue's delay never grows past its first (delayed-retry-max is min_delay)",
             "components/strategies/native.py", "wire.DELAYED_RETRY_MAX.key: str(retry.max_delay_ms)}",
             "wire.DELAYED_RETRY_MAX.key: str(retry.min_delay_ms)}", ("tests/test_native_strategy.py",)),
    Mutation("a consumer of a native contract publishes retry copies instead of letting the broker retry",
             "rabbitmq_retry_client/strategies.py", 'if "retry_call" in spec["properties"]:', "if False:",
             ("tests/test_retry_client.py",)),
    Mutation("the review no longer recognises the config's policies (stale ones go unreported)",
             "tools/lib/inventory.py", 'CONFIG_POLICY_KINDS = {"config": "policy", "operator": "operator policy"}',
             'CONFIG_POLICY_KINDS = {"operator": "operator policy"}', ("tests/test_review.py",)),
    Mutation("unknown config keys are accepted silently",
             "components/model/fields.py", "        if key not in allowed:\n", "        if False:\n",
             ("tests/test_config.py",)),
    Mutation("a 4.x stack's sized quorum queues lose target-group-size (no membership reconciliation)",
             "components/model/plan_types.py",
             "return {} if target_group_size is None else {wire.TARGET_GROUP_SIZE.key",
             "return {} if True else {wire.TARGET_GROUP_SIZE.key", ("tests/test_group_size.py",)),
    # The wire table (components/model/wire.py): a wrong row misleads every check that reads it.
    Mutation("an operator's lower TTL or length limit no longer caps our policy's (a shortened wait tier goes unseen)",
             "components/model/wire.py", "lower_wins=True, unlimited_below_zero=unlimited_below_zero)",
             "lower_wins=False, unlimited_below_zero=unlimited_below_zero)", ("tests/test_checks.py",)),
    Mutation("a policy holding delivery-limit is taken to reach classic queues (RabbitMQ skips it there)",
             "components/model/wire.py", '_limit("delivery-limit", queue_types=QUORUM,',
             '_limit("delivery-limit", queue_types=EVERY_QUEUE_TYPE,', ("tests/test_checks.py",)),
    Mutation("a policy's dead-letter exchange is taken to beat the queue's own argument (routes go unchecked)",
             "components/model/wire.py", "argument_wins_on=EVERY_QUEUE_TYPE)\nDEAD_LETTER_ROUTING_KEY",
             "argument_wins_on=frozenset())\nDEAD_LETTER_ROUTING_KEY",
             ("tests/test_wire.py",)),
    Mutation("the user limits' provider stores the deploying user's password in its state",
             "components/user_limits.py", 'self.password = ""\n',
             'self.password = os.environ.get("RABBITMQ_PASSWORD", "")\n', ("tests/test_user_limits.py",)),
    Mutation("a secret's ciphertext is shown in plans and reviews",
             "components/config/pulumi_yaml.py", 'return f"{SECRET_MARKER} {digest}"',
             'return f"{SECRET_MARKER} {json.dumps(ciphertext)}"', ("tests/test_review.py",)),
    # Migrations (components/model/plan_types.py, components/migrations/): what a bug there would lose or expose.
    Mutation("a migration's shovel is registered with ack-mode on-publish (it acks before the successor confirmed)",
             "components/pulumi/resources.py", "ack_mode=shovel.ack_mode,", 'ack_mode="on-publish",',
             ("tests/test_migrations.py",)),
    Mutation("a migration's shovel deletes itself once the source's ready messages moved (src-delete-after "
             "queue-length)",
             "components/pulumi/resources.py", "source_delete_after=shovel.source_delete_after,",
             'source_delete_after="queue-length",', ("tests/test_migrations.py",)),
    Mutation("a migration's shovel may start before its destination queue exists (it declares a classic one itself)",
             "components/pulumi/resources.py",
             'destination_queue=scope.names[("Queue", shovel.destination)],\n'
             "            ack_mode=shovel.ack_mode,\n"
             "            source_delete_after=shovel.source_delete_after,\n"
             "        ),\n"
             "        opts=scope.options(depends_on=[\n"
             '            scope.resources[("Queue", shovel.destination)],\n',
             "destination_queue=shovel.destination,\n"
             "            ack_mode=shovel.ack_mode,\n"
             "            source_delete_after=shovel.source_delete_after,\n"
             "        ),\n"
             "        opts=scope.options(depends_on=[\n", ("tests/test_migrations.py",)),
    Mutation("the preview-time check lets a shovel with a lossy ack-mode through",
             "components/plan/checks.py", 'if shovel.ack_mode != "on-confirm":', "if False:",
             ("tests/test_migrations.py",)),
    Mutation("the shovel user may write to every exchange of the vhost",
             "components/model/plan_types.py",
             'SHOVEL_WRITE = Grant(r"^amq\\.default$", ("amq.default",))', 'SHOVEL_WRITE = Grant.pattern(".*")',
             ("tests/test_migrations.py",)),
    Mutation("every stack shares one shovel user again (one stack's apply breaks another's migration)",
             "components/model/naming.py", 'return f"{SHOVEL_USER}.{project}.{stack}"', "return SHOVEL_USER",
             ("tests/test_migrations.py",)),
    Mutation("a tier drain re-plans the kept tiers with the queue's new last delay (what waits there leaves early)",
             "components/migrations/drain_tiers.py",
             "old_queue = replace(current.config, retry=replace(current.retry, delays_ms=m.delays_ms))",
             "old_queue = replace(current.config, retry=replace(current.retry, delays_ms=(*current.retry.delays_ms, "
             "*[current.retry.delays_ms[-1]] * (len(m.delays_ms) - len(current.retry.delays_ms)))))",
             ("tests/test_migrations.py",)),
    Mutation("a level drain keeps no level (the removed top levels go at once, with what waits there)",
             "components/migrations/drain_levels.py",
             "old = vhost.plan_levels(DelayLevels(config.unit_ms, m.max_delay_ms,",
             "old = vhost.plan_levels(DelayLevels(config.unit_ms, config.max_delay_ms,", ("tests/test_migrations.py",)),
    Mutation("the review of step drain says a removed tier's republished retries are lost while its binding stays",
             "tools/lib/review/migrations.py", "if kind_of(m).KEEPS_OUT_OF_CONTRACT and not m.retiring:", "if False:",
             ("tests/test_migration_review.py",)),
)


def _copy_tree(destination: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored), plus the shared venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for relative in filter(None, listed):
        source = ROOT / relative
        if source.is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (destination / ".venv").symlink_to(ROOT / ".venv")


def apply(mutation: Mutation, tree: Path) -> None:
    path = tree / mutation.path
    source = path.read_text()
    count = source.count(mutation.original)
    if count != 1:
        raise SystemExit(f"error: mutation {mutation.name!r}: {mutation.path} contains its original text "
                         f"{count} times, not once; update tools/lib/mutate.py to the code")
    path.write_text(source.replace(mutation.original, mutation.mutated))


def check_fits(tree: Path = ROOT) -> list[str]:
    """Mutations whose original text is not exactly once in its file (they would test nothing)."""
    return [f"{m.name}: {m.path}" for m in MUTATIONS
            if not (tree / m.path).exists() or (tree / m.path).read_text().count(m.original) != 1]


def run(mutation: Mutation, all_tests: bool) -> tuple[bool, float, str]:
    """(caught, seconds, last line of pytest's output) for one mutation, in its own copy of the tree."""
    with tempfile.TemporaryDirectory(prefix="mutate-") as directory:
        tree = Path(directory)
        _copy_tree(tree)
        apply(mutation, tree)
        targets = ["-m", "not broker"] if all_tests else list(mutation.tests)
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider", *targets],
                                cwd=tree, capture_output=True, text=True,
                                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        failed = [line.removeprefix("FAILED ") for line in result.stdout.splitlines() if line.startswith("FAILED ")]
        summary = failed[0] if failed else (result.stdout.strip().splitlines() or [result.stderr.strip()])[-1]
        # Exit 1 means a test failed; anything else (no tests collected, usage error) proves nothing.
        return result.returncode == 1, time.monotonic() - started, summary
