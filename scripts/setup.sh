#!/usr/bin/env bash
# `make setup`: everything a fresh Debian machine needs, then the main job on the local default stack.
#   1. a virtualenv (.venv) with requirements.txt;
#   2. the local brokers the tests use (scripts/brokers.sh ensure all);
#   3. the main job: `pulumi up --stack dev` on a local file backend when the Pulumi CLI is installed,
#      otherwise the dev plan (every resource `pulumi up` would create) and how to get the CLI.
# SETUP_SKIP_UP=1 stops after step 2 (CI uses it: the CLI cannot be installed there).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    if ! "$python" -m venv .venv 2>/dev/null; then
        # Debian's python3 ships venv separately.
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        rm -rf .venv && "$python" -m venv .venv
    fi
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt

scripts/brokers.sh ensure all

if [ "${SETUP_SKIP_UP:-0}" = 1 ]; then
    exit 0
fi
if command -v pulumi >/dev/null 2>&1; then
    # A local file backend and an empty passphrase: the dev stack holds no secret (the password of
    # the local broker comes from RABBITMQ_PASSWORD).
    mkdir -p .pulumi-state
    export PULUMI_BACKEND_URL="file://$PWD/.pulumi-state" PULUMI_CONFIG_PASSPHRASE=""
    export RABBITMQ_USERNAME=${RABBITMQ_USERNAME:-guest} RABBITMQ_PASSWORD=${RABBITMQ_PASSWORD:-guest}
    pulumi stack select --create dev
    pulumi up --stack dev --yes
else
    .venv/bin/python -m tools.plan_report --stack dev
    cat <<'TXT'

The Pulumi CLI is not installed, so nothing was applied: above is what `pulumi up --stack dev` would
create on the local broker. Install the CLI (https://www.pulumi.com/docs/install/) and run `make up`.
TXT
fi
