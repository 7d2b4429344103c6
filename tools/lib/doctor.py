"""Can the live broker run this stack (`make doctor`, tools/doctor.py)? What the management API says
(version, plugins, feature flags, the provider user's tags, existing objects, the cluster's nodes and the
members of the stack's quorum queues) against what the stack needs, as blocking findings, warnings and facts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from components.config.capabilities import (
    AT_LEAST_ONCE_MIN_VERSION,
    Version,
    end_of_support,
    parse_version,
    requirements,
    shown,
    version_problems,
    version_warnings,
)
from components.config.passwords import moves_queues
from components.model.key_paths import with_paths
from components.model.stack_config import Limits, StackConfig
from components.pulumi.resources import DEFAULT_AMQP_PORT
from components.strategies import strategy_of
from rabbitmq_retry_client.management import ManagementClient, path_escape
from tools.lib import drift
from tools.lib.mockrun import Registered
from tools.lib.snapshot import Snapshot, amqp_ports, read_live

ADMINISTRATOR = "administrator"
POLICYMAKER = "policymaker"
AT_LEAST_ONCE_FEATURE_FLAG = "stream_queue"
"""RabbitMQ 3.x dead-letters a quorum queue at-least-once only with this flag enabled (4.x always has it)."""
SHOVEL_PLUGIN = "rabbitmq_shovel"
"""Moves messages between queues: a migration out of a queue that a change would replace needs it."""
SHOVEL_MANAGEMENT_PLUGIN = "rabbitmq_shovel_management"
"""`GET /api/shovels/<vhost>`: the shovels' state, which `make migrate-status` shows."""
ENABLE_SHOVEL = (f"`rabbitmq-plugins enable {SHOVEL_PLUGIN} {SHOVEL_MANAGEMENT_PLUGIN}` on every node "
                 "(online, no restart)")
DEAD_LETTER_STALL = (
    "RabbitMQ 3.x on a cluster: when the node that leads a retrying quorum queue and the queue it dead-letters into "
    "fails, the new leader resends its pending dead letters only after dead_letter_worker_publisher_confirm_timeout "
    "(180 s): retries through dead-lettering (tiers in reject mode, delay levels) stall for about 3 minutes, "
    "silently, then arrive, none lost. Measured on 3.10.8: 178-180 s per stall; 4.3.6 recovered within 2 s "
    "(docs/clusters.md)")


@dataclass(frozen=True)
class NodeFacts:
    """One cluster node as `GET /api/nodes` reports it."""

    name: str
    running: bool
    version: str
    """The node's RabbitMQ version; "" when it does not report one (a node that is down)."""


@dataclass(frozen=True)
class QuorumMembers:
    """Where one quorum queue of the stack's vhosts has its members, and which of them are online."""

    vhost: str
    queue: str
    members: tuple[str, ...]
    online: tuple[str, ...]


@dataclass(frozen=True)
class LiveFacts:
    """What the management API says, read once."""

    version: str
    plugins: tuple[str, ...]
    feature_flags: Mapping[str, str]
    """Name → state (`enabled`, `disabled`, …)."""
    user: str
    tags: tuple[str, ...]
    snapshots: Mapping[str, Snapshot] = field(default_factory=dict)
    nodes: tuple[NodeFacts, ...] = ()
    """Every node of the cluster (one for a single broker); () when not read."""
    quorum: tuple[QuorumMembers, ...] = ()
    amqp_ports: tuple[int, ...] = ()
    """The broker's plain AMQP listener ports (`/api/overview`); () when not reported."""


@dataclass
class Diagnosis:
    blocking: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> int:
        return 2 if self.blocking else 0


def needs_administrator(config: StackConfig) -> list[str]:
    """Why the provider's user needs the `administrator` tag (a `policymaker` may manage queues, exchanges,
    bindings and policies of an existing vhost, nothing else); [] when policymaker suffices."""
    reasons = []
    for path, vhost in with_paths("", "vhosts", config.vhosts):
        if not vhost.existing:
            reasons.append(f"{path} creates vhost {vhost.name!r}")
        if vhost.applications or vhost.operators:
            reasons.append(f"{path} creates users and permissions")
        if vhost.limits != Limits():
            reasons.append(f"{path}.limits")
        if vhost.operator_policies:
            reasons.append(f"{path}.operator_policies")
    return reasons


def diagnose(config: StackConfig, records: Sequence[Registered], facts: LiveFacts,
             amqp_port: int | None = None) -> Diagnosis:
    """`amqp_port`: the stack's `rabbitmq-retry:amqp_port`, None when unset."""
    found = Diagnosis()
    version = parse_version(facts.version)
    if version is None:
        found.warnings.append(f"the broker reports version {facts.version!r}, which is not X.Y.Z: versions not checked")
    else:
        found.blocking += [f"{path}: {problem}" for path, problem in version_problems(config, version, "the broker")]
        found.warnings += version_warnings(config, version, "the broker")
        if warning := end_of_support(version):
            found.warnings.append(warning)
        if config.broker_version is not None and config.broker_version != version:
            found.warnings.append(f"broker.version is {shown(config.broker_version)} but the broker runs "
                                  f"{facts.version}: preview checks the wrong version; update broker.version")
    found.blocking += _absent_existing_vhosts(config, facts)
    found.blocking += _feature_flag_problems(config, facts, version)
    _cluster_findings(config, facts, version, found)
    found.blocking += _tag_problems(config, facts)
    blocking, warnings = shovel_findings(migrations_of(config), facts)
    found.blocking += blocking + shovel_port_findings(config, facts, amqp_port)
    found.warnings += warnings
    for finding in drift.findings(records, dict(facts.snapshots)):
        if finding.kind == "immutable" and finding.type in ("Queue", "Exchange"):
            found.blocking.append(f"{finding.type.lower()} {finding.name!r} in vhost {finding.vhost!r} already exists "
                                  f"with other settings ({finding.detail}): `pulumi up` fails with 400 "
                                  "\"inequivalent arg\"; drain and delete it, or declare it as it is")
    return found


def migrations_of(config: StackConfig) -> list[str]:
    """The key path of each vhost that declares migrations (`vhosts[shop].migrations`): they move messages with
    shovels (a drain needs none, but its next step may be a move: the plugin is checked for any migration)."""
    return [f"{path}.migrations" for path, vhost in with_paths("", "vhosts", config.vhosts) if vhost.migrations]


def shovel_findings(migrations: Sequence[str], facts: LiveFacts) -> tuple[list[str], list[str]]:
    """(blocking, warnings) about the shovel plugins, for the key paths that declare migrations: without
    `rabbitmq_shovel` the broker cannot run the shovels a migration declares, so what waits in the old queues
    would never move (blocking); without its management plugin the shovels run but their state cannot be read
    (a warning). Nothing when no migration is declared or the plugins were not reported."""
    if not migrations or not facts.plugins:
        return [], []
    where = ", ".join(migrations)
    if SHOVEL_PLUGIN not in facts.plugins:
        return [f"{where}: the stack declares migrations, which move messages with shovels, but the plugin "
                f"{SHOVEL_PLUGIN} is not enabled: the migration's shovels cannot run and nothing would leave the "
                f"old queues; enable it first: {ENABLE_SHOVEL}"], []
    if SHOVEL_MANAGEMENT_PLUGIN not in facts.plugins:
        return [], [f"{where}: the plugin {SHOVEL_MANAGEMENT_PLUGIN} is not enabled: the shovels run, but their "
                    f"state (GET /api/shovels) cannot be read by `make migrate-status`; {ENABLE_SHOVEL}"]
    return [], []


def shovel_port_findings(config: StackConfig, facts: LiveFacts, amqp_port: int | None) -> list[str]:
    """A migration's shovels run on the broker and connect to `localhost:<rabbitmq-retry:amqp_port>` (default 5672):
    when the broker does not listen for AMQP there, they never move anything (a shovel that cannot connect stays
    `starting`; one that reaches another broker's port, where the vhost or user is missing, is `terminated`)."""
    if not moves_queues(config) or not facts.amqp_ports:
        return []
    port = amqp_port or DEFAULT_AMQP_PORT
    if port in facts.amqp_ports:
        return []
    setting = f"rabbitmq-retry:amqp_port is {amqp_port}" if amqp_port else f"rabbitmq-retry:amqp_port is unset: {port}"
    where = ", ".join(migrations_of(config))
    return [f"{where}: the migrations' shovels connect to the broker's own AMQP port ({setting}), but the broker "
            f"listens for AMQP on {', '.join(map(str, facts.amqp_ports))}: the shovels would never move a message; "
            f"set it: `pulumi config set --path rabbitmq-retry:amqp_port {facts.amqp_ports[0]}`"]


def _absent_existing_vhosts(config: StackConfig, facts: LiveFacts) -> list[str]:
    """An `existing: true` vhost is referenced, never created: if the broker lacks it, `pulumi up` fails."""
    return [f"{path}.existing: vhost {vhost.name!r} is not on the broker, and an existing vhost is referenced, "
            "never created: `pulumi up` fails with 404 vhost_not_found; create it first (`rabbitmqctl add_vhost "
            f"{vhost.name}`), or set {path}.existing: false so that the stack creates it (and deletes it with "
            "the stack)"
            for path, vhost in with_paths("", "vhosts", config.vhosts)
            if vhost.existing and (snapshot := facts.snapshots.get(vhost.name)) is not None and not snapshot.exists]


def _feature_flag_problems(config: StackConfig, facts: LiveFacts, version: Version | None) -> list[str]:
    problems = []
    quorum = any(q.queue_type == "quorum" for v in config.vhosts for q in v.queues)
    needed = {needs for v in config.vhosts for q in v.queues
              if q.retry is not None and (needs := strategy_of(q.retry).FEATURE_FLAG) is not None}
    wanted = [("quorum_queue", "quorum queues")] if quorum else []
    wanted += [(needs.name, needs.needed_for) for needs in sorted(needed, key=lambda n: n.name)
               if version is not None and version >= needs.since]
    if dead_letters_at_least_once(config) and version is not None and version < (4, 0, 0):
        wanted.append((AT_LEAST_ONCE_FEATURE_FLAG, "at-least-once dead-lettering of quorum queues (RabbitMQ 3.x)"))
    for flag, what in wanted:
        state = facts.feature_flags.get(flag)
        if state is not None and state != "enabled":
            problems.append(f"feature flag {flag} is {state}, and the stack uses {what}: "
                            f"`rabbitmqctl enable_feature_flag {flag}`")
    return problems


def dead_letters_at_least_once(config: StackConfig) -> bool:
    """A retryable quorum queue or quorum delay levels: the broker dead-letters them at-least-once."""
    return any(r.minimum == AT_LEAST_ONCE_MIN_VERSION and r.feature.startswith("at-least-once")
               for r in requirements(config))


def quorum_queues_of(config: StackConfig) -> bool:
    return any(q.queue_type == "quorum" for v in config.vhosts for q in v.queues) or any(
        v.delay_levels is not None and v.delay_levels.queue_type == "quorum" for v in config.vhosts)


def _cluster_findings(config: StackConfig, facts: LiveFacts, version: Version | None, found: Diagnosis) -> None:
    """Nodes down (a majority down blocks), quorum members offline, mixed versions, quorum queues that a single
    node cannot replicate, and 3.x's dead-letter stall on a cluster. Nothing when the nodes were not read."""
    if not facts.nodes:
        return
    down = [n.name for n in facts.nodes if not n.running]
    running = len(facts.nodes) - len(down)
    if down and running <= len(facts.nodes) // 2:
        found.blocking.append(
            f"only {running} of {len(facts.nodes)} cluster nodes run ({', '.join(down)} down): without a majority "
            "RabbitMQ 4.x cannot change its metadata (every declaration times out after 30 s) and 3.x refuses to "
            f"declare quorum queues (cluster_not_formed); start {', '.join(down)} before `pulumi up`")
    elif down:
        found.warnings.append(
            f"cluster node {', '.join(down)} is not running: quorum queues keep a majority and work on, with fewer "
            "replicas; `pulumi up`, drift and doctor must use the management API of a running node; start it")
    versions = sorted({n.version for n in facts.nodes if n.version})
    if len(versions) > 1:
        found.warnings.append(f"the cluster's nodes run different versions ({', '.join(versions)}): an upgrade in "
                              "progress; the checks above use the version the endpoint reports")
    for q in facts.quorum:
        if set(q.online) != set(q.members):
            offline = sorted(set(q.members) - set(q.online))
            found.warnings.append(f"quorum queue {q.queue!r} in vhost {q.vhost!r}: {len(q.online)} of {len(q.members)} "
                                  f"members online ({', '.join(offline)} offline)")
    found.warnings += _group_size_warnings(config, running)
    if len(facts.nodes) == 1 and quorum_queues_of(config):
        found.warnings.append(
            f"the broker is a single node ({facts.nodes[0].name}): the stack's quorum queues have one member each "
            "and are replicated nowhere; a node failure stops them and a lost disk loses their messages. Run a "
            "cluster of 3 (or 5) nodes for replication")
    if len(facts.nodes) > 1 and version is not None and version < (4, 0, 0) and dead_letters_at_least_once(config):
        found.warnings.append(DEAD_LETTER_STALL)


def _group_size_warnings(config: StackConfig, running: int) -> list[str]:
    """A quorum group size above the running nodes is not refused: RabbitMQ declares the queue with a member on
    each running node only (measured on 3.10.8 and 4.3.6: size 3 on a single node gives one member), so the stack
    gets less replication than it asks for, silently."""
    nodes = "a single-node broker" if running == 1 else f"a cluster with {running} running nodes"

    def warning(path: str, size: int, what: str, declared: str) -> str:
        inherited = " (or defaults.quorum_group_size, which it inherits)" * (size == config.defaults.quorum_group_size)
        return (f"{path}.quorum_group_size{inherited} asks for {size} replicas of {what}, but the broker is {nodes}: "
                f"RabbitMQ declares {declared} with at most {running} member{'s' * (running != 1)}, silently; lower "
                f"it to {running} or run at least {size} nodes")

    warnings = []
    for vhost_path, vhost in with_paths("", "vhosts", config.vhosts):
        for path, queue in with_paths(vhost_path, "queues", vhost.queues):
            if queue.quorum_group_size is not None and queue.quorum_group_size > running:
                warnings.append(warning(path, queue.quorum_group_size,
                                        f"quorum queue {queue.name!r} in vhost {vhost.name!r}",
                                        "it (and the queues it owns)"))
        levels = vhost.delay_levels
        if levels is not None and levels.quorum_group_size is not None and levels.quorum_group_size > running:
            warnings.append(warning(f"{vhost_path}.delay_levels", levels.quorum_group_size,
                                    f"the delay level queues in vhost {vhost.name!r}", "them"))
    return warnings


def _tag_problems(config: StackConfig, facts: LiveFacts) -> list[str]:
    tags = set(facts.tags)
    if ADMINISTRATOR in tags:
        return []
    if reasons := needs_administrator(config):
        return [f"user {facts.user!r} (tags: {', '.join(sorted(tags)) or 'none'}) is not an administrator, which "
                f"the stack needs: {'; '.join(reasons)}"]
    if POLICYMAKER not in tags:
        return [f"user {facts.user!r} (tags: {', '.join(sorted(tags)) or 'none'}) may not manage policies; give it "
                "the policymaker tag (or administrator)"]
    return []


def read_facts(endpoint: ManagementClient, vhosts: Sequence[str]) -> LiveFacts:
    """GET only: overview, nodes, feature flags, whoami, a snapshot of each vhost and its quorum queues' members."""
    overview = endpoint.get("overview") or {}
    nodes = endpoint.get("nodes") or []
    plugins = sorted({p for node in nodes for p in node.get("enabled_plugins") or []})
    flags = {f["name"]: str(f.get("state")) for f in endpoint.get("feature-flags") or []}
    me = endpoint.get("whoami") or {}
    tags = me.get("tags") or []
    tags = tags.split(",") if isinstance(tags, str) else tags
    snapshots = {v: read_live(endpoint, v) for v in vhosts}
    quorum = tuple(QuorumMembers(v, str(q["name"]), tuple(q.get("members") or ()), tuple(q.get("online") or ()))
                   for v in vhosts if snapshots[v].exists
                   for q in endpoint.get(f"queues/{path_escape(v)}") or [] if q.get("type") == "quorum")
    return LiveFacts(str(overview.get("rabbitmq_version", "")), tuple(plugins), flags, str(me.get("name", "")),
                     tuple(t for t in tags if t), snapshots, tuple(_node(n) for n in nodes), quorum,
                     amqp_ports(overview))


def _node(node: Mapping[str, Any]) -> NodeFacts:
    rabbit = [a for a in node.get("applications") or [] if a.get("name") == "rabbit"]
    version = str(node.get("rabbitmq_version") or (rabbit[0].get("version") if rabbit else "") or "")
    return NodeFacts(str(node.get("name", "?")), bool(node.get("running")), version)


def render(stack: str, endpoint: str, facts: LiveFacts, found: Diagnosis, tls: str = "") -> str:
    """`tls`: how the endpoint was reached (`tools.lib.cli.tls_summary`), a line of its own when given."""
    lines = [f"# Doctor: stack `{stack}` against {endpoint}", "",
             f"- RabbitMQ {facts.version or '(unknown)'}", *([f"- {tls}"] if tls else []),
             f"- plugins: {', '.join(facts.plugins) or '(none reported)'}",
             f"- feature flags enabled: {sum(s == 'enabled' for s in facts.feature_flags.values())} of "
             f"{len(facts.feature_flags)}" + "".join(f"; {n} {s}" for n, s in sorted(facts.feature_flags.items())
                                                   if s != "enabled"),
             f"- user `{facts.user}`, tags: {', '.join(facts.tags) or 'none'}",
             *_cluster_lines(facts), ""]
    for title, items in (("Blocking", found.blocking), ("Warnings", found.warnings)):
        if items:
            lines += [f"## {title}", "", *(f"- {item}" for item in items), ""]
    lines.append("**Blocking findings**: `pulumi up` would fail or misbehave." if found.blocking
                 else "**Nothing blocking**: the broker can run this stack.")
    return "\n".join(lines)


def _cluster_lines(facts: LiveFacts) -> list[str]:
    """Nodes, what runs, versions; quorum members online; the flag and plugin the stack relies on."""
    lines = []
    if facts.nodes:
        running = sum(n.running for n in facts.nodes)
        listed = ", ".join(f"{n.name} ({'running' if n.running else 'DOWN'}{', ' + n.version if n.version else ''})"
                           for n in facts.nodes)
        shape = "single node" if len(facts.nodes) == 1 else f"cluster of {len(facts.nodes)} nodes, {running} running"
        lines.append(f"- {shape}: {listed}")
    if facts.quorum:
        complete = sum(set(q.online) == set(q.members) for q in facts.quorum)
        sizes = sorted({len(q.members) for q in facts.quorum})
        lines.append(f"- quorum queues in the stack's vhosts: {len(facts.quorum)}, {complete} with every member "
                     f"online; members per queue: {', '.join(map(str, sizes))}")
    if AT_LEAST_ONCE_FEATURE_FLAG in facts.feature_flags:
        lines.append(f"- feature flag {AT_LEAST_ONCE_FEATURE_FLAG}: {facts.feature_flags[AT_LEAST_ONCE_FEATURE_FLAG]} "
                     "(RabbitMQ 3.x needs it for at-least-once dead-lettering)")
    lines.append(f"- plugin {SHOVEL_PLUGIN}: {'enabled' if SHOVEL_PLUGIN in facts.plugins else 'not enabled'} "
                 "(moving messages out of a queue that a change would replace needs it)")
    return lines
