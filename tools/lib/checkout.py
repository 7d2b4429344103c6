"""The project as of a git revision, for `make review` to evaluate BASE with its own program."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path


class CheckoutError(Exception):
    """git failed; the message is shown as is."""


def checkout(rev: str, project: Path, into: Path) -> str:
    """Extract the project directory as of `rev` into `into` (git archive: no worktree to clean up);
    leaves `into` empty when the project did not exist then. Returns the commit's short hash."""
    def git(*args: str, cwd: Path = project) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)

    parsed = git("rev-parse", "--verify", "--quiet", "--short", "--end-of-options", f"{rev}^{{commit}}")
    if parsed.returncode != 0:
        raise CheckoutError(f"error: BASE={rev!r} is not a commit (or {project} is not in a git repository)")
    commit = parsed.stdout.decode().strip()
    top, prefix = git("rev-parse", "--show-toplevel", "--show-prefix").stdout.decode().splitlines()
    tree = f"{commit}:{prefix}"
    if git("cat-file", "-e", tree).returncode != 0:
        return commit
    archive = git("archive", "--format=tar", tree, cwd=Path(top))  # from the top: a subdirectory limits it
    if archive.returncode != 0:
        raise CheckoutError(archive.stderr.decode().rstrip())
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return commit
