#!/usr/bin/env bash
# `make setup`: everything a fresh Debian machine needs, then the main job on the local default stack.
#   1. a virtualenv (.venv) with requirements.txt (actionlint comes from there too) and this project,
#      editable, with its `rabbitmq-retry` command;
#   2. the Mermaid renderer the tests draw the review's diagrams with: npm's @mermaid-js/mermaid-cli,
#      pinned, in .tools/mermaid/, driving the system's Chromium (Debian's `chromium` when none is there);
#   3. the Node.js example consumer's pinned amqplib (examples/node-consumer, `npm ci`), the local brokers
#      the tests use (scripts/brokers.sh ensure all) and the Prometheus the alert tests run (Debian's
#      prometheus and promtool, scripts/prometheus.sh install; its service is not started);
#   4. the Pulumi engine built from Go modules at pinned versions into .tools/engine/bin (scripts/engine.sh,
#      docs/engine.md), unless your own `pulumi` is on PATH: the CLI and the Python language host; the rabbitmq
#      provider plugin is not served by the Go module proxy, so it is not built;
#   5. the main job: `pulumi up --stack dev` on a local file backend when the CLI and the rabbitmq provider plugin
#      are there, otherwise the dev plan (every resource `pulumi up` would create) and what is missing.
# SETUP_SKIP_UP=1 stops after step 4 (CI uses it: its tests bring up and tear down what they need).
# Every step is skipped when what it installs is already there, so a second run is quick.
set -euo pipefail
cd "$(dirname "$0")/.."

# The engine's Go build is CPU-bound and the steps before step 4 mostly wait for downloads and brokers: it runs
# beside them, its output in .tools/engine.log, printed when it is waited for.
mkdir -p .tools
scripts/engine.sh >.tools/engine.log 2>&1 &
engine=$!

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv .venv 2>/dev/null; then
        # Debian's python3 ships venv separately.
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        rm -rf .venv && "$python" -m venv .venv
    fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
# This project itself, editable: the `rabbitmq-retry` command the README runs, and `rabbitmq_retry` /
# `rabbitmq_retry_client` importable from anywhere, always as the code in this checkout is (an edit needs no
# reinstall). --no-deps and --no-build-isolation: requirements.txt above pins every dependency and setuptools.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .

# Puppeteer's own browser download is skipped (it needs a host outside the package registries); the
# system's Chromium is used instead. Node 18 (Debian 12's) is the oldest these versions support.
MERMAID_CLI_VERSION=11.17.0
PUPPETEER_VERSION=24.43.1
MERMAID_DIR=.tools/mermaid
browser=${MERMAID_BROWSER:-}
for candidate in chromium chromium-browser google-chrome; do
    [ -n "$browser" ] && break
    browser=$(command -v "$candidate" || true)
done
missing=()
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -n "$browser" ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    browser=${browser:-$(command -v chromium)}
fi
wanted="mermaid-cli $MERMAID_CLI_VERSION puppeteer $PUPPETEER_VERSION"
if [ "$(cat "$MERMAID_DIR/installed" 2>/dev/null)" != "$wanted" ]; then
    rm -rf "$MERMAID_DIR" && mkdir -p "$MERMAID_DIR"
    PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix "$MERMAID_DIR" --no-audit --no-fund --loglevel=error \
        "@mermaid-js/mermaid-cli@$MERMAID_CLI_VERSION" "puppeteer@$PUPPETEER_VERSION" >/dev/null
    echo "$wanted" >"$MERMAID_DIR/installed"  # last: an interrupted install is redone
fi
# Root (CI, `make setup`) needs --no-sandbox; the tests read the browser from here.
printf '{"executablePath": "%s", "args": ["--no-sandbox", "--disable-gpu"]}\n' "$browser" \
    >"$MERMAID_DIR/puppeteer.json"

# The Node.js example consumer's dependencies, exactly as its package-lock.json pins them (amqplib), into
# examples/node-consumer/node_modules: tests/broker/test_node_consumer.py runs it.
NODE_EXAMPLE=examples/node-consumer
if ! cmp -s "$NODE_EXAMPLE/package-lock.json" "$NODE_EXAMPLE/node_modules/.installed-package-lock.json"; then
    npm ci --prefix "$NODE_EXAMPLE" --no-audit --no-fund --loglevel=error >/dev/null
    cp "$NODE_EXAMPLE/package-lock.json" "$NODE_EXAMPLE/node_modules/.installed-package-lock.json"  # last
fi

scripts/brokers.sh ensure all
scripts/prometheus.sh install

engine_status=0
wait "$engine" || engine_status=$?
cat .tools/engine.log
[ "$engine_status" -eq 0 ] || { echo "setup: scripts/engine.sh failed (exit status $engine_status)" >&2; exit 1; }

if [ "${SETUP_SKIP_UP:-0}" = 1 ]; then
    exit 0
fi
# The program's venv first (the built language host runs the `python` it finds), the built engine last (your own
# CLI and plugins, if any, come first).
export PATH="$PWD/.venv/bin:$PATH:$PWD/.tools/engine/bin" PULUMI_SKIP_UPDATE_CHECK=true
provider_ready() {  # the rabbitmq provider plugin: on PATH, installed, or for a CLI of your own to fetch
    command -v pulumi-resource-rabbitmq >/dev/null 2>&1 ||
        pulumi plugin ls 2>/dev/null | grep -Eq '^rabbitmq +resource +3\.5\.3 ' ||
        [ "$(command -v pulumi)" != "$PWD/.tools/engine/bin/pulumi" ]
}
if command -v pulumi >/dev/null 2>&1 && provider_ready; then
    # A local file backend and an empty passphrase: the dev stack holds no secret (the password of
    # the local broker comes from RABBITMQ_PASSWORD).
    if [ "$(command -v pulumi)" = "$PWD/.tools/engine/bin/pulumi" ]; then
        export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true  # the built engine never downloads a plugin
    fi
    mkdir -p .pulumi-state
    export PULUMI_BACKEND_URL="file://$PWD/.pulumi-state" PULUMI_CONFIG_PASSPHRASE=""
    export RABBITMQ_USERNAME=${RABBITMQ_USERNAME:-guest} RABBITMQ_PASSWORD=${RABBITMQ_PASSWORD:-guest}
    pulumi stack select --create dev
    pulumi up --stack dev --yes
else
    .venv/bin/python -m tools.plan_report --stack dev
    cat <<'TXT'

Nothing was applied: above is what `pulumi up --stack dev` would create on the local broker. The Pulumi CLI
and its Python language host are there (.tools/engine/bin), the rabbitmq provider plugin 3.5.3 is not: its Go
module is not served by the Go module proxy, so it cannot be built here (docs/engine.md). Put a
pulumi-resource-rabbitmq 3.5.3 on PATH (or `pulumi plugin install resource rabbitmq 3.5.3 --file <it>`) and run
`make up`.
TXT
fi
