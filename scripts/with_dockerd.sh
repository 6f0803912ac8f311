#!/usr/bin/env bash
# Run one command against a private, throw-away docker engine, then put the host's networking back.
#
#   scripts/with_dockerd.sh COMMAND [ARG...]      (what `make test-docker` does)
#
# * When an engine already answers (`docker info`, honouring DOCKER_HOST), COMMAND simply runs against it:
#   nothing is installed, started or restored.
# * Otherwise, as root: installs docker.io with apt-get when dockerd is missing, snapshots the host's
#   networking (iptables/ip6tables/nft rules, forwarding sysctls, links, addresses, routes), starts dockerd
#   on a private socket with its data under $MEDAGENTGYM_DOCKER_ROOT (default /var/tmp/medagentgym-docker;
#   kept between runs, so images are built once), runs COMMAND with DOCKER_HOST pointing at it, and on exit
#   (also on failure or Ctrl-C) removes its containers, stops dockerd and containerd, restores every item of
#   the snapshot and checks the restoration: a difference makes the script fail even when COMMAND passed.
#
# dockerd starts with --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none:
# sandbox containers use `--network none`, so the engine needs no bridge, NAT or forwarding at all and
# normally changes nothing; the snapshot check proves it rather than assuming it.
# Exit status: COMMAND's; 2 when no engine can be had; 3 when the host's networking could not be restored.
set -uo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: scripts/with_dockerd.sh COMMAND [ARG...]" >&2
    exit 2
fi

if command -v docker >/dev/null 2>&1 && timeout 20 docker info >/dev/null 2>&1; then
    echo "with_dockerd: using the docker engine that is already running" >&2
    "$@"
    exit $?
fi
if [ "$(id -u)" != 0 ]; then
    echo "with_dockerd: no docker engine answers and starting one needs root: start docker yourself" \
         "(e.g. 'sudo systemctl start docker') or run as root" >&2
    exit 2
fi
if ! command -v dockerd >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "with_dockerd: dockerd is missing and there is no apt-get: install Docker Engine, then rerun" >&2
        exit 2
    fi
    echo "with_dockerd: installing docker.io (root, apt-get)" >&2
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; }; then
        echo "with_dockerd: 'apt-get install docker.io' failed; install Docker Engine, then rerun" >&2
        exit 2
    fi
fi

ROOT="${MEDAGENTGYM_DOCKER_ROOT:-/var/tmp/medagentgym-docker}"
STATE="$ROOT/state"
SOCK="$ROOT/docker.sock"
mkdir -p "$ROOT/data" "$ROOT/exec" "$STATE"
chmod 700 "$ROOT"
# One run at a time per folder: a second dockerd on the same data cannot start, and its clean-up would stop
# the first one's containerd. A second run waits for the first (up to 30 minutes).
exec 9>"$ROOT/lock"
if ! flock -n 9; then
    echo "with_dockerd: another run is using $ROOT; waiting for it to finish" >&2
    if ! flock -w 1800 9; then
        echo "with_dockerd: $ROOT stayed busy for 30 minutes; set MEDAGENTGYM_DOCKER_ROOT to another folder" >&2
        exit 2
    fi
fi

SYSCTLS="net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv4.conf.default.forwarding
net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding net.bridge.bridge-nf-call-iptables
net.bridge.bridge-nf-call-ip6tables"

# One text file per part of the host's networking state; `diff -r` of two snapshots is the check.
snapshot() {
    local dir="$1"
    rm -rf "$dir" && mkdir -p "$dir"
    # Rule dumps without counters and without their "# Generated ... on <date>" comment lines.
    if command -v nft >/dev/null 2>&1; then nft list ruleset > "$dir/nft" 2>/dev/null; fi
    local tool
    for tool in iptables-legacy-save ip6tables-legacy-save iptables-save ip6tables-save; do
        if command -v "$tool" >/dev/null 2>&1; then
            "$tool" 2>/dev/null | grep -v '^#' > "$dir/$tool"
        fi
    done
    local key
    for key in $SYSCTLS; do
        printf '%s=%s\n' "$key" "$(sysctl -n "$key" 2>/dev/null || echo absent)"
    done > "$dir/sysctl"
    ip -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort > "$dir/links"
    ip -o addr show | awk '{print $2, $3, $4}' | sort > "$dir/addresses"
    { ip route show table all; ip -6 route show table all; } 2>/dev/null | sort > "$dir/routes"
}

restore() {
    local before="$STATE/before" now="$STATE/now"
    snapshot "$now"
    if [ -f "$before/nft" ] && ! cmp -s "$before/nft" "$now/nft"; then
        echo "with_dockerd: restoring the nftables ruleset" >&2
        { echo "flush ruleset"; cat "$before/nft"; } | nft -f - || true
    fi
    local family
    for family in iptables ip6tables; do
        local saved="$family-legacy-save"
        if [ -f "$before/$saved" ] && ! cmp -s "$before/$saved" "$now/$saved"; then
            echo "with_dockerd: restoring the $family (legacy) rules" >&2
            "$family-legacy-restore" < "$before/$saved" || true
        fi
    done
    local line key value
    while IFS= read -r line; do
        key="${line%%=*}"
        value="${line#*=}"
        if [ "$value" != absent ] && [ "$(sysctl -n "$key" 2>/dev/null)" != "$value" ]; then
            echo "with_dockerd: restoring $key=$value" >&2
            sysctl -qw "$key=$value" || true
        fi
    done < "$before/sysctl"
    local link
    for link in $(comm -13 "$before/links" "$now/links"); do
        echo "with_dockerd: deleting the link $link that dockerd created" >&2
        ip link delete "$link" 2>/dev/null || true
    done
}

DOCKERD_PID=""
stop_engine() {
    local ids
    ids="$(DOCKER_HOST="unix://$SOCK" timeout 30 docker ps -aq 2>/dev/null)"
    if [ -n "$ids" ]; then
        # shellcheck disable=SC2086  # one argument per container id
        DOCKER_HOST="unix://$SOCK" timeout 60 docker rm --force $ids >/dev/null 2>&1 || true
    fi
    if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
        kill -TERM "$DOCKERD_PID"
        for _ in $(seq 1 300); do
            kill -0 "$DOCKERD_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$DOCKERD_PID" 2>/dev/null; then
            echo "with_dockerd: dockerd did not stop in 30 s; killing it" >&2
            kill -KILL "$DOCKERD_PID" 2>/dev/null || true
        fi
    fi
    # containerd and its shims were started for this engine only: they name our directory in their
    # command line. Stop each one that is left, by pid.
    local pid
    for pid in $(pgrep -f -- "$ROOT/" 2>/dev/null); do
        if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q '^\(/usr/bin/\)\?containerd'; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    local mnt
    for mnt in $(awk -v root="$ROOT/" 'index($2, root) == 1 {print $2}' /proc/self/mounts | sort -r); do
        umount -l "$mnt" 2>/dev/null || true
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    stop_engine
    restore
    snapshot "$STATE/after"
    if diff -ru "$STATE/before" "$STATE/after" >&2; then
        echo "with_dockerd: dockerd stopped; the host's networking is as before (checked)" >&2
    else
        echo "with_dockerd: the host's networking differs from before docker started (diff above)" >&2
        [ "$rc" -eq 0 ] && rc=3
    fi
    exit "$rc"
}

snapshot "$STATE/before"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo '{}' > "$ROOT/daemon.json"  # the host's /etc/docker/daemon.json is not ours to follow
driver="${MEDAGENTGYM_DOCKER_STORAGE:-overlay2}"
for attempt in 1 2; do
    dockerd --config-file "$ROOT/daemon.json" --host "unix://$SOCK" --data-root "$ROOT/data" \
        --exec-root "$ROOT/exec" --pidfile "$ROOT/dockerd.pid" --storage-driver "$driver" \
        --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none \
        --log-level warn > "$ROOT/dockerd.log" 2>&1 9>&- &
    DOCKERD_PID=$!
    for _ in $(seq 1 600); do
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then break; fi
        if DOCKER_HOST="unix://$SOCK" timeout 5 docker info >/dev/null 2>&1; then break 2; fi
        sleep 0.1
    done
    echo "with_dockerd: dockerd did not come up with the $driver storage driver:" \
         "$(tail -n 1 "$ROOT/dockerd.log")" >&2
    stop_engine
    [ "$driver" = vfs ] && exit 2
    driver=vfs
done
echo "with_dockerd: dockerd $(dockerd --version | awk '{print $3}' | tr -d ,) is up" \
     "(storage $driver, socket $SOCK, log $ROOT/dockerd.log)" >&2

export DOCKER_HOST="unix://$SOCK"
"$@" 9>&-
