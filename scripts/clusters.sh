#!/usr/bin/env bash
# Three-node RabbitMQ clusters for the cluster tests, beside the single-node brokers of scripts/brokers.sh
# (whose install, chroot and daemon helpers this script sources).
#
#   3.10  nodes c310n1..3@localhost on the host     AMQP 5682-5684  management 15682-15684  dist 25682-25684  epmd 4380
#         prometheus 15782-15784
#   4.3   nodes c43n1..3@localhost in the chroot    AMQP 5692-5694  management 15692-15694  dist 25692-25694  epmd 4390
#                                                 AMQPS 5695-5697  HTTPS management 15695-15697
#         prometheus 15792-15794 (never rabbitmq_prometheus's default 15692: that is c43n1's management port)
#
# Usage:
#   scripts/clusters.sh ensure [3.10|4.3|all]     install if missing, start what is down, form the cluster, enable the plugins, wait, print status
#   scripts/clusters.sh status                    one line per node
#   scripts/clusters.sh stop [3.10|4.3|all]       stop every node and the cluster's epmd
#   scripts/clusters.sh nodes 3.10|4.3            "index node amqp_port management_port pid_file amqps_port https_port"
#                                                 per node (for the tests; "- -" without TLS)
#   scripts/clusters.sh kill-node 3.10|4.3 N      kill -9 node N (a node failure, for the tests)
#   scripts/clusters.sh start-node 3.10|4.3 N     start node N and wait until every running node sees it running
#
# Needs root. Idempotent: when every node answers and the cluster runs all three, `ensure` only checks it and
# enables the plugins a node lacks (online, without a restart).
# Each node runs with a clean environment (env -i): the host's and the chroot's rabbitmq-env.conf set a node
# name, Erlang flags and an epmd port meant for the single-node brokers. Each cluster has its own epmd port and
# Erlang cookie (in its HOME), and listens on 127.0.0.1 only.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/brokers.sh
source "$HERE/brokers.sh"

NODES="1 2 3"
CLUSTER_WAIT_SECS=${CLUSTERS_WAIT_SECS:-180}
# Data, logs and cookie of a cluster, as its nodes see the path (4.3's lives under the chroot).
cluster_dir() { echo "/var/lib/rabbitmq-retry/cluster-$1"; }
# The same directory as this script sees it.
host_dir() { case $1 in 3.10) cluster_dir 3.10 ;; 4.3) echo "$ROOT43$(cluster_dir 4.3)" ;; esac; }
port_offset() { case $1 in 3.10) echo 81 ;; 4.3) echo 91 ;; esac; }
node_amqp() { echo $((5600 + $(port_offset "$1") + $2)); }
node_mgmt() { echo $((15600 + $(port_offset "$1") + $2)); }
node_dist() { echo $((25600 + $(port_offset "$1") + $2)); }
# TLS listeners beside the plain ones, on the clusters of TLS_CLUSTERS (4.3: AMQPS 5695-5697, HTTPS 15695-15697),
# with brokers.sh's test CA and certificates.
TLS_CLUSTERS="4.3"
cluster_tls() { [[ " $TLS_CLUSTERS " == *" $1 "* ]]; }
node_amqps() { echo $((5600 + $(port_offset "$1") + $2 + 3)); }
node_https() { echo $((15600 + $(port_offset "$1") + $2 + 3)); }
node_prometheus() { echo $((15700 + $(port_offset "$1") + $2)); }
cluster_epmd() { case $1 in 3.10) echo 4380 ;; 4.3) echo 4390 ;; esac; }
node_name() { echo "c${1//./}n$2@localhost"; }
node_log() { echo "$(host_dir "$1")/$2/log/$(node_name "$1" "$2").log"; }
pid_file() { echo "$(host_dir "$1")/$2/pid"; }

log() { printf 'clusters: %s\n' "$*" >&2; }

usage() {
  sed -n 's/^#   \(scripts\/clusters\.sh.*\)/  \1/p' "$0" >&2
  exit 2
}

# ---------------------------------------------------------------- running things in a cluster's world

on() { # version command...: in the version's root, with a clean environment, the cluster's cookie and epmd
  local v=$1
  shift
  local environment=(PATH=/usr/lib/rabbitmq/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$(cluster_dir "$v")"
    LANG=C.UTF-8 RABBITMQ_CONF_ENV_FILE=/dev/null ERL_EPMD_PORT="$(cluster_epmd "$v")" ERL_EPMD_ADDRESS=127.0.0.1)
  case $v in
    3.10) /usr/bin/env -i "${environment[@]}" "$@" ;;
    4.3) chroot "$ROOT43" /usr/bin/env -i "${environment[@]}" "$@" ;;
  esac
}

ctl() { # version index rabbitmqctl-arguments...
  local v=$1 n=$2
  shift 2
  on "$v" timeout 60 rabbitmqctl -q -n "$(node_name "$v" "$n")" "$@"
}

node_pid() { # version index: the node's OS pid, when its process runs
  local file pid
  file=$(pid_file "$1" "$2")
  [[ -s $file ]] || return 1
  pid=$(<"$file")
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  # A stale pid file may name a pid that another process took since (another node of the other cluster started
  # meanwhile): only this node's process carries its RABBITMQ_NODENAME (start_node sets it).
  tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "RABBITMQ_NODENAME=$(node_name "$1" "$2")" || return 1
  echo "$pid"
}

node_mgmt_get() { curl -sf -m 5 -u guest:guest "http://127.0.0.1:$(node_mgmt "$1" "$2")/api/$3"; }

# How many nodes this node's management API reports running (empty when it does not answer).
running_count() { node_mgmt_get "$1" "$2" nodes | grep -o '"running":true' | wc -l; }

node_answers() { amqp_open "$(node_amqp "$1" "$2")" && node_mgmt_get "$1" "$2" overview >/dev/null; }

cluster_formed() { # version: every node answers and sees all of them running
  local v=$1 n count
  for n in $NODES; do
    node_answers "$v" "$n" || return 1
    count=$(running_count "$v" "$n") || return 1
    ((count == 3)) || return 1
  done
}

log_tails() { # version [index...]: the end of each node's log (default: every node's), for a failure message
  local v=$1 n nodes
  shift
  read -ra nodes <<<"${*:-$NODES}"
  for n in "${nodes[@]}"; do
    printf -- '--- %s: %s\n' "$(node_name "$v" "$n")" "$(node_log "$v" "$n")" >&2
    tail -n 15 "$(node_log "$v" "$n")" >&2 2>/dev/null || true
    tail -n 5 "$(host_dir "$v")/$n/log/startup.out" >&2 2>/dev/null || true
  done
}

fail() { # version message [index...]
  local v=$1 message=$2
  shift 2
  log_tails "$v" "$@"
  die "RabbitMQ $v cluster: $message"
}

# ---------------------------------------------------------------- nodes

prepare() { # version: install RabbitMQ (under brokers.sh's lock: it builds the chroot), write configuration
  local v=$1 n dir
  need_cmd curl
  case $v in
    3.10) (locked && install310) ;;
    4.3) (locked && build43 && mount43) ;;
  esac
  dir=$(host_dir "$v")
  mkdir -p "$dir"
  if [[ ! -s $dir/.erlang.cookie ]]; then
    (umask 077 && head -c 30 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/.erlang.cookie")
  fi
  chmod 400 "$dir/.erlang.cookie"
  # brokers.sh's PLUGINS: management for the tests and the tools, the shovel for migrations (doctor checks it).
  write_if_changed "$dir/enabled_plugins" "[${PLUGINS// /,}]."
  for n in $NODES; do
    mkdir -p "$dir/$n/log" "$dir/$n/data"
    # Loopback only: with loopback_users = none, guest/guest would otherwise be open to the network.
    # client-local: a queue's leader is the node that declares it (4.x's default spreads them), so a test
    # chooses which node leads which queue by the node it applies the topology through.
    write_if_changed "$dir/$n/rabbitmq.conf" "listeners.tcp.default = 127.0.0.1:$(node_amqp "$v" "$n")
management.tcp.ip = 127.0.0.1
management.tcp.port = $(node_mgmt "$v" "$n")
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = $(node_prometheus "$v" "$n")
loopback_users = none
queue_leader_locator = client-local"
  done
  tls_cluster_config "$v" || true
}

# The TLS block of every node's rabbitmq.conf (brokers.sh's tls_block: other lines are kept); 0 when one changed,
# and the node must restart to listen.
tls_cluster_config() { # version
  local v=$1 n changed=1
  cluster_tls "$v" || return 1
  tls_material
  tls_install "$(host_dir "$v")/tls" on "$v" chown -R rabbitmq:rabbitmq "$(cluster_dir "$v")/tls"
  for n in $NODES; do
    [[ -f $(host_dir "$v")/$n/rabbitmq.conf ]] || continue
    if tls_block "$(host_dir "$v")/$n/rabbitmq.conf" "$(tls_conf "$(node_amqps "$v" "$n")" "$(node_https "$v" "$n")" \
      "$(cluster_dir "$v")/tls" PLAIN AMQPLAIN EXTERNAL ANONYMOUS)"; then
      changed=0
    fi
  done
  return $changed
}

start_node() { # version index: start the node's process unless it runs (returns at once)
  local v=$1 n=$2 dir
  node_pid "$v" "$n" >/dev/null && return 0
  dir="$(cluster_dir "$v")/$n"
  # Not brokers.sh's daemon_start: the detached node must hold neither its lock (fd 9) nor ours (fd 8).
  # Started in its own directory: a node keeps its caller's working directory, and once that is deleted (a test's
  # temporary directory, a clone removed after a run) its management API answers 500 (enoent in filename:absname).
  (cd "$(host_dir "$v")/$n" && on "$v" RABBITMQ_NODENAME="$(node_name "$v" "$n")" RABBITMQ_NODE_PORT="$(node_amqp "$v" "$n")" \
    RABBITMQ_DIST_PORT="$(node_dist "$v" "$n")" RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$(cluster_dir "$v")/enabled_plugins" RABBITMQ_MNESIA_BASE="$dir/data" \
    RABBITMQ_LOG_BASE="$dir/log" RABBITMQ_PID_FILE="$dir/pid" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    rabbitmq-server -detached >>"$(host_dir "$v")/$n/log/startup.out" 2>&1 </dev/null 8>&- 9>&-)
}

await_node() { # version index: until the node has booted (fails with its log when it does not)
  local v=$1 n=$2 start=$SECONDS
  # await_startup fails at once until the node has registered with epmd: retry it.
  until ctl "$v" "$n" await_startup >/dev/null 2>&1; do
    if ((SECONDS - start > 30)) && ! node_pid "$v" "$n" >/dev/null; then
      fail "$v" "node $(node_name "$v" "$n") is not running (crashed while booting?)" "$n"
    fi
    ((SECONDS - start < CLUSTER_WAIT_SECS)) ||
      fail "$v" "node $(node_name "$v" "$n") did not boot within ${CLUSTER_WAIT_SECS}s" "$n"
    sleep 1
  done
}

joined() { ctl "$1" "$2" cluster_status 2>/dev/null | grep -q "$(node_name "$1" 1)"; }

join_node() { # version index: make the node a member of node 1's cluster (a node that is not one is reset)
  local v=$1 n=$2 output
  joined "$v" "$n" && return 0
  log "joining $(node_name "$v" "$n") to $(node_name "$v" 1)"
  if ! output=$(ctl "$v" "$n" stop_app 2>&1 && ctl "$v" "$n" reset 2>&1 &&
    ctl "$v" "$n" join_cluster "$(node_name "$v" 1)" 2>&1 && ctl "$v" "$n" start_app 2>&1); then
    printf '%s\n' "$output" >&2
    fail "$v" "$(node_name "$v" "$n") could not join $(node_name "$v" 1)" 1 "$n"
  fi
}

await_cluster() { # version
  local v=$1 start=$SECONDS
  until cluster_formed "$v"; do
    ((SECONDS - start < CLUSTER_WAIT_SECS)) ||
      fail "$v" "the three nodes did not all answer and see each other running within ${CLUSTER_WAIT_SECS}s"
    sleep 1
  done
}

# The plugins of $PLUGINS the running node lacks, as its management API says. A record without `enabled_plugins`
# (the node's statistics not sampled yet, or not reported: seen on 3.10 for nodes up for days) says nothing:
# nothing is enabled then (enabling what already runs fails with `badmatch, {error, enoent}` on 3.10).
node_plugins_missing() { # version index
  local v=$1 n=$2
  node_mgmt_get "$v" "$n" nodes | python3 -c 'import json, sys
node = next((x for x in json.load(sys.stdin) if x.get("name") == sys.argv[1]), {})
if "enabled_plugins" in node:
    print(" ".join(p for p in sys.argv[2].split() if p not in node["enabled_plugins"]))' \
    "$(node_name "$v" "$n")" "$PLUGINS"
}

ensure_plugins() { # version: enable what a running node lacks, online (a cluster started before they were listed)
  local v=$1 n missing
  for n in $NODES; do
    missing=$(node_plugins_missing "$v" "$n") || fail "$v" "node $(node_name "$v" "$n") does not answer" "$n"
    [[ -z $missing ]] && continue
    log "enabling on $(node_name "$v" "$n"): $missing"
    # A node booted before its rabbitmq.conf had the Prometheus port would start the plugin on 15692.
    ctl "$v" "$n" eval "$(prometheus_env "$(node_prometheus "$v" "$n")")" >/dev/null
    # shellcheck disable=SC2086 # one argument per plugin
    on "$v" RABBITMQ_ENABLED_PLUGINS_FILE="$(cluster_dir "$v")/enabled_plugins" \
      timeout 60 rabbitmq-plugins -q -n "$(node_name "$v" "$n")" enable $missing >/dev/null
  done
}

ensure_cluster() { # version
  local v=$1 n start=$SECONDS
  if cluster_formed "$v"; then
    ensure_plugins "$v"
    if tls_cluster_config "$v"; then
      # One node at a time: the others keep the cluster (and a 4.x majority) up meanwhile.
      for n in $NODES; do
        log "restarting $(node_name "$v" "$n") for its TLS listeners"
        ctl "$v" "$n" stop >/dev/null 2>&1 || true
        while node_pid "$v" "$n" >/dev/null; do sleep 0.5; done
        restart_node "$v" "$n"
      done
    fi
    return 0
  fi
  prepare "$v"
  # All at once: a restarted 3.x node waits for the peers it last saw, and 4.x needs a majority to boot.
  for n in $NODES; do start_node "$v" "$n"; done
  for n in $NODES; do await_node "$v" "$n"; done
  for n in 2 3; do join_node "$v" "$n"; done
  await_cluster "$v"
  ensure_plugins "$v"
  log "RabbitMQ $v cluster running ($((SECONDS - start))s)"
}

stop_cluster() { # version
  local v=$1 n pids=()
  for n in $NODES; do
    if node_pid "$v" "$n" >/dev/null; then
      ctl "$v" "$n" stop >/dev/null 2>&1 &
      pids+=($!)
    fi
  done
  ((${#pids[@]} == 0)) || wait "${pids[@]}" || true
  for n in $NODES; do
    local start=$SECONDS
    while node_pid "$v" "$n" >/dev/null; do
      ((SECONDS - start < WAIT_SECS)) || fail "$v" "node $(node_name "$v" "$n") did not stop" "$n"
      sleep 1
    done
  done
  # The cluster's epmd outlives its nodes.
  if [[ -d $(host_dir "$v") ]]; then on "$v" epmd -port "$(cluster_epmd "$v")" -kill >/dev/null 2>&1 || true; fi
}

kill_node() { # version index
  local pid
  pid=$(node_pid "$1" "$2") || die "node $(node_name "$1" "$2") is not running"
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

sees_running() { # version from-index name: the node's management API reports node `name` running
  node_mgmt_get "$1" "$2" nodes | python3 -c 'import json, sys
sys.exit(0 if any(n.get("name") == sys.argv[1] and n.get("running") for n in json.load(sys.stdin)) else 1)' "$3"
}

rejoined() { # version index: the node answers and every node that answers sees it running
  local v=$1 n=$2 other name
  name=$(node_name "$v" "$n")
  node_answers "$v" "$n" || return 1
  for other in $NODES; do
    if [[ $other == "$n" ]] || node_answers "$v" "$other"; then
      sees_running "$v" "$other" "$name" || return 1
    fi
  done
}

restart_node() { # version index: start it and wait until it is back in the cluster (other nodes may be down)
  local v=$1 n=$2 start=$SECONDS
  start_node "$v" "$n"
  await_node "$v" "$n"
  until rejoined "$v" "$n"; do
    ((SECONDS - start < CLUSTER_WAIT_SECS)) ||
      fail "$v" "$(node_name "$v" "$n") did not rejoin the running nodes within ${CLUSTER_WAIT_SECS}s" "$n"
    sleep 1
  done
}

# ---------------------------------------------------------------- status

node_line() { # version index
  local v=$1 n=$2 json version="-" state=down count
  if json=$(node_mgmt_get "$v" "$n" overview); then
    version=$(json_str rabbitmq_version <<<"$json")
    count=$(running_count "$v" "$n" || echo "?")
    state="up, sees $count of 3 nodes running"
    amqp_open "$(node_amqp "$v" "$n")" || state="down (management answers, AMQP closed)"
  elif node_pid "$v" "$n" >/dev/null; then
    state="down (process runs, management API not answering)"
  fi
  printf '%-5s %-17s rabbitmq %-7s amqp 127.0.0.1:%-5s management http://127.0.0.1:%-5s %s\n' \
    "$v" "$(node_name "$v" "$n")" "${version:--}" "$(node_amqp "$v" "$n")" "$(node_mgmt "$v" "$n")" "$state"
}

# ---------------------------------------------------------------- main

clusters_of() { case ${1:-all} in all) echo "3.10 4.3" ;; 3.10 | 4.3) echo "$1" ;; *) usage ;; esac; }
one_cluster() { case ${1:-} in 3.10 | 4.3) echo "$1" ;; *) usage ;; esac; }
one_node() { case ${1:-} in 1 | 2 | 3) echo "$1" ;; *) usage ;; esac; }

cluster_locked() { # version: one operation on a cluster at a time (fd 8; brokers.sh's lock is fd 9)
  [[ $EUID -eq 0 ]] || die "must run as root"
  mkdir -p "$(dirname "$LOCK")"
  exec 8>"/run/lock/rabbitmq-retry-cluster-$1.lock"
  flock -w $((CLUSTER_WAIT_SECS * 3)) 8 || die "another clusters.sh holds the $1 cluster's lock"
}

main() {
  local cmd=${1:-} v n tls
  case $cmd in
    ensure | stop)
      for v in $(clusters_of "${2:-all}"); do
        (
          cluster_locked "$v"
          "${cmd}_cluster" "$v"
          for n in $NODES; do node_line "$v" "$n"; done
        )
      done
      ;;
    status)
      for v in 3.10 4.3; do
        for n in $NODES; do node_line "$v" "$n"; done
      done
      ;;
    nodes)
      v=$(one_cluster "${2:-}")
      for n in $NODES; do
        if cluster_tls "$v"; then tls="$(node_amqps "$v" "$n") $(node_https "$v" "$n")"; else tls="- -"; fi
        echo "$n $(node_name "$v" "$n") $(node_amqp "$v" "$n") $(node_mgmt "$v" "$n") $(pid_file "$v" "$n") $tls"
      done
      ;;
    kill-node)
      v=$(one_cluster "${2:-}")
      kill_node "$v" "$(one_node "${3:-}")"
      ;;
    start-node)
      v=$(one_cluster "${2:-}")
      n=$(one_node "${3:-}")
      cluster_locked "$v"
      [[ $v == 4.3 ]] && mount43
      restart_node "$v" "$n"
      node_line "$v" "$n"
      ;;
    *) usage ;;
  esac
}

main "$@"
