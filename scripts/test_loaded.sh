#!/usr/bin/env bash
# scripts/test_loaded.sh N CMD...: run CMD (the test suite) beside N busy-loop processes at normal priority, then
# kill them (trap: also on Ctrl-C or failure). Prints the load average before, during and after, and the wall and
# CPU time of CMD's process tree. Exit status: CMD's. `make test-loaded` runs it with the suite (issue #29).
# With MEDAGENTGYM_TEST_COSTS=DIR (tests/_costs.py), also the per-worker CPU, idle tail and costliest modules (CMD's first word is the
# suite's python).
set -u
n=$1; shift
burners=()
stop() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null; done; wait "${burners[@]}" 2>/dev/null; }
trap stop EXIT
trap 'exit 130' INT TERM
echo "test-loaded: $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg); starting $n CPU burners"
for _ in $(seq "$n"); do python3 -c 'while True: pass' & burners+=("$!"); done
sleep 60  # let the 1-minute load average climb before the suite starts
echo "test-loaded: load at start: $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%FT%TZ))"
(while sleep 60; do echo "test-loaded: load $(cut -d' ' -f1-3 /proc/loadavg)"; done) & burners+=("$!")
start=$(date +%s)
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f "test-loaded: CPU of the suite's process tree: %U s user + %S s sys" "$@"
else
  "$@"
fi
status=$?
echo "test-loaded: exit $status, wall $(( $(date +%s) - start )) s, load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${MEDAGENTGYM_TEST_COSTS:-}" ]; then "$1" tests/_costs.py "$MEDAGENTGYM_TEST_COSTS"; fi
exit $status
