"""Who else sets the node's kernel settings: sysctl.d, TuneD, udev rules, DAMON modules. Read-only.

Used to name the *likely cause* of drift (``nodeagent drift``) and, at integration, by the coexistence check.
Every function reads through the rooted host, so a simulated node's ``/etc`` is parsed like a real one's.

- :func:`sysctl_d_setting` — the sysctl.d line that wins for a key, with the precedence of systemd-sysctl and
  ``sysctl --system``: ``*.conf`` in ``/etc/sysctl.d``, ``/run/sysctl.d``, ``/usr/local/lib/sysctl.d``,
  ``/usr/lib/sysctl.d``, ``/lib/sysctl.d`` — a file name in an earlier directory hides the same name in a
  later one (``/etc`` symlink to ``/dev/null`` masks it) — read in file-name order, the last assignment wins;
  ``/etc/sysctl.conf`` is read after them all (procps), unless a sysctl.d file already is that file.
- :func:`tuned_profile` — the active TuneD profile(s) from ``/etc/tuned/active_profile``, with its
  ``include=`` chain merged the way TuneD merges it (:mod:`._tuned`).
- :func:`setters_of` — every place that sets one kernel attribute (``/proc/sys/...`` or ``/sys/...``).
- :func:`memory_udev_rules` — udev rules that online hot-added memory or reconfigure DAX devices.
- :func:`damon_modules` — DAMON_RECLAIM, DAMON_LRU_SORT and DAMON_STAT when enabled (each runs a kdamond).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass

from ..host import Host
from ._tuned import TunedProfile, load_tuned

__all__ = ["Setting", "TunedProfile", "UdevRule", "DamonModule", "sysctl_d_files", "sysctl_d_setting",
           "tuned_profile", "setters_of", "memory_udev_rules", "daxctl_reconfigures", "damon_modules", "sysctl_key",
           "VM_OPTIONS"]

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
UDEV_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d", "/usr/lib/udev/rules.d",
             "/lib/udev/rules.d")
#: TuneD's [vm] plugin options and the attribute each one writes.
VM_OPTIONS = {
    "transparent_hugepages": "/sys/kernel/mm/transparent_hugepage/enabled",
    "transparent_hugepage": "/sys/kernel/mm/transparent_hugepage/enabled",
    "transparent_hugepage.defrag": "/sys/kernel/mm/transparent_hugepage/defrag",
}
DAMON_MODULES = {"damon_reclaim": "DAMON_RECLAIM", "damon_lru_sort": "DAMON_LRU_SORT", "damon_stat": "DAMON_STAT"}


@dataclass(frozen=True)
class Setting:
    """One line of another tool's configuration that sets a kernel attribute."""

    source: str  # "sysctl.d", "sysctl.conf", "tuned"
    file: str
    line: int
    key: str  # as written: a sysctl key, a TuneD option, or a sysfs path (glob)
    value: str
    detail: str = ""  # e.g. "TuneD profile throughput-performance, unit [sysctl]"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class UdevRule:
    file: str
    line: int
    text: str
    what: str  # "onlines hot-added memory blocks", "reconfigures DAX devices through daxctl"


@dataclass(frozen=True)
class DamonModule:
    module: str  # damon_reclaim
    name: str  # DAMON_RECLAIM
    enabled: bool
    kdamond_pid: int | None


# -- sysctl.d ---------------------------------------------------------------------------------------------
def sysctl_key(path: str) -> str | None:
    """``/proc/sys/kernel/numa_balancing`` → ``kernel.numa_balancing``; ``None`` for a non-sysctl path."""
    if not path.startswith("/proc/sys/"):
        return None
    return path[len("/proc/sys/"):].replace("/", ".")


def _normal_key(key: str) -> str:
    # sysctl.d(5): when the first separator is a slash, slashes and dots are swapped.
    first = re.search(r"[./]", key)
    if first and first.group() == "/":
        return key.translate(str.maketrans("/.", "./"))
    return key


def _resolve(host: Host, path: str) -> str:
    """``path`` with symlinks followed inside the root (absolute targets stay kernel paths)."""
    for _ in range(16):
        target = host.fs.readlink(path)
        if target is None:
            return path
        path = posixpath.normpath(target if target.startswith("/") else posixpath.join(posixpath.dirname(path),
                                                                                         target))
    return path


def sysctl_d_files(host: Host) -> list[str]:
    """The files systemd-sysctl / ``sysctl --system`` read, in the order they are applied (last wins)."""
    chosen: dict[str, str] = {}
    for d in SYSCTL_DIRS:
        for name in host.fs.listdir(d):
            if name.endswith(".conf") and name not in chosen:
                chosen[name] = f"{d}/{name}"
    files = [p for _, p in sorted(chosen.items()) if _resolve(host, p) != "/dev/null"]
    if host.fs.exists(SYSCTL_CONF) and SYSCTL_CONF not in {_resolve(host, p) for p in files}:
        files.append(SYSCTL_CONF)
    return files


def _sysctl_lines(host: Host, path: str) -> list[tuple[int, str, str]]:
    out = []
    for n, raw in enumerate((host.read_opt(path) or "").splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out.append((n, key.strip(), value.strip()))
    return out


def sysctl_d_setting(host: Host, key: str) -> Setting | None:
    """The assignment that wins for sysctl ``key`` (``kernel.numa_balancing``) at boot, or ``None``."""
    want = _normal_key(key)
    found: Setting | None = None
    for path in sysctl_d_files(host):
        for n, k, value in _sysctl_lines(host, path):
            pattern = _normal_key(k.lstrip("-"))
            if pattern == want or (any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(want, pattern)):
                found = Setting("sysctl.conf" if path == SYSCTL_CONF else "sysctl.d", path, n, k, value)
    return found


# -- TuneD ------------------------------------------------------------------------------------------------
def tuned_profile(host: Host) -> TunedProfile | None:
    """The active TuneD profile(s) merged with their includes, or ``None`` when no profile is active."""
    return load_tuned(host)


# -- every setter of one attribute ------------------------------------------------------------------------
def setters_of(host: Host, path: str) -> list[Setting]:
    """Everything configured to write kernel attribute ``path``, the one that would win last first."""
    out: list[Setting] = []
    key = sysctl_key(path)
    prof = tuned_profile(host)
    if prof is not None:
        for s in prof.settings:
            if s.plugin == "sysctl" and key and _normal_key(s.key) == key:
                out.append(_tuned_setting(prof, s))
            elif s.plugin == "vm" and VM_OPTIONS.get(s.key) == path:
                out.append(_tuned_setting(prof, s))
            elif s.plugin == "sysfs" and fnmatch.fnmatchcase(path, s.key):
                out.append(_tuned_setting(prof, s))
    if key:
        s = sysctl_d_setting(host, key)
        if s is not None:
            # TuneD's sysctl plugin re-applies sysctl.d after its own values when reapply_sysctl is on (its
            # default): then the sysctl.d line wins over TuneD's [sysctl].
            wins = prof is None or prof.reapply_sysctl
            out.insert(0 if wins else len(out), s)
    return out


def _tuned_setting(prof: TunedProfile, s) -> Setting:  # type: ignore[no-untyped-def]
    running = "running" if prof.running else "not running now; applied when it starts"
    return Setting("tuned", s.file, s.line, s.key, s.value,
                   f"TuneD profile {' '.join(prof.names)} ({running}), [{s.unit}]")


# -- udev -------------------------------------------------------------------------------------------------
def _udev_files(host: Host) -> list[str]:
    chosen: dict[str, str] = {}
    for d in UDEV_DIRS:
        for name in host.fs.listdir(d):
            if name.endswith(".rules") and name not in chosen:
                chosen[name] = f"{d}/{name}"
    return [p for _, p in sorted(chosen.items()) if _resolve(host, p) != "/dev/null"]


def _udev_rules(host: Host, path: str) -> list[tuple[int, str]]:
    """Logical rule lines (backslash continuations joined) with the line they start on."""
    out: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate((host.read_opt(path) or "").splitlines(), 1):
        line = raw.strip()
        if not buf:
            start = n
            if not line or line.startswith("#"):
                continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


_MEMORY = re.compile(r'SUBSYSTEM=="memory"')
_ONLINES = re.compile(r'ATTR\{(state|online)\}="')
_DAX = re.compile(r'SUBSYSTEM=="dax"')


def memory_udev_rules(host: Host) -> list[UdevRule]:
    """udev rules (other than nodeagent's own) that online hot-added memory or hand DAX devices to daxctl."""
    out = []
    for path in _udev_files(host):
        if "nodeagent" in posixpath.basename(path):
            continue
        for n, rule in _udev_rules(host, path):
            if _MEMORY.search(rule) and _ONLINES.search(rule):
                out.append(UdevRule(path, n, rule, "onlines hot-added memory blocks"))
            elif (_DAX.search(rule) and ("daxctl" in rule or "daxdev-reconfigure" in rule)
                  and daxctl_reconfigures(host)):
                out.append(UdevRule(path, n, rule, "reconfigures DAX devices through daxctl (daxctl.conf.d)"))
    return out


def daxctl_reconfigures(host: Host) -> bool:
    """daxctl's own udev rule acts only when ``/etc/daxctl.conf.d`` has a ``[reconfigure-device ...]`` section."""
    return any(re.search(r"^\s*\[reconfigure-device", host.read_opt(f"/etc/daxctl.conf.d/{name}") or "",
                         re.MULTILINE)
               for name in host.fs.listdir("/etc/daxctl.conf.d") if name.endswith(".conf"))


# -- DAMON modules ----------------------------------------------------------------------------------------
def damon_modules(host: Host) -> list[DamonModule]:
    """The DAMON special-purpose modules that are enabled (each runs its own kdamond, outside sysfs)."""
    out = []
    for module, name in DAMON_MODULES.items():
        base = f"/sys/module/{module}/parameters"
        enabled = (host.read_opt(f"{base}/enabled") or "").strip()
        if enabled not in ("Y", "y", "1"):
            continue
        pid = (host.read_opt(f"{base}/kdamond_pid") or "").strip()
        out.append(DamonModule(module, name, True, int(pid) if pid.lstrip("-").isdigit() and int(pid) > 0
                               else None))
    return out
