"""The engine `make setup` builds from Go modules (scripts/engine.sh, docs/engine.md): the versions the build
modules pin are the ones the docs name, and the binaries built report them. In CI the engine must have been
built (`make setup` builds it even with SETUP_SKIP_UP=1) unless a CLI of the machine's own is on PATH (the GitHub
Actions job installs one); elsewhere the test skips."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.environment import IN_CI, missing
from tools.lib.mockrun import ROOT

ENGINE = ROOT / "scripts" / "engine"
BIN = ROOT / ".tools" / "engine" / "bin"
DOC = (ROOT / "docs" / "engine.md").read_text()


def required(build_module: str, module: str) -> str:
    """The version a build module's go.mod requires of a module."""
    match = re.search(rf"^\s*(?:require )?{re.escape(module)} (v\S+)", (ENGINE / build_module / "go.mod").read_text(),
                      re.MULTILINE)
    assert match, f"{build_module}/go.mod requires no {module}"
    return match.group(1)


def test_the_cli_is_built_from_one_pulumi_release_its_pkg_and_its_sdk() -> None:
    """pkg/v3's own go.mod replaces sdk/v3 with its sibling folder: outside its repository that is sdk/v3 at the
    same release, and the shim scripts come from that sdk/v3."""
    assert required("cli", "github.com/pulumi/pulumi/pkg/v3") == required("cli", "github.com/pulumi/pulumi/sdk/v3")


@pytest.mark.parametrize(("build_module", "module"), [("cli", "github.com/pulumi/pulumi/pkg/v3"),
                                                      ("python-host", "github.com/pulumi/pulumi/sdk/v3")])
def test_the_docs_name_the_version_each_build_module_pins(build_module: str, module: str) -> None:
    row = next(line for line in DOC.splitlines() if f"`scripts/engine/{build_module}`" in line)
    assert f"`{module}` {required(build_module, module)}" in row


def test_the_engine_built_reports_the_pinned_versions() -> None:
    if not (BIN / ".built").exists():
        own = shutil.which("pulumi")
        missing("the engine is not built in .tools/engine/bin (make setup builds it unless a pulumi of your own is "
                "on PATH)", required=IN_CI and own is None, because="CI=true, and no pulumi of its own on PATH")
    cli = subprocess.run([str(BIN / "pulumi"), "version"], capture_output=True, text=True, timeout=60,
                         env={"PULUMI_SKIP_UPDATE_CHECK": "true", "HOME": str(Path.home())})
    assert cli.stdout.strip() == required("cli", "github.com/pulumi/pulumi/pkg/v3"), cli.stderr
    assert (BIN / ".built").read_text().startswith(
        f"pulumi {required('cli', 'github.com/pulumi/pulumi/pkg/v3')}, "
        f"pulumi-language-python {required('python-host', 'github.com/pulumi/pulumi/sdk/v3')}, ")
    for shim in ("pulumi-language-python", "pulumi-language-python-exec", "pulumi-resource-pulumi-python"):
        assert (BIN / shim).stat().st_mode & 0o111, f"{shim} is not executable"
