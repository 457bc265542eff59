"""Summarise the sysrq-l backtraces a run's hook collected (hook-bt.sh): per sample, the CPU, its task, RIP, frames.

    python backtraces.py RUN.txt [T0_MONO]    # times relative to the run's t = 0 when T0_MONO is given
"""

import re
import sys

SKIP = ("dump_stack_lvl", "nmi_cpu_backtrace", "nmi_trigger_cpumask_backtrace")


def samples(path: str) -> list[dict]:
    out: list[dict] = []
    cur: dict | None = None
    for line in open(path):
        if "hook|" not in line:
            continue
        m = re.search(r"\[ *([0-9.]+)\] NMI backtrace for cpu (\d+)", line)
        if m:
            cur = {"t": float(m.group(1)), "cpu": m.group(2), "comm": "?", "rip": "", "frames": []}
            out.append(cur)
        elif cur is not None:
            if m := re.search(r"Comm: (\S+)", line):
                cur["comm"] = m.group(1)
            elif m := re.search(r"RIP: 0010:(\S+)", line):
                cur["rip"] = m.group(1).split("+")[0]
            elif (m := re.search(r"\]  ?\??\s*([a-z_0-9.]+)\+0x", line)) and m.group(1) not in SKIP:
                cur["frames"].append(m.group(1))
    return out


def main() -> None:
    t0 = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    for c in samples(sys.argv[1]):
        if c["comm"] == "sh" and "__handle_sysrq" in c["frames"]:
            continue  # the CPU that asked for the backtraces
        frames = " < ".join(c["frames"][:7])
        print(f"{c['t'] - t0:7.2f} cpu{c['cpu']} {c['comm'][:16]:16} {c['rip'][:28]:28} {frames}")


if __name__ == "__main__":
    main()
