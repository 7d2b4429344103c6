#!/usr/bin/env bash
# A local Prometheus for the alert tests and benchmarks (docs/alerts.md): Debian's prometheus (2.42, with promtool),
# run as our own process on 127.0.0.1:$PROMETHEUS_PORT with its own config and data directory; the Debian service
# is never started (no daemon keeps port 9090).
#
# It scrapes rabbitmq_prometheus on both local brokers of scripts/brokers.sh (3.10 on 15772, 4.3 on 15773) and on
# the cluster nodes of scripts/clusters.sh (15782-15784, 15792-15794): `/metrics` (job rabbitmq) and
# `/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count&family=ra_metrics` (job
# rabbitmq-detailed), each target labelled `broker` (3.10, 4.3, cluster-3.10, cluster-4.3). It loads every rule
# file in $PROMETHEUS_DIR/rules/ (`make alerts OUTPUT=…` writes one; tests put their own there).
#
# Usage:
#   scripts/prometheus.sh install      apt-get install prometheus, without starting Debian's service
#   scripts/prometheus.sh start        install if missing, write the config, start unless it answers, wait
#   scripts/prometheus.sh reload       re-read the config and the rule files (POST /-/reload), wait until loaded
#   scripts/prometheus.sh stop         stop the process this script started
#   scripts/prometheus.sh status       one line
#   scripts/prometheus.sh print-config the config it runs with (docs/alerts.md gives the same), on standard output
#
# Environment: PROMETHEUS_PORT (9490), PROMETHEUS_DIR (/var/lib/rabbitmq-retry/prometheus),
# PROMETHEUS_SCRAPE_INTERVAL and PROMETHEUS_EVALUATION_INTERVAL (2s each: the tests measure alerts firing, not
# production settings; a change restarts the process).
set -euo pipefail

PORT=${PROMETHEUS_PORT:-9490}
DIR=${PROMETHEUS_DIR:-/var/lib/rabbitmq-retry/prometheus}
SCRAPE=${PROMETHEUS_SCRAPE_INTERVAL:-2s}
EVALUATION=${PROMETHEUS_EVALUATION_INTERVAL:-2s}
WAIT_SECS=60
URL=http://127.0.0.1:$PORT
# Test runs side by side (scripts/test.sh) may all call start or reload: one at a time.
LOCK=/run/lock/rabbitmq-retry-prometheus.lock

log() { printf 'prometheus: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

usage() {
  sed -n 's/^#   \(scripts\/prometheus\.sh.*\)/  \1/p' "$0" >&2
  exit 2
}

answering() { curl -sf -m 3 "$URL/-/ready" >/dev/null 2>&1; }

install() {
  command -v prometheus >/dev/null && command -v promtool >/dev/null && return 0
  log "installing Debian's prometheus (its service is not started)"
  local made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y prometheus || {
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    exit 1
  }
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  return 0
}

targets() { # port...: a YAML list of host:port
  local port out=""
  for port in "$@"; do out+="\"127.0.0.1:$port\", "; done
  echo "[${out%, }]"
}

static_configs() {
  cat <<EOF
      - {targets: $(targets 15772), labels: {broker: "3.10"}}
      - {targets: $(targets 15773), labels: {broker: "4.3"}}
      - {targets: $(targets 15782 15783 15784), labels: {broker: cluster-3.10}}
      - {targets: $(targets 15792 15793 15794), labels: {broker: cluster-4.3}}
EOF
}

# The config docs/alerts.md gives users ("Pointing Prometheus at RabbitMQ"), with the local targets: a test holds
# the two equal (intervals, jobs, paths, families).
config_text() {
  echo "# Written by scripts/prometheus.sh; changes are overwritten.
global:
  scrape_interval: $SCRAPE
  scrape_timeout: $SCRAPE
  evaluation_interval: $EVALUATION
rule_files: [\"$DIR/rules/*.yml\"]
scrape_configs:
  - job_name: rabbitmq
    static_configs:
$(static_configs)
  - job_name: rabbitmq-detailed
    metrics_path: /metrics/detailed
    params: {family: [queue_coarse_metrics, queue_consumer_count, ra_metrics]}
    static_configs:
$(static_configs)"
}

config() {
  mkdir -p "$DIR/rules" "$DIR/data"
  local content
  content=$(config_text)
  if [[ -f $DIR/prometheus.yml && $(<"$DIR/prometheus.yml") == "$content" ]]; then
    return 1
  fi
  printf '%s\n' "$content" >"$DIR/prometheus.yml"
  promtool check config "$DIR/prometheus.yml" >/dev/null || die "promtool refuses $DIR/prometheus.yml"
}

running_pid() {
  local pid
  pid=$(cat "$DIR/pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == prometheus ]] &&
    echo "$pid"
}

start() {
  install
  local changed=0
  config && changed=1
  if running_pid >/dev/null && answering; then
    # A changed interval is a flag of the running process only through its config: reload it.
    ((changed)) && reload
    return 0
  fi
  log "starting on $URL (config $DIR/prometheus.yml, data $DIR/data)"
  # Detached, its output in a file, without our descriptors: a caller capturing our output is not held open.
  setsid prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/data" \
    --storage.tsdb.retention.time=2d --web.listen-address="127.0.0.1:$PORT" --web.enable-lifecycle \
    >>"$DIR/prometheus.log" 2>&1 </dev/null 9>&- &
  echo $! >"$DIR/pid"
  local start=$SECONDS
  until answering; do
    running_pid >/dev/null || die "prometheus exited; see $DIR/prometheus.log"
    ((SECONDS - start < WAIT_SECS)) || die "prometheus did not answer on $URL within ${WAIT_SECS}s; see $DIR/prometheus.log"
    sleep 0.5
  done
}

reload() {
  answering || die "prometheus does not answer on $URL: scripts/prometheus.sh start"
  config || true
  curl -sf -m 30 -X POST "$URL/-/reload" >/dev/null || die "prometheus refused the reload; see $DIR/prometheus.log"
}

stop() {
  local pid start=$SECONDS
  pid=$(running_pid) || return 0
  kill "$pid"
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS - start < WAIT_SECS)) || die "prometheus (pid $pid) did not stop"
    sleep 0.5
  done
  rm -f "$DIR/pid"
}

status() {
  local state=down
  if answering; then state=up; fi
  printf 'prometheus %s %s (config %s)\n' "$URL" "$state" "$DIR/prometheus.yml"
}

locked() {
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -w $((WAIT_SECS * 2)) 9 || die "another scripts/prometheus.sh holds $LOCK"
}

case ${1:-} in
  install | start | reload | stop) locked ;;
esac
case ${1:-} in
  install) install ;;
  start)
    start
    status
    ;;
  reload) reload ;;
  stop) stop ;;
  status) status ;;
  print-config) config_text ;;
  *) usage ;;
esac
