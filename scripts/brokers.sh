#!/usr/bin/env bash
# Make sure the local RabbitMQ brokers the tests need are installed and running.
#
#   3.10  Debian stable's rabbitmq-server on the host       AMQP 5672  management 15672  prometheus 15772
#   4.3   Debian unstable's rabbitmq-server in a chroot      AMQP 5673  management 15673  prometheus 15773
#         (node rabbit43@localhost, epmd 4370, dist 25673, chroot at $RABBIT43_ROOT)
#
# Usage:
#   scripts/brokers.sh ensure [3.10|4.3|all]   install if missing, start if down, enable the plugins, wait, print status
#   scripts/brokers.sh restart 3.10|4.3        stop, start, wait until AMQP and management answer
#   scripts/brokers.sh status                  one line per broker
#   scripts/brokers.sh stop 3.10|4.3
#
# Needs root. Idempotent: when a broker already answers, `ensure` only checks it and enables the plugins it
# lacks (online, without a restart).
set -euo pipefail

ROOT43=${RABBIT43_ROOT:-/var/lib/rabbitmq-retry/sid-rabbit43}
# Written last by the build, so a build that was interrupted is thrown away and redone.
MARKER43=$ROOT43/.rabbitmq-retry-built
# Beside the chroot, not in it: it must survive the removal of an unfinished build.
BUILD_LOG43=$ROOT43.build.log
NODE43=rabbit43@localhost
EPMD43=4370
MIRROR=http://deb.debian.org/debian
WAIT_SECS=${BROKERS_WAIT_SECS:-120}
LOCK=/run/lock/rabbitmq-retry-brokers.lock
# Management for the tests and the tools; the shovel and its HTTP API for migrations (make doctor checks them);
# rabbitmq_prometheus for the alerts (docs/alerts.md), on a port of each node's own: its default, 15692, is the
# management port of the 4.3 cluster's first node (scripts/clusters.sh).
PLUGINS="rabbitmq_management rabbitmq_shovel rabbitmq_shovel_management rabbitmq_prometheus"
# ERL_EPMD_PORT belongs to the chroot's node only; a caller exporting it would make the
# host's CLI tools look for their node in the wrong epmd.
unset ERL_EPMD_PORT

log() { printf 'brokers: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  sed -n 's/^#   \(scripts\/brokers\.sh.*\)/  \1/p' "$0" >&2
  exit 2
}

amqp_port() { case $1 in 3.10) echo 5672 ;; 4.3) echo 5673 ;; esac; }
mgmt_port() { case $1 in 3.10) echo 15672 ;; 4.3) echo 15673 ;; esac; }
prometheus_port() { case $1 in 3.10) echo 15772 ;; 4.3) echo 15773 ;; esac; }

log_hint() {
  case $1 in
    3.10) echo "/var/log/rabbitmq/ (rabbit@<host>.log, and startup.out from this script)" ;;
    4.3) echo "$ROOT43/var/log/rabbitmq/$NODE43.log (and startup.out beside it)" ;;
  esac
}

# ---------------------------------------------------------------- probes

amqp_open() { timeout 3 bash -c ": >/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# Prints /api/overview, fails when the management API does not answer.
overview() { curl -sf -m 5 -u guest:guest "http://127.0.0.1:$(mgmt_port "$1")/api/overview"; }

json_str() { grep -o "\"$1\":\"[^\"]*\"" | head -n1 | cut -d'"' -f4; }

answering() { amqp_open "$(amqp_port "$1")" && overview "$1" >/dev/null; }

node_ping() {
  case $1 in
    3.10) timeout 20 rabbitmqctl -q ping >/dev/null 2>&1 ;;
    # timeout inside the chroot: it cannot run a shell function.
    4.3) [[ -f $MARKER43 ]] && in43 timeout 20 rabbitmqctl -n "$NODE43" -q ping >/dev/null 2>&1 ;;
  esac
}

status_line() {
  local b=$1 json version="-" state=down
  if json=$(overview "$b"); then
    version=$(json_str rabbitmq_version <<<"$json")
    state="down (management answers, AMQP closed)"
    if amqp_open "$(amqp_port "$b")"; then state=up; fi
  elif amqp_open "$(amqp_port "$b")"; then
    state="down (AMQP open, management API not answering)"
  fi
  printf '%-5s rabbitmq %-8s amqp 127.0.0.1:%-5s management http://127.0.0.1:%-5s %s\n' \
    "$b" "${version:--}" "$(amqp_port "$b")" "$(mgmt_port "$b")" "$state"
}

# ---------------------------------------------------------------- helpers

# The plugins of $PLUGINS that are not in an enabled_plugins file ("[a,b]."), space-separated; empty when all are.
plugins_missing() { # file
  local p missing=()
  for p in $PLUGINS; do
    grep -Eq "[[,[:space:]]${p}[],[:space:]]" "$1" 2>/dev/null || missing+=("$p")
  done
  echo "${missing[*]}"
}

# The Erlang term that gives rabbitmq_prometheus its listener (what `prometheus.tcp.ip`/`.port` in rabbitmq.conf
# set at boot), for a node that booted before its rabbitmq.conf had them: set in the running node before the
# plugin is enabled online, so that it never starts on its default port.
prometheus_env() { # port
  echo "application:set_env(rabbitmq_prometheus, tcp_config, [{ip, \"127.0.0.1\"}, {port, $1}], [{persistent, true}])."
}

APT_UPDATED=0
apt_install() {
  if ((!APT_UPDATED)); then
    apt-get update
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}

need_cmd() { command -v "$1" >/dev/null || apt_install "${2:-$1}"; }

# Runs a noisy build step with its output in the build log; shows the tail if it fails.
logged() {
  printf '\n+ %s\n' "$*" >>"$BUILD_LOG43"
  if ! "$@" >>"$BUILD_LOG43" 2>&1 </dev/null; then
    tail -n 25 "$BUILD_LOG43" >&2
    die "build step failed: $*; full log in $BUILD_LOG43"
  fi
}

write_if_changed() { # file content
  [[ -f $1 && $(<"$1") == "$2" ]] && return 0
  mkdir -p "$(dirname "$1")"
  printf '%s\n' "$2" >"$1"
}

# Stops package scripts from starting services: in a chroot the 4.3 node would come up on
# the host's default ports and epmd, and on a host without systemd the init script may fail.
no_autostart() { write_if_changed "$1/usr/sbin/policy-rc.d" $'#!/bin/sh\nexit 101'; chmod 755 "$1/usr/sbin/policy-rc.d"; }

# Starts a daemon with its output in a file (callers capturing ours must not be held open by
# it) and without fd 9: a detached beam would otherwise hold our lock for as long as it runs.
daemon_start() { # log command...
  local out=$1
  shift
  "$@" >>"$out" 2>&1 </dev/null 9>&-
}

wait_up() { # broker
  local b=$1 start=$SECONDS
  until answering "$b"; do
    # A node that never registered with epmd crashed at boot: do not sit out the whole wait.
    if ((SECONDS - start > 30)) && ! node_ping "$b"; then
      die "RabbitMQ $b node is not running (crashed while booting?); see $(log_hint "$b")"
    fi
    if ((SECONDS - start >= WAIT_SECS)); then
      die "RabbitMQ $b did not answer on AMQP $(amqp_port "$b") and management $(mgmt_port "$b") within ${WAIT_SECS}s; see $(log_hint "$b")"
    fi
    sleep 1
  done
}

wait_down() { # broker
  local b=$1 start=$SECONDS
  while node_ping "$b" || amqp_open "$(amqp_port "$b")"; do
    ((SECONDS - start < WAIT_SECS)) || die "RabbitMQ $b did not stop within ${WAIT_SECS}s; see $(log_hint "$b")"
    sleep 1
  done
}

# ---------------------------------------------------------------- 3.10 on the host

host_installed() { dpkg-query -W -f='${Status}' rabbitmq-server 2>/dev/null | grep -q 'install ok installed'; }

install310() {
  host_installed && return 0
  log "installing rabbitmq-server (3.10) from Debian"
  local made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    no_autostart ""
    made_policy=1
  fi
  apt_install rabbitmq-server || { ((made_policy)) && rm -f /usr/sbin/policy-rc.d; exit 1; }
  ((made_policy)) && rm -f /usr/sbin/policy-rc.d
  return 0
}

start310() {
  if ! node_ping 3.10; then
    # No systemd in these containers; this is how the machine itself starts the broker.
    daemon_start /var/log/rabbitmq/startup.out rabbitmq-server -detached
    local start=$SECONDS
    until node_ping 3.10; do
      ((SECONDS - start < WAIT_SECS)) || die "RabbitMQ 3.10 node did not start; see $(log_hint 3.10)"
      sleep 1
    done
  fi
  timeout "$WAIT_SECS" rabbitmqctl -q await_startup >/dev/null
  plugins310
}

# Lines of the host's rabbitmq.conf this script needs (the rest of the file is the machine's): the Prometheus
# listener on loopback and its own port.
config310() {
  local line file=/etc/rabbitmq/rabbitmq.conf
  for line in "prometheus.tcp.ip = 127.0.0.1" "prometheus.tcp.port = $(prometheus_port 3.10)"; do
    grep -qxF "$line" "$file" 2>/dev/null || printf '%s\n' "$line" >>"$file"
  done
}

plugins310() {
  # Off after a plain package install; enabling them online needs the running node (no restart).
  local missing
  missing=$(plugins_missing /etc/rabbitmq/enabled_plugins)
  [[ -z $missing ]] && return 0
  log "enabling on RabbitMQ 3.10: $missing"
  rabbitmqctl -q eval "$(prometheus_env "$(prometheus_port 3.10)")" >/dev/null
  # shellcheck disable=SC2086 # one argument per plugin
  rabbitmq-plugins -q enable $missing >/dev/null
}

ensure310() {
  if answering 3.10; then
    config310
    plugins310
    return 0
  fi
  need_cmd curl
  install310
  config310
  start310
  wait_up 3.10
}

stop310() {
  host_installed || return 0
  if node_ping 3.10; then
    rabbitmqctl -q stop >/dev/null
  fi
  wait_down 3.10
}

# ---------------------------------------------------------------- 4.3 in a chroot

in43() {
  # A clean environment: the host's RABBITMQ_*/ERL_* variables must not leak into the chroot.
  chroot "$ROOT43" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    ERL_EPMD_PORT=$EPMD43 "$@"
}

ctl43() { in43 rabbitmqctl -n "$NODE43" "$@"; }

mount43() {
  mountpoint -q "$ROOT43/proc" || mount -t proc proc "$ROOT43/proc"
  mountpoint -q "$ROOT43/dev" || mount --bind /dev "$ROOT43/dev"
}

umount43() {
  local m
  for m in dev proc; do
    if mountpoint -q "$ROOT43/$m"; then umount "$ROOT43/$m"; fi
  done
}

config43() {
  # Own ports beside the host's 3.10. Everything listens on loopback only, like the host's
  # broker: with loopback_users = none, guest/guest would otherwise be open to the network.
  write_if_changed "$ROOT43/etc/rabbitmq/rabbitmq.conf" "listeners.tcp.default = 127.0.0.1:5673
management.tcp.ip = 127.0.0.1
management.tcp.port = 15673
prometheus.tcp.ip = 127.0.0.1
prometheus.tcp.port = $(prometheus_port 4.3)
loopback_users = none"
  # The epmd settings here too (rabbitmq-env exports them), so that a hand-typed
  # `chroot $ROOT43 rabbitmqctl ...` also finds rabbit43 and never the host's epmd on 4369.
  write_if_changed "$ROOT43/etc/rabbitmq/rabbitmq-env.conf" "NODENAME=$NODE43
DIST_PORT=25673
ERL_EPMD_PORT=$EPMD43
ERL_EPMD_ADDRESS=127.0.0.1
SERVER_ADDITIONAL_ERL_ARGS=\"-kernel inet_dist_use_interface {127,0,0,1}\""
  # localhost must resolve inside the chroot for the node name; DNS for apt.
  cp /etc/hosts "$ROOT43/etc/hosts"
  cp -L /etc/resolv.conf "$ROOT43/etc/resolv.conf"
}

build43() {
  [[ -f $MARKER43 ]] && return 0
  local start=$SECONDS
  log "building the RabbitMQ 4.3 chroot in $ROOT43 (Debian unstable, about 40 s; log: $BUILD_LOG43)"
  need_cmd debootstrap
  mkdir -p "$(dirname "$ROOT43")"
  : >"$BUILD_LOG43"
  if [[ -e $ROOT43 ]]; then
    log "removing an unfinished build in $ROOT43"
    # Unmount first: rm must never reach the host's /dev through the bind mount.
    umount43
    if mountpoint -q "$ROOT43/dev" || mountpoint -q "$ROOT43/proc"; then
      die "$ROOT43/dev or /proc is still mounted; not removing it"
    fi
    rm -rf --one-file-system "$ROOT43"
  fi
  logged debootstrap --variant=minbase sid "$ROOT43" "$MIRROR"
  no_autostart "$ROOT43"
  config43
  mount43
  # The registry serves Release files past their Valid-Until date.
  logged in43 apt-get -o Acquire::Check-Valid-Until=false update
  logged in43 DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rabbitmq-server
  logged in43 apt-get clean
  # shellcheck disable=SC2086 # one argument per plugin
  logged in43 rabbitmq-plugins --offline enable $PLUGINS
  date -u +%FT%TZ >"$MARKER43"
  # shellcheck disable=SC2016 # ${Version} is dpkg-query's format, not a shell expansion
  log "built $(in43 dpkg-query -W -f='rabbitmq-server ${Version}' rabbitmq-server) in $((SECONDS - start))s"
}

plugins43() { # online|offline
  local missing
  missing=$(plugins_missing "$ROOT43/etc/rabbitmq/enabled_plugins")
  [[ -z $missing ]] && return 0
  log "enabling on RabbitMQ 4.3 ($1): $missing"
  if [[ $1 == online ]]; then
    ctl43 -q eval "$(prometheus_env "$(prometheus_port 4.3)")" >/dev/null
    # shellcheck disable=SC2086 # one argument per plugin
    in43 rabbitmq-plugins -q -n "$NODE43" enable $missing >/dev/null
  else
    # shellcheck disable=SC2086 # one argument per plugin
    in43 rabbitmq-plugins -q --offline enable $missing >/dev/null
  fi
}

ensure43() {
  if answering 4.3; then
    mount43
    config43
    plugins43 online
    return 0
  fi
  need_cmd curl
  build43
  config43
  mount43
  if node_ping 4.3; then
    plugins43 online
  else
    plugins43 offline
    daemon_start "$ROOT43/var/log/rabbitmq/startup.out" in43 rabbitmq-server -detached
  fi
  wait_up 4.3
}

stop43() {
  [[ -f $MARKER43 ]] || return 0
  mount43
  if node_ping 4.3; then
    ctl43 -q stop >/dev/null
  fi
  wait_down 4.3
  # Its epmd too (only the one on port 4370), so nothing of the chroot keeps running and
  # the next start picks up ERL_EPMD_ADDRESS.
  in43 epmd -port "$EPMD43" -kill >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------- main

brokers_of() { # ensure's argument -> broker list
  case ${1:-all} in
    all) echo "3.10 4.3" ;;
    3.10 | 4.3) echo "$1" ;;
    *) usage ;;
  esac
}

one_broker() { case ${1:-} in 3.10 | 4.3) echo "$1" ;; *) usage ;; esac; }

locked() {
  # Tests running in parallel may all call ensure; only one of them should build or start.
  [[ $EUID -eq 0 ]] || die "must run as root"
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -w $((WAIT_SECS * 5)) 9 || die "another brokers.sh holds $LOCK"
}

main() {
  local cmd=${1:-} b
  case $cmd in
    ensure)
      local list
      list=$(brokers_of "${2:-all}")
      locked
      for b in $list; do
        "ensure${b//./}"
        status_line "$b"
      done
      ;;
    restart)
      b=$(one_broker "${2:-}")
      locked
      "stop${b//./}"
      "ensure${b//./}"
      status_line "$b"
      ;;
    stop)
      b=$(one_broker "${2:-}")
      locked
      "stop${b//./}"
      status_line "$b"
      ;;
    status)
      status_line 3.10
      status_line 4.3
      ;;
    *) usage ;;
  esac
}

# scripts/clusters.sh sources this file for its install, chroot and daemon helpers: main runs only when
# the file is executed.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
