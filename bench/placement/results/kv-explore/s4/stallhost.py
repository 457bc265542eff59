"""The host's view of a run's slow passes: CPU use of each thread of the QEMU that ran it, from a qwatch.sh log.

    python stallhost.py RUN.txt QWATCH.log    # on the host that ran it, before it reboots (uptime maps the times)
"""

import os
import re
import sys
import time


def instances(qlog: str) -> dict[int, list[tuple[float, dict[str, int]]]]:
    inst: dict[int, list[tuple[float, dict[str, int]]]] = {}
    for line in open(qlog):
        p = line.split()
        if len(p) < 4 or not p[1].startswith("q="):
            continue
        ticks = {m.group(1): int(m.group(2)) for m in (re.match(r"(\d+):[^=]*=(\d+)", x) for x in p[3:]) if m}
        inst.setdefault(int(p[2].split("=")[1]), []).append((float(p[0]), ticks))
    return inst


def main() -> None:
    run_txt, qlog = sys.argv[1], sys.argv[2]
    boot_wall = time.time() - float(open("/proc/uptime").read().split()[0])
    mtime = os.path.getmtime(run_txt)
    # the QEMU whose last sample is the latest before the run's output was written
    start, samples = max(((s, v) for s, v in instances(qlog).items() if v[-1][0] <= mtime + 5),
                         key=lambda sv: sv[1][-1][0])
    qemu_wall = boot_wall + start / 100.0  # the guest's monotonic clock starts about when QEMU does
    text = open(run_txt).read()
    t0 = float(re.search(r"PL:T0 mono=([0-9.]+)", text).group(1))
    print(f"{run_txt}: qemu start {start}, t0 mono {t0}, {len(samples)} samples")
    for end, took in ((float(a), float(b)) for a, b in re.findall(r"PL:PASS slow t=([0-9.]+) took=([0-9.]+)", text)):
        if took < 1.5:
            continue
        lo, hi = t0 + end - took - 3, t0 + end + 2
        print(f"  stall t={end - took:.1f}..{end:.1f} ({took} s):")
        for (ta, a), (tb, b) in zip(samples, samples[1:], strict=False):
            g = tb - qemu_wall
            if lo <= g <= hi:
                top = sorted(((k, (v - a.get(k, 0)) / (tb - ta)) for k, v in b.items()), key=lambda kv: -kv[1])[:3]
                print(f"    mono~{g:6.1f} t~{g - t0:6.1f} " + " ".join(f"{k}:{v:.0f}%" for k, v in top))


if __name__ == "__main__":
    main()
