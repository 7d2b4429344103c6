"""Both sides of a review evaluated at once, each in a process of its own (`evaluation.start`), both by the working
tree's tools: BASE's own program and components in its checkout, the working tree's own; each side's program runs
once, and the review reads only the two evaluations (BASE's may instead be a saved one, `make evaluate`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tools.lib.evaluation import OWN_PLAN, Evaluation, EvaluationError, finish, start
from tools.lib.planned import unplanned


class ReviewError(Exception):
    """The program failed; the message is shown as is (the evaluation's stderr for a config error)."""


class BaseProgramError(ReviewError):
    """The program at BASE failed (the working tree's did not)."""


def _checked(evaluated: Evaluation, error: type[ReviewError]) -> Evaluation:
    """`evaluated`, unless its program registered something its plan does not have (the review would misread it)."""
    if missing := unplanned(evaluated.recording, evaluated.plan):
        raise error(f"the program registered {len(missing)} resources its plan does not have (first: "
                    f"{missing[0]}): the components and the plan disagree")
    return evaluated


def evaluate_both(stack: str, head: Path, base: Path | None) -> tuple[Evaluation | None, Evaluation]:
    """(BASE, HEAD) evaluations, both running at once; None for a BASE without the stack."""
    with tempfile.TemporaryFile("w+") as head_out, tempfile.TemporaryFile("w+") as base_out:
        at_head = start(stack, head, head_out)
        at_base = start(stack, base, base_out) if base is not None else None
        try:
            new = finish(at_head, head_out)
        except EvaluationError as error:
            raise ReviewError(str(error)) from None
        finally:  # never leave BASE running, whatever HEAD did
            try:
                old = finish(at_base, base_out) if at_base is not None else None
            except EvaluationError as error:
                base_error: ReviewError | None = BaseProgramError(str(error))
            else:
                base_error = None
        if base_error is not None:
            raise base_error
    # A BASE whose roles come from these tools' planner (an older program) may register what that plan lacks.
    return (old if old is None or old.plan_source != OWN_PLAN else _checked(old, BaseProgramError)), \
        _checked(new, ReviewError)
