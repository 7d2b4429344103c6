"""What a test needs from the machine (a broker, the Mermaid renderer, actionlint, the Pulumi CLI), and what
it does when that is missing: skip and say why on a developer's machine, fail where it must be there.

Under CI=true `make setup` has installed every tool and started both brokers, so a skip there would turn
an untested part green: it fails instead. One place decides this for every test."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
"""The tests run in CI (GitHub Actions sets CI=true)."""


def missing(message: str, *, required: bool = IN_CI, because: str = "CI=true: make setup should have") -> NoReturn:
    """Skip the calling test with `message`, or fail it when what is missing is `required` (by default: in
    CI), saying `because`."""
    if required:
        pytest.fail(f"{message} ({because})", pytrace=False)
    pytest.skip(message)
