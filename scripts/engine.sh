#!/usr/bin/env bash
# The Pulumi engine, built from Go modules at pinned versions into .tools/engine/bin (docs/engine.md):
#   pulumi                          the CLI, github.com/pulumi/pulumi/pkg/v3/cmd/pulumi (scripts/engine/cli/go.mod);
#   pulumi-language-python          the Python language host (scripts/engine/python-host/go.mod; why its version
#                                   differs from the CLI's: docs/engine.md);
#   pulumi-language-python-exec,    the host's shim scripts, plain files of the CLI's sdk/v3 module in the module
#   pulumi-resource-pulumi-python   cache (the first runs the program, the second a dynamic provider).
# Only the Go module proxy is used; no source is kept in this repository, only the go.mod and go.sum files. A user's
# own `pulumi` on PATH is kept: then nothing is built. A stamp names what was built from which go.sum, so a second
# run builds nothing; the module and build caches (GOMODCACHE, GOCACHE) serve a rebuild after a pin changes.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=.tools/engine/bin
own=$(PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$PWD/$BIN" | paste -sd: -) command -v pulumi || true)
if [ -n "$own" ] && [ -z "${ENGINE_BUILD:-}" ]; then
    echo "engine: using your own Pulumi CLI, $own ($("$own" version)); nothing built (ENGINE_BUILD=1 builds ours)"
    exit 0
fi

module_version() {  # the version a build module requires of a module: go.mod is the one place it is written
    (cd "scripts/engine/$1" && go list -m -f '{{.Version}}' "$2")
}
CLI_VERSION=$(module_version cli github.com/pulumi/pulumi/pkg/v3)
HOST_VERSION=$(module_version python-host github.com/pulumi/pulumi/sdk/v3)
stamp="pulumi $CLI_VERSION, pulumi-language-python $HOST_VERSION, $(cat scripts/engine/*/go.sum | sha256sum | cut -c1-16)"
if [ "$(cat "$BIN/.built" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi

echo "engine: building $stamp into $BIN (a first build takes minutes: docs/engine.md)"
rm -f "$BIN/.built"
mkdir -p "$BIN"
out=$PWD/$BIN
export GOFLAGS="-trimpath -mod=readonly"
version_flag=-X=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
start=$SECONDS
(cd scripts/engine/cli && go build -ldflags "$version_flag=$CLI_VERSION" -o "$out/pulumi" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
(cd scripts/engine/python-host && go build -ldflags "$version_flag=$HOST_VERSION" \
    -o "$out/pulumi-language-python" github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python)
sdk=$(cd scripts/engine/cli && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
install -m 755 "$sdk/python/cmd/pulumi-language-python-exec" "$sdk/python/dist/pulumi-resource-pulumi-python" "$BIN/"
echo "$stamp" >"$BIN/.built"  # last: an interrupted build is redone
echo "engine: built in $((SECONDS - start)) s: $("$BIN/pulumi" version)"
