#!/usr/bin/env bash
# Make sure the local RabbitMQ brokers the tests need are installed and running.
#
#   3.10  Debian stable's rabbitmq-server on the host       AMQP 5672  management 15672  prometheus 15772
#                                                           AMQPS 5671 HTTPS management 15671
#   4.3   Debian unstable's rabbitmq-server in a chroot      AMQP 5673  management 15673  prometheus 15773
#                                                           AMQPS 5674 HTTPS management 15674
#         (node rabbit43@localhost, epmd 4370, dist 25673, chroot at $RABBIT43_ROOT)
#
# TLS: a test CA, a server certificate for localhost and 127.0.0.1 and a client certificate (CN
# rabbitmq-retry-tls-client, for SASL EXTERNAL) are made with openssl in $TLS_DIR at set-up, once; the keys never
# leave this machine. Clients verify with $TLS_DIR/ca.pem; the brokers ask for a client certificate on AMQPS and
# HTTPS alike and accept a connection without one (fail_if_no_peer_cert = false), so the plain-password login works
# over TLS too, and a client certificate that is presented is verified (the management listener asks only with
# management.ssl.verify = verify_peer).
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
TLS_DIR=${RABBITMQ_TLS_DIR:-/var/lib/rabbitmq-retry/tls}
TLS_CLIENT_CN=rabbitmq-retry-tls-client
# Management for the tests and the tools; the shovel and its HTTP API for migrations (make doctor checks them);
# login by client certificate (SASL EXTERNAL) over TLS; rabbitmq_prometheus for the alerts (docs/alerts.md), on a
# port of each node's own: its default, 15692, is the management port of the 4.3 cluster's first node
# (scripts/clusters.sh).
PLUGINS="rabbitmq_management rabbitmq_shovel rabbitmq_shovel_management rabbitmq_auth_mechanism_ssl rabbitmq_prometheus"
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
amqps_port() { case $1 in 3.10) echo 5671 ;; 4.3) echo 5674 ;; esac; }
https_port() { case $1 in 3.10) echo 15671 ;; 4.3) echo 15674 ;; esac; }
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

# The TLS listeners answer: AMQPS open, and the HTTPS management API verified with the test CA.
tls_answering() {
  amqp_open "$(amqps_port "$1")" &&
    curl -sf -m 5 --cacert "$TLS_DIR/ca.pem" -u guest:guest "https://127.0.0.1:$(https_port "$1")/api/overview" >/dev/null
}

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
  if [[ $state == up ]]; then
    if tls_answering "$b"; then state="up, TLS up"; else state="up, TLS down"; fi
  fi
  printf '%-5s rabbitmq %-8s amqp 127.0.0.1:%-5s management http://127.0.0.1:%-5s amqps %-5s https %-5s %s\n' \
    "$b" "${version:--}" "$(amqp_port "$b")" "$(mgmt_port "$b")" "$(amqps_port "$b")" "$(https_port "$b")" "$state"
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

# ---------------------------------------------------------------- TLS

# Makes the test CA, the server certificate (localhost, 127.0.0.1) and the client certificate in $TLS_DIR, once:
# kept while all of them are there and valid for another day, so brokers and tests keep trusting the same CA.
tls_material() {
  local d=$TLS_DIR
  if [[ -f $d/ca.pem && -f $d/server.pem && -f $d/server.key && -f $d/client.pem && -f $d/client.key ]] &&
    openssl x509 -checkend 86400 -noout -in "$d/server.pem" >/dev/null &&
    openssl x509 -checkend 86400 -noout -in "$d/client.pem" >/dev/null; then
    return 0
  fi
  need_cmd openssl
  log "making a test CA, server and client certificates in $d"
  mkdir -p "$d"
  chmod 755 "$d"
  (
    cd "$d"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=rabbitmq-retry test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile server.ext \
      -out server.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$TLS_CLIENT_CN" -keyout client.key -out client.csr 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -extfile client.ext \
      -out client.pem 2>/dev/null
    rm -f server.csr client.csr server.ext client.ext
    chmod 644 ca.pem server.pem client.pem
  )
}

# Copies the CA, the server certificate and its key into a broker's config directory, readable by its user.
tls_install() { # dir owner-command...
  local dir=$1 f
  shift
  mkdir -p "$dir"
  for f in ca.pem server.pem server.key; do
    cmp -s "$TLS_DIR/$f" "$dir/$f" || install -m 0640 "$TLS_DIR/$f" "$dir/$f"
  done
  "$@"
}

# The rabbitmq.conf lines of the TLS listeners (cert_dir is the path the broker sees).
tls_conf() { # amqps-port https-port cert-dir mechanisms...
  local amqps=$1 https=$2 dir=$3 i=1 m
  shift 3
  printf '%s\n' "listeners.ssl.default = 127.0.0.1:$amqps" \
    "ssl_options.cacertfile = $dir/ca.pem" "ssl_options.certfile = $dir/server.pem" \
    "ssl_options.keyfile = $dir/server.key" "ssl_options.verify = verify_peer" \
    "ssl_options.fail_if_no_peer_cert = false" "ssl_cert_login_from = common_name" \
    "management.ssl.ip = 127.0.0.1" "management.ssl.port = $https" "management.ssl.cacertfile = $dir/ca.pem" \
    "management.ssl.certfile = $dir/server.pem" "management.ssl.keyfile = $dir/server.key" \
    "management.ssl.verify = verify_peer" "management.ssl.fail_if_no_peer_cert = false"
  for m in "$@"; do
    printf 'auth_mechanisms.%d = %s\n' "$i" "$m"
    i=$((i + 1))
  done
}

TLS_BEGIN="# --- TLS listeners (scripts/brokers.sh) ---"
TLS_END="# --- end of TLS listeners ---"

# Writes `content` as a rabbitmq.conf's own lines and keeps its TLS block (`tls_block`) as it is, in the layout
# `tls_block` writes: rewriting the file without it would drop the TLS listeners, and `ensure` would then restart
# the broker every time to put them back.
conf_keeping_tls() { # file content
  local file=$1 content=$2 current="" block
  [[ -f $file ]] && current=$(<"$file")
  block=$(awk -v b="$TLS_BEGIN" -v e="$TLS_END" '$0==b{on=1} on{print} $0==e{on=0}' <<<"$current")
  write_if_changed "$file" "$content${block:+
$block}"
}

# Puts `content` between the TLS markers of a rabbitmq.conf, replacing what was there and keeping every other
# line; returns 1 when the file already had exactly this.
tls_block() { # file content
  local file=$1 content=$2 current=""
  [[ -f $file ]] && current=$(<"$file")
  local kept
  kept=$(awk -v b="$TLS_BEGIN" -v e="$TLS_END" '$0==b{skip=1;next} $0==e{skip=0;next} !skip' <<<"$current")
  local wanted
  wanted=$(printf '%s\n%s\n%s\n%s' "$kept" "$TLS_BEGIN" "$content" "$TLS_END" | sed '/./,$!d')
  [[ $current == "$wanted" ]] && return 1
  printf '%s\n' "$wanted" >"$file"
}

# ---------------------------------------------------------------- 3.10 on the host

# TLS beside the plain listeners; 0 when rabbitmq.conf changed (the node must restart to listen).
# With a management.ssl listener RabbitMQ starts the plain one only when it is configured too: 15672 stays.
tls310() {
  tls_material
  tls_install /etc/rabbitmq/tls chown -R rabbitmq:rabbitmq /etc/rabbitmq/tls
  tls_block /etc/rabbitmq/rabbitmq.conf "management.tcp.port = $(mgmt_port 3.10)
$(tls_conf "$(amqps_port 3.10)" "$(https_port 3.10)" /etc/rabbitmq/tls PLAIN AMQPLAIN EXTERNAL)"
}

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
    # Also when the listeners are written but do not answer: a node started before they were (seen on a fresh
    # machine, whose own 3.10 service was running) has never read them.
    if tls310 || ! tls_answering 3.10; then
      log "RabbitMQ 3.10: restarting once for the TLS listeners (plain ports unchanged)"
      stop310
      start310
      wait_up 3.10
    fi
    tls_answering 3.10 || log "warning: RabbitMQ 3.10's TLS listeners do not answer; see $(log_hint 3.10)"
    return 0
  fi
  need_cmd curl
  install310
  config310
  tls310 || true
  # A node already running (the machine's own service, without the management plugin: not `answering`) started
  # before the TLS listeners were written: start it again so that it reads them.
  stop310
  start310
  wait_up 3.10
  tls_answering 3.10 || log "warning: RabbitMQ 3.10's TLS listeners do not answer; see $(log_hint 3.10)"
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
  conf_keeping_tls "$ROOT43/etc/rabbitmq/rabbitmq.conf" "listeners.tcp.default = 127.0.0.1:5673
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

# TLS beside the plain listeners; 0 when rabbitmq.conf changed (the node must restart to listen). 4.x offers
# ANONYMOUS by default too: kept in the list.
tls43() {
  tls_material
  tls_install "$ROOT43/etc/rabbitmq/tls" in43 chown -R rabbitmq:rabbitmq /etc/rabbitmq/tls
  tls_block "$ROOT43/etc/rabbitmq/rabbitmq.conf" "$(tls_conf "$(amqps_port 4.3)" "$(https_port 4.3)" \
    /etc/rabbitmq/tls PLAIN AMQPLAIN EXTERNAL ANONYMOUS)"
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
    if tls43; then
      log "RabbitMQ 4.3: restarting once for the TLS listeners (plain ports unchanged)"
      stop43
      ensure43
    fi
    tls_answering 4.3 || log "warning: RabbitMQ 4.3's TLS listeners do not answer; see $(log_hint 4.3)"
    return 0
  fi
  need_cmd curl
  build43
  config43
  tls43 || true
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
