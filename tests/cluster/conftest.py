"""The three-node clusters of scripts/clusters.sh for the node-failure tests: one parametrized `cluster`, and a
throw-away `vhost` on it. Every test here is marked `cluster` and `broker` (so `-m "not broker"`, the
broker-free run, leaves them out; scripts/test.sh runs them with `-m cluster`, one pytest per cluster).

A cluster that is not three running nodes skips its tests, except in CI (CI=true), where it fails them.
Before and after each test every node is running (a test that failed half-way leaves none down).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import Cluster, configured_clusters
from tests.support.environment import missing
from tests.support.mirror import call, esc

HERE = Path(__file__).resolve().parent
CLUSTERS = configured_clusters()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.cluster)
            item.add_marker(pytest.mark.broker)


@pytest.fixture(scope="session", params=CLUSTERS, ids=[c.version for c in CLUSTERS])
def cluster(request: pytest.FixtureRequest) -> Cluster:
    candidate: Cluster = request.param
    problem = candidate.problem()
    if problem is not None:
        missing(problem, because="CI=true: start the clusters with `scripts/clusters.sh ensure`")
    return candidate


@pytest.fixture
def vhost(cluster: Cluster) -> Iterator[str]:
    """A fresh vhost name (prefixed `clusters-`); the test's topology creates it, teardown restarts any node the
    test left down, then deletes the vhost with everything in it."""
    name = f"clusters-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        cluster.restart_stopped()
        call(cluster.answering(), "DELETE", f"vhosts/{esc(name)}")
