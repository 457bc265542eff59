grep -q ' /sys/kernel/debug ' /proc/mounts || mount -t debugfs debugfs /sys/kernel/debug
d=/sys/kernel/debug/sched/numa_balancing
echo 1000 > $d/scan_period_max_ms
echo 1024 > $d/scan_size_mb
for f in $d/*; do echo "$f=$(cat $f)"; done
