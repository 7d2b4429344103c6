"""Both sides of a review evaluated at once, each in its own `python -m tools.mockrun` subprocess, so that
BASE's own `__main__.py` and `components/` are imported, not the working tree's."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import IO

from tools.lib.mockrun import Registered
from tools.lib.planned import PlanIndex, PlanIndexError, plan_index, unplanned

TOOLS_ROOT = Path(__file__).resolve().parents[3]
"""The directory holding `tools/`: where `python -m tools.mockrun` runs, whichever project it evaluates."""


class ReviewError(Exception):
    """The program failed; the message is shown as is (mockrun's stderr for a config error)."""


class BaseProgramError(ReviewError):
    """The program at BASE failed (the working tree's did not)."""


def _start(stack: str, root: Path, output: IO[str]) -> subprocess.Popen[str]:
    """The program at `root` under mocks, in a fresh interpreter running these tools (so that `root`'s
    own `components/` are imported), writing its recording to `output`."""
    return subprocess.Popen([sys.executable, "-m", "tools.mockrun", "--stack", stack, "--root", str(root)],
                            cwd=TOOLS_ROOT, stdout=output, stderr=subprocess.PIPE, text=True)


def _recording(process: subprocess.Popen[str], output: IO[str]) -> list[Registered]:
    _, stderr = process.communicate()
    if process.returncode != 0:
        raise ReviewError(stderr.rstrip() or f"error: tools.mockrun exited {process.returncode}")
    output.seek(0)
    known = {f.name for f in fields(Registered)}
    return [Registered(**{k: v for k, v in item.items() if k in known}) for item in json.load(output)]


def evaluate_both(stack: str, head: Path, base: Path | None) -> tuple[list[Registered], list[Registered]]:
    """(BASE, HEAD) recordings, both programs running at once; [] for a BASE without the stack."""
    with tempfile.TemporaryFile("w+") as head_out, tempfile.TemporaryFile("w+") as base_out:
        at_head = _start(stack, head, head_out)
        at_base = _start(stack, base, base_out) if base is not None else None
        try:
            new = _recording(at_head, head_out)
        finally:  # never leave BASE running, whatever HEAD did
            try:
                old = _recording(at_base, base_out) if at_base is not None else []
            except ReviewError as error:
                base_error: ReviewError | None = BaseProgramError(str(error))
            else:
                base_error = None
        if base_error is not None:
            raise base_error
    return old, new


def plans_of(stack: str, head: Path, base: Path | None, recordings: tuple[list[Registered], list[Registered]]
             ) -> tuple[PlanIndex, PlanIndex]:
    """(BASE, HEAD) plans of the stack, each by its own project's planner, beside their recordings: the review
    reads every resource's retryable queue and role from them. ReviewError (BaseProgramError for BASE) when a
    side cannot be planned, or when its program registered something its plan does not have (the review would
    misread it)."""
    indexes: list[PlanIndex] = []
    for root, recording, error in ((base, recordings[0], BaseProgramError), (head, recordings[1], ReviewError)):
        try:
            index = plan_index(stack, root) if root is not None else {}
        except PlanIndexError as problem:
            raise error(str(problem)) from None
        if missing := unplanned(recording, index):
            raise error(f"the program registered {len(missing)} resources its plan does not have (first: "
                        f"{missing[0]}): the components and the plan disagree")
        indexes.append(index)
    return indexes[0], indexes[1]
