#!/bin/sh
# Run the peer tools against a simulated node, inside the private mount namespace the caller made for this
# script (`unshare -m --propagation private tests/peer/nsrun.sh ...`); never run it any other way.
#   nsrun.sh SIMROOT OUTDIR TOKEN DAMO_HOME
# Binds SIMROOT/sys read-only over /sys and a private tmpfs /dev holding SIMROOT/dev's nodes (what devtmpfs and
# udev would have made), proves the bind by reading the marker SIMROOT/sys/.nodeagent-peer-marker (== TOKEN)
# through /sys, and only then runs each tool: OUTDIR/<name>.out, .err and .rc.
# Tools come from NODEAGENT_PEER_BIN/NODEAGENT_PEER_LIB (scripts/peer-tools.sh) and NODEAGENT_PEER_DAMO.
set -eu
sim=$1 out=$2 token=$3 damo_home=$4
case "$(readlink /proc/self/ns/mnt)" in
    "$NODEAGENT_PEER_HOST_MNTNS") echo "nsrun: still in the host's mount namespace; refusing" >&2; exit 97 ;;
esac
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
