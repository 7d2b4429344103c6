"""The project's own Python sources, as the tests that scan them read them: a wire key spelt twice, a migration kind
compared by name, a tool reading a message's text or parsing a permission regex back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_files(*sources: str, leaving_out: Callable[[Path], bool] = lambda _: False) -> list[Path]:
    """Every `.py` file below each of `sources` (folders of the project; a file named is itself), sorted, without
    those `leaving_out` picks."""
    found = [path for source in sources
             for path in ((ROOT / source).rglob("*.py") if (ROOT / source).is_dir() else [ROOT / source])]
    return sorted(path for path in found if not leaving_out(path))
