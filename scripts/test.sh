#!/bin/sh
# `make test`'s pytest, in two passes inside the read-only /sys,/proc namespace (scripts/readonly-kernel-ns.sh):
#   1. everything but the real-kernel tier, on every core (pytest-xdist, one test file per worker: a file's
#      module fixtures stay in one process);
#   2. the real-kernel tier alone, one guest at a time: each QEMU/TCG guest runs two vCPUs, which want the two
#      cores to themselves (its benchmarks and timeouts assume so).
#   scripts/test.sh PYTHON [PYTEST ARGS...]
# A pass that selects no test (pytest's exit 5, e.g. PYTEST_ARGS naming unit tests only) is not a failure unless
# neither pass selected any. Prints the 15 slowest tests of each pass: CI's budget is 40 minutes.
set -u
here=$(dirname "$0")
py=$1
shift
"$here/readonly-kernel-ns.sh" "$py" -m pytest -m 'not realkernel' -n "${NODEAGENT_TEST_WORKERS:-auto}" \
    --dist loadfile --durations=15 "$@"
rest=$?
"$here/readonly-kernel-ns.sh" "$py" -m pytest -m realkernel --durations=15 "$@"
rk=$?
for rc in $rest $rk; do
    case $rc in 0 | 5) ;; *) exit "$rc" ;; esac
done
[ "$rest" = 5 ] && [ "$rk" = 5 ] && exit 5
exit 0
