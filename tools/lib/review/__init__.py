"""What `make review` computes (tools/review.py): both sides of a change evaluated once each (`programs`), the steps
`pulumi up` would take as rows with their risk (`rows`), identical changes grouped (`grouping`), and the Markdown for
a pull-request comment and in full (`comment`)."""

from tools.lib.review.comment import LIMIT, MAX_DIAGRAMS, Review, render
from tools.lib.review.programs import BaseProgramError, ReviewError, evaluate_both

__all__ = ["LIMIT", "MAX_DIAGRAMS", "BaseProgramError", "Review", "ReviewError", "evaluate_both", "render"]
