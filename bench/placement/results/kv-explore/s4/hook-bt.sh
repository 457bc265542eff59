# every 2 s, what each CPU runs (sysrq l: NMI backtraces), into /tmp/hook.out; the console stays quiet (loglevel 1)
dmesg -n 1
( while :; do echo l > /proc/sysrq-trigger; sleep 2; dmesg -c | grep -E 'NMI backtrace|CPU: |RIP: 0010|^\[ *[0-9.]+\]  ? ?[a-z_0-9.]+\+0x' >> /tmp/hook.out; done ) >/dev/null 2>&1 &
