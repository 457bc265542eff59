"""Who else sets the node's kernel settings: sysctl.d, TuneD, udev rules, daxctl, DAMON modules. Read-only.

The one reader of other agents' configuration: used to name the *likely cause* of drift (``nodeagent drift``),
by the coexistence check (``nodeagent check``) and by the DAX facts. Every function reads through the rooted
host, so a simulated node's ``/etc`` is parsed like a real one's.

- :func:`sysctl_d_setting` — the sysctl.d line that wins for a key, with the precedence of systemd-sysctl and
  ``sysctl --system``: ``*.conf`` in ``/etc/sysctl.d``, ``/run/sysctl.d``, ``/usr/local/lib/sysctl.d``,
  ``/usr/lib/sysctl.d``, ``/lib/sysctl.d`` — a file name in an earlier directory hides the same name in a
  later one (``/etc`` symlink to ``/dev/null`` masks it) — read in file-name order, the last assignment wins;
  ``/etc/sysctl.conf`` is read after them all (procps), unless a sysctl.d file already is that file.
- :func:`tuned_profile` — the active TuneD profile(s) from ``/etc/tuned/active_profile``, with its
  ``include=`` chain merged the way TuneD merges it (:mod:`._tuned`); :func:`tuned_sets` — whether one of its
  settings writes a given attribute.
- :func:`setters_of` — every place that sets one kernel attribute (``/proc/sys/...`` or ``/sys/...``).
- :func:`udev_rules` — udev rules that online hot-added memory or hand DAX devices to daxctl (with whether
  they act); :func:`memory_udev_rules` — the ones that act.
- :func:`daxctl_sections` — the ``[reconfigure-device NAME]`` sections of ``/etc/daxctl.conf.d``.
- :func:`read_damon_modules` — DAMON_RECLAIM, DAMON_LRU_SORT and DAMON_STAT as the kernel shows them;
  :func:`damon_modules` — the enabled ones (each runs a kdamond).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import field
from typing import TYPE_CHECKING

from ..host import Host
from ..util.dataclass import dataclass
from .damon_caps import MODULES

if TYPE_CHECKING:
    from ._tuned import TunedProfile, TunedSetting

__all__ = ["Setting", "TunedProfile", "TunedSetting", "UdevRule", "DaxctlSection", "DamonModule", "sysctl_d_files",
           "sysctl_d_setting", "tuned_profile", "tuned_sets", "setters_of", "udev_rules", "memory_udev_rules",
           "daxctl_sections", "daxctl_reconfigures", "read_damon_modules", "damon_modules", "sysctl_key",
           "computed", "VM_OPTIONS", "SCHEDULER_OPTIONS"]

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
SYSCTL_CONF = "/etc/sysctl.conf"
#: udev's rules directories, the first one winning for a file name (a link to /dev/null masks the name).
UDEV_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d", "/usr/lib/udev/rules.d",
             "/lib/udev/rules.d")
DAXCTL_CONF_DIR = "/etc/daxctl.conf.d"
#: TuneD's [vm] plugin options and the attribute each one writes.
VM_OPTIONS = {
    "transparent_hugepages": "/sys/kernel/mm/transparent_hugepage/enabled",
    "transparent_hugepage": "/sys/kernel/mm/transparent_hugepage/enabled",
    "transparent_hugepage.defrag": "/sys/kernel/mm/transparent_hugepage/defrag",
}

#: TuneD's [scheduler] plugin options that write NUMA balancing's scanner: sysctls before 5.13, the debugfs files
#: since (as nodeagent's knobs do; TuneD writes whichever the kernel has).
SCHEDULER_OPTIONS = {
    f"numa_balancing_{name}": f"/sys/kernel/debug/sched/numa_balancing/{name}"
    for name in ("scan_delay_ms", "scan_period_min_ms", "scan_period_max_ms", "scan_size_mb")
}


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
    active: bool = True  # False: daxctl's rule with no [reconfigure-device] section to act on


@dataclass(frozen=True)
class DaxctlSection:
    """A ``[reconfigure-device NAME]`` section: what ``daxctl reconfigure-device --check-config`` applies."""

    file: str
    line: int
    name: str
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class DamonModule:
    module: str  # damon_reclaim
    name: str  # DAMON_RECLAIM
    enabled: bool
    kdamond_pid: int | None

    @property
    def purpose(self) -> str:
        return MODULES[self.module].purpose


# -- configuration directories ------------------------------------------------------------------------------
def _resolve(host: Host, path: str) -> str:
    """``path`` with symlinks followed inside the root (absolute targets stay kernel paths)."""
    for _ in range(16):
        target = host.fs.readlink(path)
        if target is None:
            return path
        path = posixpath.normpath(target if target.startswith("/") else posixpath.join(posixpath.dirname(path),
                                                                                         target))
    return path


def _config_files(host: Host, dirs: tuple[str, ...], suffix: str) -> list[str]:
    """systemd's drop-in rule: files named ``*suffix`` in ``dirs``, a name in an earlier directory hiding the same
    name in a later one, in file-name order; a name linked to ``/dev/null`` is masked."""
    chosen: dict[str, str] = {}
    for d in dirs:
        for name in host.fs.listdir(d):
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = f"{d}/{name}"
    return [p for _, p in sorted(chosen.items()) if _resolve(host, p) != "/dev/null"]


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


def sysctl_d_files(host: Host) -> list[str]:
    """The files systemd-sysctl / ``sysctl --system`` read, in the order they are applied (last wins)."""
    files = _config_files(host, SYSCTL_DIRS, ".conf")
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
    from ._tuned import load_tuned  # TuneD's parser only for the commands that look at TuneD

    return load_tuned(host)


def computed(value: str) -> bool:
    """Whether TuneD computes ``value`` at run time (as :func:`._tuned.computed`)."""
    from ._tuned import computed as impl

    return impl(value)


def __getattr__(name: str) -> object:
    if name in ("TunedProfile", "TunedSetting"):  # re-exported, loaded on first use
        from . import _tuned

        return getattr(_tuned, name)
    raise AttributeError(name)


def tuned_sets(s: TunedSetting, path: str) -> bool:
    """Whether TuneD setting ``s`` writes kernel attribute ``path`` (its [sysctl], [vm], [scheduler] or [sysfs]
    plugin)."""
    if s.plugin == "sysctl":
        key = sysctl_key(path)
        return key is not None and _normal_key(s.key) == key
    if s.plugin == "vm":
        return VM_OPTIONS.get(s.key) == path
    if s.plugin == "scheduler":
        return SCHEDULER_OPTIONS.get(s.key) == path
    return s.plugin == "sysfs" and fnmatch.fnmatchcase(path, s.key)


# -- every setter of one attribute ------------------------------------------------------------------------
def setters_of(host: Host, path: str) -> list[Setting]:
    """Everything configured to write kernel attribute ``path``, the one that would win last first."""
    out: list[Setting] = []
    key = sysctl_key(path)
    prof = tuned_profile(host)
    if prof is not None:
        out += [_tuned_setting(prof, s) for s in prof.settings if tuned_sets(s, path)]
    if key:
        s = sysctl_d_setting(host, key)
        if s is not None:
            # TuneD's sysctl plugin re-applies sysctl.d after its own values when reapply_sysctl is on (its
            # default): then the sysctl.d line wins over TuneD's [sysctl].
            wins = prof is None or prof.reapply_sysctl
            out.insert(0 if wins else len(out), s)
    return out


def _tuned_setting(prof: TunedProfile, s: TunedSetting) -> Setting:
    running = "running" if prof.running else "not running now; applied when it starts"
    unit = next(u for u in prof.units if u.name == s.unit)
    maybe = "" if unit.applies else f"; may not apply here: {'; '.join(c.why for c in unit.unmet)}"
    return Setting("tuned", s.file, s.line, s.key, s.value,
                   f"TuneD profile {' '.join(prof.names)} ({running}), [{s.unit}]{maybe}")


# -- udev -------------------------------------------------------------------------------------------------
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
_ONLINES = re.compile(r'ATTR\{(state|online)\}="|RUN\+?=".*(online|/state)')
_DAX = re.compile(r'SUBSYSTEM=="dax"')


def udev_rules(host: Host) -> list[UdevRule]:
    """udev rules (other than nodeagent's own) that online hot-added memory blocks themselves (an ``ATTR{state}``
    or ``ATTR{online}`` assignment, or a ``RUN`` that writes one), or that hand DAX devices to daxctl — the
    latter ``active`` only when :func:`daxctl_sections` gives daxctl something to do."""
    out = []
    reconfigures: bool | None = None
    for path in _config_files(host, UDEV_DIRS, ".rules"):
        if "nodeagent" in posixpath.basename(path):
            continue
        for n, rule in _udev_rules(host, path):
            if _MEMORY.search(rule) and _ONLINES.search(rule):
                out.append(UdevRule(path, n, rule, "onlines hot-added memory blocks"))
            elif _DAX.search(rule) and ("daxctl" in rule or "daxdev-reconfigure" in rule):
                reconfigures = daxctl_reconfigures(host) if reconfigures is None else reconfigures
                out.append(UdevRule(path, n, rule, "reconfigures DAX devices through daxctl (daxctl.conf.d)",
                                    reconfigures))
    return out


def memory_udev_rules(host: Host) -> list[UdevRule]:
    """The rules of :func:`udev_rules` that act on this node."""
    return [r for r in udev_rules(host) if r.active]


def daxctl_sections(host: Host) -> list[DaxctlSection]:
    """The ``[reconfigure-device NAME]`` sections of ``/etc/daxctl.conf.d/*.conf``, with their settings."""
    out: list[DaxctlSection] = []
    for name in host.fs.listdir(DAXCTL_CONF_DIR):
        if not name.endswith(".conf"):
            continue
        path = f"{DAXCTL_CONF_DIR}/{name}"
        section: DaxctlSection | None = None
        for n, raw in enumerate((host.read_opt(path) or "").splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            m = re.fullmatch(r"\[\s*reconfigure-device\s+(\S+)\s*\]", line)
            if m:
                section = DaxctlSection(path, n, m.group(1))
                out.append(section)
            elif line.startswith("["):
                section = None
            elif section is not None and "=" in line:
                key, _, value = line.partition("=")
                section.settings[key.strip()] = value.strip()
    return out


def daxctl_reconfigures(host: Host) -> bool:
    """daxctl's own udev rule acts only when ``/etc/daxctl.conf.d`` has a ``[reconfigure-device ...]`` section."""
    return bool(daxctl_sections(host))


# -- DAMON modules ----------------------------------------------------------------------------------------
def read_damon_modules(host: Host) -> list[DamonModule]:
    """The DAMON special-purpose modules this kernel has (``/sys/module/<name>/parameters``), enabled or not."""
    out = []
    for module, info in MODULES.items():
        base = f"/sys/module/{module}/parameters"
        enabled = host.read_opt(f"{base}/enabled")
        if enabled is None:
            continue
        pid = (host.read_opt(f"{base}/kdamond_pid") or "").strip()
        out.append(DamonModule(module, info.name, enabled.strip() in ("Y", "y", "1"),
                               int(pid) if pid.lstrip("-").isdigit() and int(pid) > 0 else None))
    return out


def damon_modules(host: Host) -> list[DamonModule]:
    """The DAMON special-purpose modules that are enabled (each runs its own kdamond, outside sysfs)."""
    return [m for m in read_damon_modules(host) if m.enabled]
