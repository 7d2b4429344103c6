"""Nothing a user deployed changes by accident: what the program registers for the dev and prod stacks
and for a stack with every strategy (`tests/recordings/Pulumi.every.yaml`), in a preview and in an up,
and what each component registers on its own, is byte-identical to the recordings in `tests/recordings/`:
every URN, parent, option (protect, retain, import), input and output.

A change meant to change what users deploy rewrites them with `python -m tests.support.recordings`, and
its commit says why."""

from __future__ import annotations

import difflib

import pytest

from tests.support import recordings


@pytest.fixture(scope="module")
def current() -> dict[str, str]:
    return recordings.current()


@pytest.mark.parametrize("name", sorted(path.name for path in recordings.RECORDINGS.glob("*.json")))
def test_what_the_program_registers_is_unchanged(current: dict[str, str], name: str) -> None:
    recorded = (recordings.RECORDINGS / name).read_text(encoding="utf-8")
    now = current[name]
    if now != recorded:
        diff = "".join(difflib.unified_diff(recorded.splitlines(True), now.splitlines(True),
                                            f"recorded/{name}", f"now/{name}", n=2))
        pytest.fail(f"{name} differs from its recording:\n{diff[:6000]}")


def test_every_recording_is_checked(current: dict[str, str]) -> None:
    assert sorted(current) == sorted(path.name for path in recordings.RECORDINGS.glob("*.json"))
