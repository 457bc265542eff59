#!/bin/sh
# Run the peer tools against a simulated node, inside the private mount namespace the caller made for this
# script (`unshare -m --propagation private tests/peer/nsrun.sh ...`); never run it any other way.
#   nsrun.sh SIMROOT OUTDIR TOKEN DAMO_HOME
# Binds SIMROOT/sys read-only over /sys and a private tmpfs /dev holding SIMROOT/dev's nodes (what devtmpfs and
# udev would have made), proves the bind by reading the marker SIMROOT/sys/.nodeagent-peer-marker (== TOKEN)
# through /sys, and only then runs each tool: OUTDIR/<name>.out, .err and .rc.
# Last, damo's statistics report (which writes update_schemes_stats to each running kdamond's state first) runs
# with /sys rebound to simfs.py: the same simulated tree served by FUSE, each write a store of the simulator's
# kernel; the marker is read (and found read-only) through it again first.
# Tools come from NODEAGENT_PEER_BIN/NODEAGENT_PEER_LIB (scripts/peer-tools.sh) and NODEAGENT_PEER_DAMO; simfs.py
# runs with NODEAGENT_PEER_PYTHON (a python that imports nodeagent_sim), NODEAGENT_PEER_FUSE_PY (mfusepy) and
# NODEAGENT_PEER_FUSE_LIB (libfuse3).
set -eu
sim=$1 out=$2 token=$3 damo_home=$4
case "$(readlink /proc/self/ns/mnt)" in
    "$NODEAGENT_PEER_HOST_MNTNS") echo "nsrun: still in the host's mount namespace; refusing" >&2; exit 97 ;;
esac
# simfs starts first (its python takes a second to load, while the other tools run) and mounts aside: nothing
# reaches it until it is bound over /sys for damo. The private /dev below gets a /dev/fuse node for it.
simfs=$(mktemp -d /tmp/nodeagent-peer-simfs.XXXXXX)
simfs_log=$(mktemp /tmp/nodeagent-peer-simfs.XXXXXX.log)
PYTHONPATH="$NODEAGENT_PEER_FUSE_PY" FUSE_LIBRARY_PATH="$NODEAGENT_PEER_FUSE_LIB" \
    "$NODEAGENT_PEER_PYTHON" "$(dirname "$0")/simfs.py" "$sim" "$simfs" 2>"$simfs_log" &
simfs_pid=$! simfs_bound=
stop_simfs() {
    if [ -n "$simfs_bound" ]; then umount /sys; fi  # simfs only: the read-only bind under it stays
    umount "$simfs" 2>/dev/null || kill "$simfs_pid" 2>/dev/null || true
    wait "$simfs_pid" 2>/dev/null || true
    rmdir "$simfs" 2>/dev/null || true
    rm -f "$simfs_log"
}
trap stop_simfs EXIT
mount --bind "$sim/sys" /sys
mount -o remount,bind,ro /sys
# The private /dev is made aside (a tmpfs in a directory of our own under /tmp), then moved over /dev; /dev/shm
# is carried into it (the test suite keeps simulated roots and this run's OUTDIR there).
newdev=$(mktemp -d /tmp/nodeagent-peer-dev.XXXXXX)
mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$newdev"
if [ -d "$sim/dev" ]; then
    cp -a "$sim/dev/." "$newdev/"
fi
[ -e "$newdev/null" ] || mknod -m 0666 "$newdev/null" c 1 3
[ -e "$newdev/fuse" ] || mknod -m 0600 "$newdev/fuse" c 10 229
mkdir -p "$newdev/shm"
mount --bind /dev/shm "$newdev/shm"
mount --move "$newdev" /dev
rmdir "$newdev"
if [ "$(cat /sys/.nodeagent-peer-marker 2>/dev/null)" != "$token" ]; then
    echo "nsrun: /sys is not the simulated tree (marker missing); refusing to run any tool" >&2
    exit 98
fi
if [ -w /sys/.nodeagent-peer-marker ]; then
    echo "nsrun: the simulated /sys is writable; refusing" >&2
    exit 99
fi
run() {
    name=$1
    shift
    rc=0
    "$@" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
    echo "$rc" >"$out/$name.rc"
}
export LD_LIBRARY_PATH="$NODEAGENT_PEER_LIB"
bin=$NODEAGENT_PEER_BIN
run daxctl "$bin/daxctl" list -DRMi
run cxl "$bin/cxl" list -MDRETi
run cxl-u "$bin/cxl" list -MDRETiu
run ndctl "$bin/ndctl" list -RNDi
unset LD_LIBRARY_PATH
run lsmem-summary lsmem --summary=only --bytes
run lsmem lsmem --json --bytes -o RANGE,SIZE,STATE,REMOVABLE,BLOCK,NODE,ZONES
run damo env HOME="$damo_home" "$NODEAGENT_PEER_DAMO" report damon --damon_params --format json --raw
# damo's statistics: its update_schemes_stats reaches the simulator's kernel through simfs.
i=0
until mountpoint -q "$simfs"; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$simfs_pid" 2>/dev/null; then
        echo "nsrun: simfs did not come up: $(tail -n 3 "$simfs_log")" >&2
        exit 96
    fi
    sleep 0.1
done
mount --bind "$simfs" /sys
simfs_bound=1
if [ "$(cat /sys/.nodeagent-peer-marker 2>/dev/null)" != "$token" ] || [ -w /sys/.nodeagent-peer-marker ]; then
    echo "nsrun: /sys is not the simulated tree served by simfs; refusing to run damo" >&2
    exit 98
fi
run damo-stats env HOME="$damo_home" "$NODEAGENT_PEER_DAMO" report damon --damos_stats --format json --raw
cp "$simfs_log" "$out/simfs.log"
