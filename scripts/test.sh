#!/usr/bin/env bash
# `make test`'s pytest part. The real-broker tests of each broker in RABBITMQ_BROKERS (default: the local 3.10
# and 4.3), the node-failure tests of each cluster in RABBITMQ_CLUSTERS (default: 3.10,4.3, the three-node
# clusters of scripts/clusters.sh) and the broker-free tests run side by side, one pytest each: the broker tests mostly wait for
# delays, so together they take about as long as the longest alone. Each writes its own log, printed as it
# finishes; the exit status is 1 if any of them failed. Arguments go to every pytest (a run that they leave
# without tests, pytest's exit status 5, does not fail).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

PY=.venv/bin/python
BROKERS=${RABBITMQ_BROKERS:-3.10=127.0.0.1:5672:15672,4.3=127.0.0.1:5673:15673}
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT

declare -A run_of=()
runs=()
IFS=, read -ra entries <<< "$BROKERS"
for entry in "${entries[@]}"; do
  runs+=("brokers ${entry%%=*}")
  RABBITMQ_BROKERS=$entry "$PY" -m pytest -m "broker and not cluster" "$@" > "$LOGS/${#runs[@]}.log" 2>&1 &
  run_of[$!]=${#runs[@]}
done
IFS=, read -ra clusters <<< "${RABBITMQ_CLUSTERS:-3.10,4.3}"
for cluster in "${clusters[@]}"; do
  runs+=("cluster $cluster")
  RABBITMQ_CLUSTERS=$cluster "$PY" -m pytest -m cluster "$@" > "$LOGS/${#runs[@]}.log" 2>&1 &
  run_of[$!]=${#runs[@]}
done
runs+=("broker-free")
"$PY" -m pytest -m "not broker" "$@" > "$LOGS/${#runs[@]}.log" 2>&1 &
run_of[$!]=${#runs[@]}
listed=$(IFS=,; echo "${runs[*]}")
echo "pytest: ${#runs[@]} runs side by side (${listed//,/, }); each log follows when it ends"

status=0
for _ in "${runs[@]}"; do
  finished=""
  wait -n -p finished
  code=$?
  number=${run_of[$finished]}
  echo
  echo "=== pytest, ${runs[$((number - 1))]}: exit status $code ==="
  cat "$LOGS/$number.log"
  # 5: pytest's "no tests collected", when arguments such as -k select none of this run's tests.
  [ "$code" -eq 0 ] || [ "$code" -eq 5 ] || status=1
done
exit $status
