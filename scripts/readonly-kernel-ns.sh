#!/bin/sh
# Run a command with this machine's /sys and /proc (and every mount below them) read-only, inside a private
# mount namespace: nothing changes outside it. Used by `make test` so that no child process of the test suite
# (which the Python audit-hook guard cannot see) can write to the real kernel.
#   scripts/readonly-kernel-ns.sh CMD [ARGS...]
# When not root, or when unshare is not allowed, it says so and runs CMD as it is.
set -eu
if [ "${NODEAGENT_IN_RO_NS:-}" = 1 ]; then
    exec "$@"
fi
if [ "$(id -u)" != 0 ]; then
    echo "readonly-kernel-ns: not root: running without the read-only /sys,/proc namespace" >&2
    exec "$@"
fi
if ! unshare -m --propagation private true 2>/dev/null; then
    echo "readonly-kernel-ns: unshare -m is not allowed here: running without the read-only namespace" >&2
    exec "$@"
fi
export NODEAGENT_IN_RO_NS=1
exec unshare -m --propagation private sh -c '
    set -e
    for m in $(awk "\$5 ~ \"^/(sys|proc)(/|\$)\" {print \$5}" /proc/self/mountinfo | sort -u); do
        mount -o remount,bind,ro "$m" 2>/dev/null || echo "readonly-kernel-ns: could not make $m read-only" >&2
    done
    # access(2) reports EROFS on a read-only mount: a check that opens nothing for writing.
    if [ -w /proc/sys/kernel/numa_balancing ] || [ -w /sys/kernel/mm ]; then
        echo "readonly-kernel-ns: /proc is still writable; refusing to run" >&2; exit 1
    fi
    echo "readonly-kernel-ns: /sys and /proc are read-only for this run" >&2
    exec "$@"' sh "$@"
