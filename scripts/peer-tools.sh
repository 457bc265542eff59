#!/usr/bin/env bash
# Fetch the peer tools the simulator is read by (tests/peer): Debian 12's daxctl, ndctl and cxl 76.1 (packages
# ndctl, daxctl and their libraries, extracted from the .debs, never installed) and damo 3.4.3 in a venv of its own;
# and what serves damo a writable simulated /sys (tests/peer/simfs.py): libfuse3 (extracted likewise) and mfusepy.
# Idempotent: everything is cached under $XDG_CACHE_HOME/nodeagent/tools/peer (else ~/.cache/...) and fetched once.
#   scripts/peer-tools.sh          fetch what is missing; print the environment the tests read (KEY=VALUE lines)
# The tests run these tools only inside a private mount namespace with a simulated /sys bind-mounted over /sys:
# never run them on this machine's own kernel.
set -euo pipefail
dir="${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/tools/peer"
root="$dir/root"
lib="$root/usr/lib/x86_64-linux-gnu"
damo_version=3.4.3
mfusepy_version=3.1.1
# ndctl/daxctl/cxl 76.1 and the libraries they need that a minimal Debian 12 lacks (libkmod2, libudev1,
# libuuid1, libjson-c5 and libkeyutils1 come with the base system).
debs=(ndctl daxctl libndctl6 libdaxctl1 libcxl1 libiniparser1 libtraceevent1 libtracefs1 libfuse3-3)
mkdir -p "$dir/debs"
if [ ! -x "$root/usr/bin/daxctl" ] || [ ! -x "$root/usr/bin/cxl" ] || [ ! -e "$lib/libtracefs.so.1" ] \
        || [ ! -e "$root/lib/x86_64-linux-gnu/libfuse3.so.3" ]; then
    (cd "$dir/debs" && { apt-get download "${debs[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq && apt-get download "${debs[@]}" >/dev/null; }; })
    rm -rf "$root.tmp" && mkdir -p "$root.tmp"
    for p in "${debs[@]}"; do
        dpkg-deb -x "$(ls "$dir/debs/${p}"_*.deb | head -n1)" "$root.tmp"
    done
    rm -rf "$root" && mv "$root.tmp" "$root"
fi
if [ ! -x "$dir/damo/bin/damo" ] || ! ls -d "$dir"/damo/lib/python3*/site-packages/damo-"$damo_version".dist-info >/dev/null 2>&1; then
    rm -rf "$dir/damo"
    python3 -m venv "$dir/damo"
    "$dir/damo/bin/pip" install -q "damo==$damo_version" >/dev/null 2>&1 || "$dir/damo/bin/pip" install "damo==$damo_version"
fi
# mfusepy (ctypes bindings, pure Python) for the python that runs the tests: a directory put on its PYTHONPATH.
if ! ls -d "$dir/fuse-py/mfusepy-$mfusepy_version.dist-info" >/dev/null 2>&1; then
    rm -rf "$dir/fuse-py"
    "$dir/damo/bin/pip" install -q --target "$dir/fuse-py" "mfusepy==$mfusepy_version" >/dev/null 2>&1 \
        || "$dir/damo/bin/pip" install --target "$dir/fuse-py" "mfusepy==$mfusepy_version"
fi
echo "NODEAGENT_PEER_BIN=$root/usr/bin"
echo "NODEAGENT_PEER_LIB=$lib"
echo "NODEAGENT_PEER_DAMO=$dir/damo/bin/damo"
echo "NODEAGENT_PEER_FUSE_PY=$dir/fuse-py"
echo "NODEAGENT_PEER_FUSE_LIB=$root/lib/x86_64-linux-gnu/libfuse3.so.3"
