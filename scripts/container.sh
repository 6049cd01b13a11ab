#!/usr/bin/env bash
# container.sh: fairq's image and docker-compose.yml, built and started for real with Debian 12's own
# packages, on a machine that reaches Debian's mirror but no image registry.
#
#   scripts/container.sh test     everything below, then the checks; leaves nothing running (make container-test)
#   scripts/container.sh images   the engine, the base images and the fairq image only (then run compose yourself)
#   scripts/container.sh cluster  the images, then docker-compose.cluster.yml's check alone (part of test)
#
# The engine is docker.io's dockerd (20.10) with docker-compose (1.29.2), the
# reference because it runs healthchecks and honours depends_on conditions
# (podman 4.3 needs runc, lowered ulimits and docker-format builds, and runs no
# healthcheck by itself without systemd: docs/container.md). A dockerd that
# runs already is used and left running; one started here is stopped on exit.
#
# Base images are made offline and cached: debian:bookworm-slim is
# debootstrapped (minbase) from the mirror apt is configured with, trimmed as
# the slim image is, and imported (its tarball kept in $FAIRQ_CONTAINER_CACHE);
# the NATS image is Debian's nats-server on it (scripts/container/nats.Dockerfile).
#
# The test: the fairq image beside NATS (healthy, /metrics and /readyz answer,
# runs as uid 10001, fairq-admin works inside, SIGTERM ends it with exit 0
# before the stop timeout), then docker-compose.yml (the small tenants are
# served while acme floods; `down -v` leaves no container, network or volume),
# then docker-compose.cluster.yml (3 nodes, 3 replicas sharing 16 partitions:
# all served, all partitions owned, a replica killed and its partitions taken),
# then the whole build and the unit tests on a bare bookworm with only what
# scripts/install-deps.sh installs (scripts/container/bookworm.Dockerfile).
# Whatever happens, everything it made is removed on exit but the images.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in test|images|cluster) ;; *) echo "usage: $0 [test|images|cluster]" >&2; exit 2 ;; esac

CACHE=${FAIRQ_CONTAINER_CACHE:-/var/cache/fairq-containers}
DOCKER=/usr/bin/docker            # docker.io's client, whatever else is on PATH
COMPOSE=/usr/bin/docker-compose
IMAGE=fairq:local                 # the name docker-compose.yml builds and runs
NATS_IMAGE=fairq-nats:2.9.10
PROJECT=fairqtest                 # the compose project and the prefix of every name made here
CLUSTER=${PROJECT}c               # docker-compose.cluster.yml's project
CLUSTER_FILE=docker-compose.cluster.yml
STOP_TIMEOUT=15                   # docker stop's grace, as compose's stop_grace_period

t_start=$(date +%s)
say() { printf 'container: [%3ds] %s\n' "$(($(date +%s) - t_start))" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

# ---- packages, as scripts/install-deps.sh installs its own ----
pkgs=(docker.io docker-compose debootstrap curl python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$(id -u)" -eq 0 ] || fail "needs root (dockerd and debootstrap do)"

# ---- cleanup, whatever happens ----
work=$(mktemp -d)
dockerd_pid=""
cleanup() {
  local rc=$?
  set +e
  if [ -S /var/run/docker.sock ] && $DOCKER info >/dev/null 2>&1; then
    FAIRQ_NATS_IMAGE=$NATS_IMAGE $COMPOSE -p "$PROJECT" down -v --remove-orphans >/dev/null 2>&1
    FAIRQ_NATS_IMAGE=$NATS_IMAGE $COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" down -v --remove-orphans >/dev/null 2>&1
    ids=$($DOCKER ps -aq --filter "name=^${PROJECT}")
    [ -n "$ids" ] && $DOCKER rm -f $ids >/dev/null 2>&1
    $DOCKER network ls -q --filter "name=^${PROJECT}" | xargs -r $DOCKER network rm >/dev/null 2>&1
    $DOCKER volume ls -q --filter "name=^${PROJECT}" | xargs -r $DOCKER volume rm >/dev/null 2>&1
    $DOCKER rmi "${PROJECT}-bookworm" >/dev/null 2>&1
    # The previous builds' images, untagged by this one's.
    $DOCKER image prune -f --filter label=org.opencontainers.image.title=fairq >/dev/null 2>&1
  fi
  if [ -n "$dockerd_pid" ]; then
    say "stopping the dockerd started here (pid $dockerd_pid)"
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$dockerd_pid" 2>/dev/null
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the engine ----
if ! $DOCKER info >/dev/null 2>&1; then
  say "starting dockerd"
  dockerd >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 1 300); do
    $DOCKER info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || { cat "$work/dockerd.log" >&2; fail "dockerd exited"; }
    sleep 0.1
  done
  $DOCKER info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log" >&2; fail "dockerd did not answer in 30 s"; }
fi
say "engine: dockerd $($DOCKER version -f '{{.Server.Version}}'), $($COMPOSE version --short)"

# ---- debian:bookworm-slim, offline ----
# The Debian mirror apt uses here: the first deb source of the suite bookworm,
# from sources.list or a deb822 .sources file.
apt_mirror() {
  local f m
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    m=$(awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                          if ($(i + 1) == "bookworm") { print $i; exit } }' "$f")
    [ -n "$m" ] && { echo "$m"; return; }
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    m=$(awk 'BEGIN { RS = ""; FS = "\n" }
             { uri = ""; deb = 0; suite = 0
               for (i = 1; i <= NF; i++) {
                 if ($i ~ /^URIs:/) { split($i, a, " "); uri = a[2] }
                 if ($i ~ /^Types:/ && $i ~ / deb( |$)/) deb = 1
                 if ($i ~ /^Suites:/ && $i ~ / bookworm( |$)/) suite = 1 }
               if (uri != "" && deb && suite) { print uri; exit } }' "$f")
    [ -n "$m" ] && { echo "$m"; return; }
  done
}

# What the official slim image leaves out, and apt's configuration there:
# no docs, man pages or locales (now or from later installs), no package
# lists, and no .deb cache kept by any later apt-get layer.
slim() {
  local d=$1
  cat >"$d/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$d/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$d/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$d/etc/apt/apt.conf.d/docker-autoremove-suggests"
  printf '#!/bin/sh\nexit 101\n' >"$d/usr/sbin/policy-rc.d"
  chmod 755 "$d/usr/sbin/policy-rc.d"
  find "$d/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$d/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$d"/usr/share/{man,groff,info,lintian,linda}/*
  find "$d/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -rf "$d"/var/lib/apt/lists/* "$d"/var/cache/apt/*.bin "$d"/var/cache/apt/archives/*.deb \
         "$d"/var/cache/debconf/*-old "$d"/var/log/*.log "$d"/var/log/apt/* "$d"/tmp/*
}

if ! $DOCKER image inspect debian:bookworm-slim >/dev/null 2>&1; then
  tarball=$CACHE/bookworm-slim.tar
  if [ ! -s "$tarball" ]; then
    mirror=$(apt_mirror)
    [ -n "$mirror" ] || fail "no deb source for bookworm in apt's sources"
    say "debootstrap --variant=minbase bookworm from apt's configured mirror"
    mkdir -p "$CACHE" "$work/root"
    debootstrap --variant=minbase bookworm "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 \
      || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
    slim "$work/root"
    tar --numeric-owner -C "$work/root" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$work/root"
  fi
  say "importing debian:bookworm-slim ($(du -m "$tarball" | cut -f1) MB tarball)"
  $DOCKER import --change 'CMD ["bash"]' "$tarball" debian:bookworm-slim >/dev/null
fi
if ! $DOCKER image inspect "$NATS_IMAGE" >/dev/null 2>&1; then
  say "building $NATS_IMAGE (Debian's nats-server)"
  $DOCKER build -q -t "$NATS_IMAGE" -f scripts/container/nats.Dockerfile scripts/container >/dev/null
fi

# ---- the fairq image, from the Dockerfile (cached layers where nothing changed) ----
# The build stage is tagged too, so that its image is no dangling one for the
# prune on exit to take, and the next build finds its cache.
say "docker build -t $IMAGE ."
{ $DOCKER build --target build -t "${IMAGE%:*}:build" . && $DOCKER build -t "$IMAGE" .; } >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log" >&2; fail "docker build"; }
say "image $IMAGE: $(($($DOCKER image inspect -f '{{.Size}}' "$IMAGE") / 1000000)) MB"
[ "$mode" = images ] && { say "images ready: $IMAGE $NATS_IMAGE debian:bookworm-slim"; exit 0; }

ip_of() { $DOCKER inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

# ---- docker-compose.cluster.yml: 3 nats-server nodes, 3 fairq replicas sharing 16 partitions ----
cluster_check() {
  say "docker-compose -f $CLUSTER_FILE -p $CLUSTER up -d"
  FAIRQ_NATS_IMAGE=$NATS_IMAGE FAIRQ_NATS_PORT=$(scripts/free-port.sh) \
    $COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" up -d --no-build 2>&1 | sed 's/^/  /' >&2
  local reps=(fairq-1 fairq-2 fairq-3) ids=() ips=() r h
  for r in "${reps[@]}"; do ids+=("$($COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" ps -q "$r")"); done
  for i in 0 1 2; do
    h=""
    for _ in $(seq 1 90); do
      h=$($DOCKER inspect -f '{{.State.Health.Status}}' "${ids[$i]}")
      [ "$h" = healthy ] && break
      sleep 1
    done
    [ "$h" = healthy ] || { $DOCKER logs "${ids[$i]}" 2>&1 | tail -20 >&2; fail "${reps[$i]}: $h"; }
    ips+=("$(ip_of "${ids[$i]}")")
  done
  say "ok: the three replicas are healthy"
  # a series summed over the replicas given by index (its tenant's owner has it)
  sum() { # sum NAME TENANT|"" INDEX...
    local n=$1 t=$2 i v=0; shift 2
    for i in "$@"; do
      v=$((v + $(curl -s "http://${ips[$i]}:9464/metrics" |
        awk -v n="$n" -v t="tenant=\"$t\"" '($1 == n || ($1 ~ "^" n "\\{" && index($1, t))) { v = $2 } END { print v + 0 }')))
    done
    echo "$v"
  }
  local served=0 g i a owned
  for _ in $(seq 1 120); do
    g=$(sum fairq_tenant_dispatched_runs_total globex 0 1 2)
    i=$(sum fairq_tenant_dispatched_runs_total initech 0 1 2)
    if [ "$g" = 5 ] && [ "$i" = 5 ]; then served=1; break; fi
    sleep 1
  done
  a=$(sum fairq_tenant_queued_runs acme 0 1 2)
  [ "$served" = 1 ] || { $COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" logs --tail 20 >&2; fail "globex $g, initech $i runs dispatched of 5 each"; }
  say "ok: globex 5/5 and initech 5/5 runs dispatched while acme has $a queued"
  owned=()
  for r in 0 1 2; do owned+=("$(sum fairq_partitions_owned "" "$r")"); done
  [ $((owned[0] + owned[1] + owned[2])) = 16 ] && [ "${owned[0]}" -gt 0 ] && [ "${owned[1]}" -gt 0 ] &&
    [ "${owned[2]}" -gt 0 ] || fail "partitions owned: ${owned[*]} (16 shared by 3 expected)"
  say "ok: the 16 partitions shared ${owned[*]}"
  # kill -9 of a replica: the two left own all 16 again within the lease TTL and a second
  local t0 t1 both=0
  t0=$(date +%s.%N)
  $DOCKER kill -s KILL "${ids[2]}" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(sum fairq_partitions_owned "" 0 1)" = 16 ] && { both=1; break; }
    sleep 0.1
  done
  t1=$(date +%s.%N)
  [ "$both" = 1 ] || fail "the two replicas left own $(sum fairq_partitions_owned "" 0 1) of 16 partitions"
  say "ok: kill -9 of fairq-3: the two left own the 16 partitions $(python3 -c "print(f'{$t1 - $t0:.1f}')") s later (TTL 3 s)"
  $COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" ps >&2
  say "docker-compose -f $CLUSTER_FILE -p $CLUSTER down -v"
  $COMPOSE -f "$CLUSTER_FILE" -p "$CLUSTER" down -v 2>&1 | sed 's/^/  /' >&2
  local left
  left=$( { $DOCKER ps -aq --filter "label=com.docker.compose.project=$CLUSTER"
            $DOCKER network ls -q --filter "label=com.docker.compose.project=$CLUSTER"
            $DOCKER volume ls -q --filter "label=com.docker.compose.project=$CLUSTER"; } | wc -l)
  [ "$left" = 0 ] || fail "down -v left $left containers, networks or volumes"
  say "ok: down -v left no container, network or volume"
}
[ "$mode" = cluster ] && { cluster_check; say "cluster checks passed"; exit 0; }

# ---- 1. the image beside NATS ----
say "the image beside NATS"
net=${PROJECT}_net
$DOCKER network create "$net" >/dev/null
# NATS on the shipped config, as docker-compose.yml runs it: fairq connects as
# its user (config/fairq.yaml), fairq-admin below as the admin.
$DOCKER run -d --name "${PROJECT}_nats" --network "$net" --network-alias nats \
  -v "$PWD/config/nats-server.conf:/etc/nats/nats-server.conf:ro" "$NATS_IMAGE" \
  nats-server -c /etc/nats/nats-server.conf -js -sd /data -m 8222 >/dev/null
$DOCKER run -d --name "${PROJECT}_fairq" --network "$net" \
  -v "$PWD/config/fairq.yaml:/etc/fairq/fairq.yaml:ro" -e FAIRQ_NATS_URL=nats://nats:4222 -e FAIRQ_HTTP_LISTEN=0.0.0.0:9464 \
  --read-only --cap-drop ALL --security-opt no-new-privileges "$IMAGE" >/dev/null
health=""
for _ in $(seq 1 60); do
  health=$($DOCKER inspect -f '{{.State.Health.Status}}' "${PROJECT}_fairq")
  [ "$health" = healthy ] && break
  [ "$($DOCKER inspect -f '{{.State.Running}}' "${PROJECT}_fairq")" = true ] || break
  sleep 1
done
[ "$health" = healthy ] || { $DOCKER logs "${PROJECT}_fairq" 2>&1 | tail -20 >&2; fail "healthcheck: $health"; }
say "ok: the image's HEALTHCHECK passes (status healthy)"
ip=$(ip_of "${PROJECT}_fairq")
metrics=$(curl -sf "http://$ip:9464/metrics") || fail "/metrics"
grep -qx 'fairq_nats_connected 1' <<<"$metrics" || fail "/metrics has no fairq_nats_connected 1"
say "ok: /metrics answers ($(wc -l <<<"$metrics") lines, fairq_nats_connected 1)"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:9464/readyz")
[ "$code" = 200 ] || fail "/readyz answered $code"
say "ok: /readyz answers 200"
pid=$($DOCKER inspect -f '{{.State.Pid}}' "${PROJECT}_fairq")
uid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
comm=$(cat "/proc/$pid/comm")
[ "$comm" = fairq-proxy ] && [ "$uid" = 10001 ] || fail "pid 1 is $comm as uid $uid"
say "ok: fairq-proxy runs as uid $uid (the image's user fairq)"
out=$($DOCKER exec "${PROJECT}_fairq" fairq-admin --nats nats://admin:admin-demo-password@nats:4222 \
  --inbox-prefix _INBOX_admin stats)
# Each key on its own: a JSON object's key order means nothing (the stats
# reply now walks the counters table in its order).
for key in '"leader":true' '"nats_connected":true'; do
  grep -q "$key" <<<"$out" || fail "fairq-admin stats has no $key: $out"
done
say "ok: fairq-admin stats inside: leader, connected to NATS"
t0=$(date +%s.%N)
$DOCKER stop -t "$STOP_TIMEOUT" "${PROJECT}_fairq" >/dev/null
t1=$(date +%s.%N)
exit_code=$($DOCKER inspect -f '{{.State.ExitCode}}' "${PROJECT}_fairq")
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM (137: killed at the ${STOP_TIMEOUT} s timeout)"
say "ok: SIGTERM: exit 0 in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s (timeout ${STOP_TIMEOUT} s)"
$DOCKER rm -f "${PROJECT}_fairq" "${PROJECT}_nats" >/dev/null
$DOCKER network rm "$net" >/dev/null

# ---- 2. docker-compose.yml ----
say "docker-compose -p $PROJECT up -d"
export FAIRQ_NATS_IMAGE=$NATS_IMAGE
export FAIRQ_METRICS_PORT=$(scripts/free-port.sh) FAIRQ_NATS_PORT=$(scripts/free-port.sh)
# Any start order: globex's producer and the worker first, alone, before NATS
# exists (as podman-compose may start them): they fail and are restarted.
$COMPOSE -p "$PROJECT" up -d --no-build --no-deps producer-globex worker 2>&1 | sed 's/^/  /' >&2
$COMPOSE -p "$PROJECT" up -d --no-build 2>&1 | sed 's/^/  /' >&2
fq=$($COMPOSE -p "$PROJECT" ps -q fairq)
metric() { # metric NAME TENANT: the value of the series, 0 if absent
  curl -s "http://127.0.0.1:$FAIRQ_METRICS_PORT/metrics" |
    awk -v n="$1" -v t="tenant=\"$2\"" '$1 ~ "^" n "\\{" && index($1, t) { v = $2 } END { print v + 0 }'
}
served=0
for _ in $(seq 1 90); do
  g=$(metric fairq_tenant_dispatched_runs_total globex)
  i=$(metric fairq_tenant_dispatched_runs_total initech)
  if [ "$g" = 5 ] && [ "$i" = 5 ]; then served=1; break; fi
  sleep 1
done
[ "$served" = 1 ] || { $COMPOSE -p "$PROJECT" logs --tail 20 >&2; fail "globex $g, initech $i runs dispatched of 5 each"; }
say "ok: globex 5/5 and initech 5/5 runs dispatched"
# Served during a flood: the services start in any order, so globex's first
# five may have gone out before acme's producer ran at all. Judge a second
# wave of globex's, sent once acme's flood is queued, from inside the fairq
# container (same image, globex's own user).
a_queued=0
for _ in $(seq 1 60); do
  a_queued=$(metric fairq_tenant_queued_runs acme)
  [ "$a_queued" -gt 0 ] && break
  sleep 1
done
[ "$a_queued" -gt 0 ] || fail "acme never had runs queued: its flood of 900 did not arrive"
$DOCKER exec "$fq" fairq-producer --nats nats://globex:globex-demo-password@nats:4222 \
  --inbox-prefix _INBOX_globex --tenant globex --count 5 --run-id wave2 >/dev/null ||
  fail "globex's second wave could not be sent"
for _ in $(seq 1 60); do
  g=$(metric fairq_tenant_dispatched_runs_total globex)
  [ "$g" -ge 10 ] && break
  sleep 1
done
a_done=$(metric fairq_tenant_dispatched_runs_total acme)
a_queued=$(metric fairq_tenant_queued_runs acme)
[ "$g" -ge 10 ] || fail "globex's second wave: $g of 10 runs dispatched while acme floods"
[ "$a_queued" -gt 0 ] || fail "acme has nothing queued: globex's second wave was not served during acme's flood"
say "ok: globex's second wave of 5 dispatched while acme has $a_queued queued ($a_done dispatched)"
early=$($DOCKER inspect -f '{{.RestartCount}}' "$($COMPOSE -p "$PROJECT" ps -q producer-globex)")
[ "$early" -gt 0 ] || fail "producer-globex never failed: it did not start before NATS"
say "ok: producer-globex, started before NATS, failed $early times, was restarted and served"
[ "$($DOCKER inspect -f '{{.State.Health.Status}}' "$fq")" = healthy ] || fail "the fairq service is not healthy"
pid=$($DOCKER inspect -f '{{.State.Pid}}' "$fq")
say "ok: the fairq service is healthy; fairq-proxy's RSS $(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status") kB, peak $(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status") kB"
$COMPOSE -p "$PROJECT" ps >&2
$DOCKER stats --no-stream --format '{{.Name}} {{.MemUsage}}' | grep "^${PROJECT}_" | sed 's/^/  memory: /' >&2
say "docker-compose -p $PROJECT down -v"
$COMPOSE -p "$PROJECT" down -v 2>&1 | sed 's/^/  /' >&2
left=$( { $DOCKER ps -aq --filter "label=com.docker.compose.project=$PROJECT"
          $DOCKER network ls -q --filter "label=com.docker.compose.project=$PROJECT"
          $DOCKER volume ls -q --filter "label=com.docker.compose.project=$PROJECT"; } | wc -l)
[ "$left" = 0 ] || fail "down -v left $left containers, networks or volumes"
say "ok: down -v left no container, network or volume"

cluster_check

# ---- 3. a bare bookworm with only what install-deps.sh installs: the whole build, the unit tests ----
say "bare bookworm: scripts/install-deps.sh, the whole build, ctest -L unit"
$DOCKER build -t "${PROJECT}-bookworm" -f scripts/container/bookworm.Dockerfile . >"$work/bookworm.log" 2>&1 ||
  { tail -40 "$work/bookworm.log" >&2; fail "the build or the unit tests on a bare bookworm"; }
grep -E 'tests passed|tests failed' "$work/bookworm.log" | sed 's/^/  /' >&2
say "ok: everything builds and the unit tests pass on a bare bookworm"
say "all container checks passed"
