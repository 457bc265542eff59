# The placement benchmark's guest side (bench/placement): runs in a fresh QEMU guest, chrooted into the host's root
# (tests/realkernel/harness.py), as root of the guest. One run: lay out the CXL stand-in, apply one configuration
# before or after the workload filled the fast node, run the workload, report. Lines starting with "PL:" are
# parsed by bench/placement/run.py; everything else is for the reader of a saved console.
#
# Settings (environment): PL_CONFIG (baseline|tpp|damo-mem-tier|nodeagent), PL_START (before|after), PL_DURATION,
# PL_INTERVAL, PL_COLD_MIB, PL_HOT_MIB, PL_SETTLE (seconds the full node runs before an "after" apply),
# PL_WORKLOAD (binary), PL_PYTHON + PL_REPO + PL_PROFILE (nodeagent). With PL_KV_ARGS the workload is the
# moving-window one (kvwindow.c, those are its arguments) and a background loop reports DAMON's per-scheme
# counters (PL:DSTAT, for the counter-based ping-pong estimator beside the page-level figure), a second one the
# hot loop's thread — state, run/wait/blocked times, faults, CPU ticks, kernel stack while blocked (PL:TSTATE) —
# and its competitors' CPU ticks (PL:TCPU), and at the end each kdamond's CPU time (PL:KDCPU).
set -u
NODE=/sys/devices/system/node
MEM=/sys/devices/system/memory
K=/sys/kernel/mm/damon/admin/kdamonds
CG=/sys/fs/cgroup/placement-wl
say() { echo "PL:$*"; }
die() { say "ERROR $*"; exit 1; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# node<N>'s physical range [start, end) from its memory blocks (one range: these nodes are contiguous)
node_range() {
  bs=$(printf '%d' 0x$(cat $MEM/block_size_bytes))
  ids=$(ls -d $NODE/node$1/memory[0-9]* | sed 's/.*memory//' | sort -n)
  first=$(echo "$ids" | head -n1); last=$(echo "$ids" | tail -n1)
  echo "$((first * bs)) $(((last + 1) * bs))"
}

state() {  # what the kernel thinks of each node: free memory and whether kswapd gave up on it
  for n in 0 1 2; do
    free=$(awk '/MemFree/ {print $4}' $NODE/node$n/meminfo)
    unrec=$(awk -v n="$n" '$1 == "Node" && $2 == n"," {on = 1} on && /node_unreclaimable/ {print $2; exit}' \
      /proc/zoneinfo)
    printf ' node%s_free_kb=%s node%s_unreclaimable=%s' "$n" "$free" "$n" "${unrec:-?}"
  done
  echo " numa_balancing=$(cat /proc/sys/kernel/numa_balancing) demotion=$(cat /sys/kernel/mm/numa/demotion_enabled)"
}

online_cxl() {
  echo offline > $MEM/auto_online_blocks
  daxctl reconfigure-device --mode=system-ram dax0.0 >/tmp/daxctl.out 2>&1 ||
    die "daxctl reconfigure-device failed: $(tail -n 3 /tmp/daxctl.out | tr '\n' ' ')"
}

# One kdamond of the damo mem_tier-style recipe (NOTES.md, configuration c): paddr over one node, one migrate
# scheme, quota 256 MiB/s, weights 0/500/500, every min and max written, a page-level `young` filter.
mem_tier_kdamond() {  # index source_node action target_nid nr_min nr_max age_min young_matching
  C=$K/$1/contexts/0
  echo 1 > $K/$1/contexts/nr_contexts
  echo paddr > $C/operations
  echo 5000 > $C/monitoring_attrs/intervals/sample_us
  echo 100000 > $C/monitoring_attrs/intervals/aggr_us
  echo 1000000 > $C/monitoring_attrs/intervals/update_us
  echo 10 > $C/monitoring_attrs/nr_regions/min
  echo 1000 > $C/monitoring_attrs/nr_regions/max
  echo 1 > $C/targets/nr_targets
  echo 1 > $C/targets/0/regions/nr_regions
  set -- "$@" $(node_range $2)
  echo "${9}" > $C/targets/0/regions/0/start
  echo "${10}" > $C/targets/0/regions/0/end
  echo 1 > $C/schemes/nr_schemes
  S=$C/schemes/0
  echo $3 > $S/action
  echo $4 > $S/target_nid
  echo 1000000 > $S/apply_interval_us
  echo 4096 > $S/access_pattern/sz/min
  echo 18446744073709551615 > $S/access_pattern/sz/max
  echo $5 > $S/access_pattern/nr_accesses/min
  echo $6 > $S/access_pattern/nr_accesses/max
  echo $7 > $S/access_pattern/age/min
  echo 4294967295 > $S/access_pattern/age/max
  echo 0 > $S/quotas/ms
  echo 268435456 > $S/quotas/bytes
  echo 1000 > $S/quotas/reset_interval_ms
  echo 0 > $S/quotas/weights/sz_permil
  echo 500 > $S/quotas/weights/nr_accesses_permil
  echo 500 > $S/quotas/weights/age_permil
  echo none > $S/watermarks/metric
  echo 1 > $S/filters/nr_filters
  echo young > $S/filters/0/type
  echo $8 > $S/filters/0/matching
  echo on > $K/$1/state || die "kdamond $1 did not start"
}

apply_config() {
  case "$PL_CONFIG" in
    baseline)
      echo 0 > /proc/sys/kernel/numa_balancing; echo false > /sys/kernel/mm/numa/demotion_enabled ;;
    tpp)
      echo true > /sys/kernel/mm/numa/demotion_enabled; echo 2 > /proc/sys/kernel/numa_balancing ;;
    damo-mem-tier)
      # DAMON alone moves pages: the kernel's own tiering is off. Demote cold node0 pages (no access, age >= 3 s,
      # not young) to node2; promote hot node2 pages (2..20 accesses per 100 ms, young) to node0.
      echo 0 > /proc/sys/kernel/numa_balancing; echo false > /sys/kernel/mm/numa/demotion_enabled
      echo 2 > $K/nr_kdamonds
      mem_tier_kdamond 0 0 migrate_cold 2 0 0 30 Y
      mem_tier_kdamond 1 2 migrate_hot 0 2 20 0 N ;;
    nodeagent)
      ( cd "$PL_REPO" && "$PL_PYTHON" -m nodeagent apply --yes --skip-checks all "$PL_PROFILE" ) >/tmp/apply.out 2>&1
      rc=$?
      sed 's/^/  apply| /' /tmp/apply.out
      say "APPLY-RC $rc"
      # the profile's dest_free schemes follow their destination's free memory: `nodeagent guard` re-plans them
      # every second, as nodeagent-guard.service does on a node (it idles where no scheme has dest_free)
      rm -f /tmp/guard.pid
      ( cd "$PL_REPO" && sh -c 'echo $$ > /tmp/guard.pid; exec "$0" -m nodeagent guard "$1"' "$PL_PYTHON" \
          "$PL_PROFILE" ) 2>&1 | while IFS= read -r line; do echo "t=$(uptime_s) $line"; done >/tmp/guard.out &
      GUARDED=$!
      while [ ! -s /tmp/guard.pid ]; do sleep 0.1; done
      GUARD=$(cat /tmp/guard.pid) ;;
    *) die "unknown PL_CONFIG $PL_CONFIG" ;;
  esac
  if [ -n "${PL_HOOK:-}" ]; then  # exploration only: a shell snippet run right after the configuration (what
    # it writes to /tmp/hook.out is printed at the end)
    say "HOOK $PL_HOOK"
    sh -c "$PL_HOOK" 2>&1 | sed 's/^/  hook| /'
  fi
}

run_workload() {  # extra args: GO READY BASE
  if [ -n "${PL_KV_ARGS:-}" ]; then
    [ $# -eq 3 ] && set -- "go=$1" "ready=$2" "base=$3"
    sh -c "echo \$\$ > $CG/cgroup.procs && exec $PL_WORKLOAD $PL_KV_ARGS $*" >/tmp/wl.out 2>/tmp/wl.err &
    WL=$!
    damon_stats &
    DS=$!
    thread_states &
    TS=$!
    return
  fi
  sh -c "echo \$\$ > $CG/cgroup.procs && exec $PL_WORKLOAD $PL_COLD_MIB $PL_HOT_MIB $PL_DURATION $PL_INTERVAL $*" \
    >/tmp/wl.out 2>/tmp/wl.err &
  WL=$!
}

thread_states() {  # every second, with shell builtins only (a process spawned under TCG costs a vCPU tens of ms):
  # the hot loop's thread (the main one) — its state, CPU time run and waited on a runqueue (schedstat, ns), time
  # blocked (ms), minor faults, user and system ticks, and its kernel stack while blocked —;
  # every 4 s the CPU ticks (user + system) of the threads that compete with it: the workload's, the kdamonds',
  # kswapd's and kcompactd's
  n=0
  kthreads=""
  for d in /proc/[0-9]*; do
    read -r c < $d/comm 2>/dev/null || continue
    case $c in kswapd*|kcompactd*) kthreads="$kthreads $d" ;; esac
  done
  # sum_block_runtime (time asleep uninterruptibly: a fault waiting for a page under migration, a lock) needs
  # schedstats: on in this guest only, for the run
  echo 1 > /proc/sys/kernel/sched_schedstats 2>/dev/null
  while [ -d /proc/$WL ]; do
    read -r up _ < /proc/uptime
    read -r line < /proc/$WL/task/$WL/stat 2>/dev/null || break
    set -- ${line#*) }
    st=$1 minflt=$8 utime=${12} stime=${13}
    read -r run wait slices < /proc/$WL/schedstat 2>/dev/null
    block=""
    while read -r k _ v _; do
      case $k in *sum_block_runtime) block=$v; break ;; esac
    done < /proc/$WL/sched 2>/dev/null
    stack=""
    if [ "$st" = D ]; then
      while read -r _ f; do stack="$stack${f%%+*},"; done < /proc/$WL/stack 2>/dev/null
    fi
    echo "PL:TSTATE mono=$up state=$st run_ns=$run wait_ns=$wait block_ms=$block minflt=$minflt utime=$utime stime=$stime${stack:+ stack=$stack}"
    n=$((n + 1))
    if [ $((n % 4)) = 0 ]; then
      ticks=""
      for t in /proc/$WL/task/* $kthreads $K/[0-9]*; do
        case $t in $K/*) read -r pid < $t/pid 2>/dev/null || continue; t=/proc/$pid ;; esac
        read -r c < $t/comm 2>/dev/null || continue
        read -r line < $t/stat 2>/dev/null || continue
        set -- ${line#*) }
        ticks="$ticks ${t##*/}:$c=$((${12} + ${13}))"
      done
      echo "PL:TCPU mono=$up$ticks"
    fi
    sleep 1
  done >/tmp/tstate.out
}

damon_stats() {  # every 2 s while the workload runs: each running scheme's bytes applied and tried, regions
  # tried and quota exceeds (counters; no region tried is a scheme whose access pattern matched nothing), with shell
  # builtins only, as thread_states (it used to spawn ~18 processes every 2 s, each costing a vCPU tens of ms under
  # TCG; the runs sampled that way had the hot loop standing still for seconds, kv-explore/NOTES.md)
  while kill -0 $WL 2>/dev/null; do
    for d in $K/[0-9]*; do
      st=""
      read -r st < $d/state 2>/dev/null
      [ "$st" = on ] || continue
      echo update_schemes_stats > $d/state 2>/dev/null
      for s in $d/contexts/0/schemes/[0-9]*; do
        [ -d "$s" ] || continue
        read -r up _ < /proc/uptime
        read -r action < $s/action
        read -r sz < $s/stats/sz_applied
        read -r tried < $s/stats/sz_tried
        read -r ntried < $s/stats/nr_tried
        read -r qx < $s/stats/qt_exceeds
        echo "PL:DSTAT mono=$up kd=${d##*/} scheme=${s##*/} action=$action sz_applied=$sz sz_tried=$tried" \
          "nr_tried=$ntried qt_exceeds=$qx"
      done
    done
    sleep 2
  done >/tmp/dstat.out
}

ndctl create-namespace -f -e namespace0.0 -m devdax >/tmp/ndctl.out 2>&1 ||
  die "ndctl create-namespace failed: $(tail -n 3 /tmp/ndctl.out | tr '\n' ' ')"
# nodeagent applied at boot onlines the CXL device itself; every other case finds it online already
[ "$PL_CONFIG" = nodeagent ] && [ "$PL_START" = before ] || online_cxl
say "CONFIG $PL_CONFIG START $PL_START kernel=$(uname -r)"
say "STATE boot$(state)"

if [ "$PL_START" = before ]; then
  t0=$(uptime_s); apply_config; t1=$(uptime_s)
  say "APPLIED seconds=$(awk "BEGIN {print $t1 - $t0}")"
fi
echo +cpuset +memory > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p $CG && echo 0-1 > $CG/cpuset.cpus && echo 0,2 > $CG/cpuset.mems || die "cannot set up the cpuset"
say "STATE start$(state)"
if [ "$PL_START" = before ]; then
  run_workload
else
  rm -f /tmp/pl.go /tmp/pl.ready /tmp/pl.base
  run_workload /tmp/pl.go /tmp/pl.ready /tmp/pl.base
  while [ ! -e /tmp/pl.ready ]; do kill -0 $WL 2>/dev/null || break; sleep 0.2; done
  sleep "$PL_SETTLE"
  say "STATE full$(state)"
  touch /tmp/pl.base  # vmstat deltas count from here: what applying the configuration moves is its cost
  t0=$(uptime_s); apply_config; t1=$(uptime_s)
  # t = 0 once the configuration is in place (nodeagent's Python runs ~50x slower under TCG than on hardware)
  touch /tmp/pl.go
  say "APPLIED seconds=$(awk "BEGIN {print $t1 - $t0}")"
  say "STATE applied$(state)"
fi
wait $WL
rc=$?
if [ -n "${GUARD:-}" ]; then
  kill "$GUARD" 2>/dev/null; wait "$GUARDED"
  sed 's/^/  guard| /' /tmp/guard.out
fi
[ -n "${DS:-}" ] && wait $DS && cat /tmp/dstat.out
[ -n "${TS:-}" ] && wait $TS && cat /tmp/tstate.out
cat /tmp/wl.out
sed 's/^/  workload-stderr| /' /tmp/wl.err
say "WORKLOAD-RC $rc"
say "STATE end$(state)"
if [ -d $K ]; then
  for d in $K/[0-9]*; do
    [ -e "$d/state" ] || continue
    [ "$(cat $d/state)" = on ] && echo update_schemes_stats > $d/state
    for s in $d/contexts/0/schemes/[0-9]*; do
      [ -d "$s" ] || continue
      say "DAMON kdamond=$(basename $d) scheme=$(basename $s) action=$(cat $s/action) state=$(cat $d/state)" \
        "sz_applied=$(cat $s/stats/sz_applied) nr_applied=$(cat $s/stats/nr_applied)" \
        "sz_tried=$(cat $s/stats/sz_tried) qt_exceeds=$(cat $s/stats/qt_exceeds)"
    done
    # the kdamond's CPU time (user + system ticks of its kernel thread) since it started: under TCG DAMON
    # competes with the workload for the two vCPUs
    pid=$(cat $d/pid 2>/dev/null)
    [ -n "$pid" ] && [ "$pid" != -1 ] && [ -r /proc/$pid/stat ] &&
      say "KDCPU kdamond=$(basename $d) ticks=$(awk '{print $14 + $15}' /proc/$pid/stat) hz=$(getconf CLK_TCK)"
  done
fi
dmesg | grep -iE 'oom|killed process' | head -n 5 | sed 's/^/  dmesg| /'
# exploration: what a hook left behind for the record
[ -s /tmp/hook.out ] && sed 's/^/  hook| /' /tmp/hook.out
exit 0
