"""tests/support/environment.py: a missing broker or tool skips a test on a developer's machine and fails it
where it is required (CI=true, REQUIRE_PULUMI_CLI=1), saying why either way."""

from __future__ import annotations

import pytest

from tests.support.environment import missing


def test_what_is_missing_skips_when_not_required() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"^actionlint is not installed$"):
        missing("actionlint is not installed", required=False)


def test_what_is_missing_fails_when_required_and_says_why() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"^no broker \(CI=true: make setup should have\)$"):
        missing("no broker", required=True)
    with pytest.raises(pytest.fail.Exception, match=r"^no CLI \(REQUIRE_PULUMI_CLI=1\)$"):
        missing("no CLI", required=True, because="REQUIRE_PULUMI_CLI=1")
