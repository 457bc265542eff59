"""A stand-in for ``daxctl`` v76 that acts on the simulated node it is installed in (``<root>/usr/bin/daxctl``).

It follows ndctl v76's ``daxctl/device.c`` and ``libdaxctl.c`` step by step, so the code that drives the real
binary is the code under test: the same sysfs writes in the same order (``remove_id``/``unbind`` on the old
driver, ``new_id``/``bind`` on the new one, then one ``state`` write per memory block found by walking the
target node's ``memoryN`` entries and their ``phys_index``), the same messages on stderr, JSON on stdout as
json-c prints it (fields omitted rather than null), and the same exit codes (a negative errno & 0xff). That
includes the real tool's traps:

- ``reconfigure-device --mode=system-ram`` with ``auto_online_blocks=online*`` aborts with EBUSY (exit 240),
  also with ``--no-online``; with ``--force``, or ``--no-movable``, it goes on and the kernel onlines the
  memory first, in the policy's zone: daxctl then warns of a race and still exits 0;
- ``online-memory`` on memory that is already online warns of a race and exits 1;
- ``offline-memory`` stops at the first block that will not go offline (EBUSY), leaving the blocks before it
  offline and the rest online;
- blocks that land in the wrong zone while daxctl onlines them are not reported (v76's zone check after
  onlining is unreachable); only ``"movable"`` in the JSON shows it;
- the closing summary (``reconfigured 1 device``) counts what daxctl attempted, not what the kernel did, and
  with several devices the exit code is the last device's.

Every write goes through :class:`~nodeagent_sim.kernel.SimKernel`, so the node's journal records it, and
each invocation is appended to ``.nodeagent-machine/commands.log``. Splitting a dynamic (CXL) region follows
``do_create``/``dev_resize``/``dev_destroy`` and ``do_xble``: ``create-device -r R -s SIZE`` writes ``1`` to the
region's ``create``, reads its ``seed``, sets the seed's ``size`` and binds it to device_dax;
``reconfigure-device -s SIZE`` only writes ``size`` (the kernel's EBUSY while bound comes back as is);
``disable-device``/``enable-device`` act on devdax devices only (ENXIO for system-ram); ``destroy-device``
needs ``--force`` for an enabled device, then disables it, sets size 0 and writes its name to ``delete``. Not
emulated: ``--align``, ``--input``, ``--check-config``, ``split-acpi``, ``migrate-device-model`` (they exit 129
with a message that says so).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from . import ownfiles
from ._libdaxctl import WORDS, Daxctl

VERSION = "76.1"
USAGE = {
    "reconfigure-device": "daxctl reconfigure-device <device> [<options>]",
    "online-memory": "daxctl online-memory <device> [<options>]",
    "offline-memory": "daxctl offline-memory <device> [<options>]",
    "list": "daxctl list [<options>]",
    "create-device": "daxctl create-device [<options>]",
    "destroy-device": "daxctl destroy-device <device> [<options>]",
    "disable-device": "daxctl disable-device <device>",
    "enable-device": "daxctl enable-device <device>",
}
#: long option → (short, takes a value) per command; BASE options are common to the device commands.
BASE = {"region": ("r", True), "human": ("u", False), "verbose": ("v", False)}
OPTIONS: dict[str, dict[str, tuple[str, bool]]] = {
    "reconfigure-device": {**BASE, "mode": ("m", True), "no-online": ("N", False), "force": ("f", False),
                           "check-config": ("C", False), "no-movable": ("", False), "size": ("s", True),
                           "align": ("a", True), "input": ("", True)},
    "online-memory": {**BASE, "no-movable": ("", False)},
    "offline-memory": dict(BASE),
    "create-device": {**BASE, "size": ("s", True), "align": ("a", True), "input": ("", True)},
    "destroy-device": {**BASE, "force": ("f", False)},
    "disable-device": dict(BASE),
    "enable-device": dict(BASE),
    "list": {"region": ("r", True), "dev": ("d", True), "devices": ("D", False), "regions": ("R", False),
             "mappings": ("M", False), "idle": ("i", False), "human": ("u", False)},
}


def parse_size(text: str) -> int:
    """parse_size64: a number with an optional binary suffix (k, m, g, t)."""
    import re

    m = re.fullmatch(r"(\d+)([kKmMgGtT]?)", text.strip())
    if not m:
        raise UsageExit(f"failed to parse size option '{text}'")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m.group(2).lower()]


class UsageExit(Exception):
    """Leave with parse-options' usage error (exit 129)."""


def parse(cmd: str, args: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """parse-options: ``--long[=v]``, ``--long v``, ``-s v``, ``-sv``, bundled short flags ``-fN``."""
    spec = OPTIONS[cmd]
    short = {s: (long, val) for long, (s, val) in spec.items() if s}
    opts: dict[str, str | bool] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            name, eq, value = a[2:].partition("=")
            if name not in spec:
                raise UsageExit(f"  Error: unknown option `{name}'")
            if spec[name][1]:
                if not eq:
                    i += 1
                    if i >= len(args):
                        raise UsageExit(f"  Error: option `{name}' requires a value")
                    value = args[i]
                opts[name] = value
            else:
                opts[name] = True
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                c = a[j]
                if c not in short:
                    raise UsageExit(f"  Error: unknown switch `{c}'")
                long, takes = short[c]
                if takes:
                    value = a[j + 1:]
                    if not value:
                        i += 1
                        if i >= len(args):
                            raise UsageExit(f"  Error: switch `{c}' requires a value")
                        value = args[i]
                    opts[long] = value
                    break
                opts[long] = True
                j += 1
        else:
            rest.append(a)
        i += 1
    return opts, rest


def run(root: Path, argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``daxctl argv`` on the simulated node at ``root``."""
    d = Daxctl(root)
    if not argv or argv[0] in ("help", "--help", "-h"):
        return 1, "", "\n usage: daxctl [--version] [--help] COMMAND [ARGS]\n"
    cmd, args = argv[0], argv[1:]
    if cmd in ("version", "--version"):
        return 0, VERSION + "\n", ""
    if cmd not in OPTIONS:
        known = ("split-acpi", "migrate-device-model")
        if cmd in known:
            return 129, "", f"fake daxctl: {cmd} is not emulated by the nodeagent simulator\n"
        return 1, "", f"daxctl: '{cmd}' is not a daxctl command. See 'daxctl --help'\n"
    try:
        d.opts, rest = parse(cmd, args)
        for unsupported in ("check-config", "align", "input"):
            if unsupported in d.opts:
                return 129, "", f"fake daxctl: --{unsupported} is not emulated by the nodeagent simulator\n"
        if "size" in d.opts:
            d.size_arg = parse_size(str(d.opts["size"]))
        if cmd in ("list", "create-device"):
            if rest:
                raise UsageExit("\n".join(f'unknown extra parameter "{r}"' for r in rest))
            if cmd == "list":
                rc = d.list_command()
            else:
                with d.k.batch():
                    rc = d.create_command()
        else:
            if not rest:
                raise UsageExit(f'specify a device to {WORDS[cmd][0]}, or "all"')
            if len(rest) > 1:
                raise UsageExit("\n".join(f'unknown extra parameter "{r}"' for r in rest[1:]))
            if cmd == "reconfigure-device":
                if "mode" not in d.opts and "size" not in d.opts:
                    raise UsageExit("error: a 'align', 'mode' or 'size' option is required")
                if "mode" in d.opts and "size" in d.opts:
                    raise UsageExit("error: 'mode' and 'size' are mutually exclusive")
                if d.opts.get("mode") == "devdax" and d.opts.get("no-online"):
                    raise UsageExit("--no-online is incompatible with --mode=devdax")
            with d.k.batch():
                rc = d.device_command(cmd, rest[0])
    except UsageExit as exc:
        return 129, "", f"{exc}\n\n usage: {USAGE[cmd]}\n"
    out = "\n".join(d.out) + ("\n" if d.out else "")
    err = "\n".join(d.err) + ("\n" if d.err else "")
    return (rc & 0xFF) if rc < 0 else rc, out, err


def main(argv: list[str], root: str | os.PathLike[str]) -> int:
    """Entry point of the launcher the simulator installs; ``root`` is the simulated node it lives in."""
    from . import faults, kernel

    faults.TARGET = "parent"  # a signal fault at one of our writes is meant for the nodeagent that runs us
    kernel.HOLD_SIGNALS = True  # a SIGTERM ends us between two writes, never in the middle of one
    # Killed (SIGTERM: the nodeagent that ran us died, or stopped us) between two writes, as the real one dies:
    # what the emulated kernel derives from the writes made so far is brought up to date on the way out (the
    # batch's flush), since a kernel's own state never lags behind a process that died.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    start = time.monotonic()
    rc, out, err = run(Path(root), argv)
    sys.stdout.write(out)
    sys.stderr.write(err)
    record = {"t": round(time.time(), 6), "argv": ["daxctl", *argv], "rc": rc,
              "seconds": round(time.monotonic() - start, 3)}
    ownfiles.append(root, "commands.log", json.dumps(record) + "\n")
    return rc


LAUNCHER = """#!{python} -S
# nodeagent simulator: daxctl v{version} emulated on the simulated node this file lives in.
import os, sys
sys.path[:0] = {paths!r}
from nodeagent_sim.fake_daxctl import main
sys.exit(main(sys.argv[1:], os.path.realpath(__file__).rsplit("/", 3)[0]))
"""


def install(root: Path, python: str | None = None) -> Path:
    """Put the launcher at ``<root>/usr/bin/daxctl`` (executable)."""
    import nodeagent

    # Without site (-S), as fast as a C tool starts: the simulator's and nodeagent's directories, by hand.
    paths = list(dict.fromkeys([str(Path(__file__).resolve().parents[1]),
                                str(Path(nodeagent.__file__).resolve().parents[1])]))
    path = Path(root) / "usr" / "bin" / "daxctl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LAUNCHER.format(python=python or sys.executable, version=VERSION, paths=paths))
    path.chmod(0o755)
    return path


def commands(root: Path) -> list[dict]:
    """Every daxctl invocation on the simulated node, in order (what tests pin)."""
    text = ownfiles.read_text(root, "commands.log")
    return [json.loads(line) for line in (text or "").splitlines() if line]

