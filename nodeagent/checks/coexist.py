"""``coexistence``: other agents on the node that will undo what nodeagent sets, each named with its file.

- **TuneD**: the active profile (``/etc/tuned/active_profile``) composed with its includes; a ``[sysctl]``,
  ``[vm]`` or ``[sysfs]`` unit that sets a knob the profile manages to another value. Conditional units are
  evaluated against this node (``uname_regex``, ``cpuinfo_regex``): stock ``throughput-performance`` sets
  ``kernel.numa_balancing=0`` only in its aarch64/ThunderX section, so it is not reported on x86.
- **sysctl.d**: ``/etc``, ``/run``, ``/usr/local/lib``, ``/usr/lib``, ``/lib`` ``sysctl.d/*.conf`` and
  ``/etc/sysctl.conf`` in systemd-sysctl's order; the value that wins at boot for each knob nodeagent manages.
- **udev rules** that online or reconfigure memory: ``SUBSYSTEM=="memory"`` rules that set a block's
  ``state``/``online``, and daxctl's ``90-daxctl-device.rules`` (reported as active only when
  ``/etc/daxctl.conf.d`` has a ``[reconfigure-device]`` section).
- the kernel command line's ``memhp_default_state``: ``offline`` helps (hot-added memory waits for daxctl),
  an online value hurts (CXL memory probed at boot comes online in the kernel's zone before nodeagent runs).
- **DAMON modules** enabled (``damon_reclaim``, ``damon_lru_sort``, ``damon_stat``): they run their own kdamond.

A conflict with a value the profile sets is a ``fail``; the rest are warnings or notes.

Example::

    checks:
      coexistence: {severity: warning}
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from ..facts import Facts
from ..facts.hardware import arch, cmdline_params, read_cmdline, read_cpuinfo
from ..facts.knobs import BY_KEY, Knob
from ..host import Host
from ..profile.checks import CoexistenceCheck
from . import _tuned
from .base import CheckContext, Finding

SYSCTL_DIRS = ("/etc/sysctl.d", "/run/sysctl.d", "/usr/local/lib/sysctl.d", "/usr/lib/sysctl.d", "/lib/sysctl.d")
UDEV_DIRS = ("/etc/udev/rules.d", "/run/udev/rules.d", "/usr/local/lib/udev/rules.d", "/usr/lib/udev/rules.d",
             "/lib/udev/rules.d")
DAMON_MODULES = {"damon_reclaim": "DAMON_RECLAIM (proactive reclaim of cold pages)",
                 "damon_lru_sort": "DAMON_LRU_SORT (LRU sorting by access)",
                 "damon_stat": "DAMON_STAT (access monitoring)"}
#: TuneD [vm] options → the knob they set.
TUNED_VM = {"transparent_hugepages": "kernel.transparent_hugepage.enabled",
            "transparent_hugepage": "kernel.transparent_hugepage.enabled",
            "transparent_hugepage.defrag": "kernel.transparent_hugepage.defrag"}


def sysctl_name(knob: Knob) -> str | None:
    return knob.path[len("/proc/sys/"):].replace("/", ".") if knob.path.startswith("/proc/sys/") else None


def _differs(knob: Knob, raw: str, want: Any) -> bool:
    return knob.parse(raw.lstrip(">").strip()) != want


def _ordered_files(host: Host, dirs: tuple[str, ...], suffix: str) -> list[str]:
    """Config files by basename, the first directory winning (systemd's rule), sorted by basename."""
    chosen: dict[str, str] = {}
    for d in dirs:
        for name in host.fs.listdir(d):
            if name.endswith(suffix) and name not in chosen:
                chosen[name] = f"{d}/{name}"
    return [chosen[n] for n in sorted(chosen) if host.fs.readlink(chosen[n]) != "/dev/null"]


class CoexistenceCheckImpl:
    name = "coexistence"

    def run(self, host: Host, spec: CoexistenceCheck, facts: Facts,
            ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        want = ctx.desired_knobs
        evidence: dict[str, Any] = {"managed": {k: v for k, v in want.items()}}
        findings: list[Finding] = []
        findings += self._tuned(host, facts, want, evidence)
        findings += self._sysctl_d(host, want, evidence)
        findings += self._udev(host, want, evidence)
        findings += self._cmdline(host, want, evidence)
        findings += self._damon(host, evidence)
        if not any(f.status != "pass" for f in findings):
            findings.append(Finding("pass", "no other agent sets what this profile manages"))
        return findings, evidence

    # -- TuneD -------------------------------------------------------------------------------------------------
    def _tuned(self, host: Host, facts: Facts, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        names = _tuned.active_profiles(host)
        if not names:
            ev["tuned"] = None
            return []
        comp = _tuned.compose(host, names)
        cpu_text = host.read_opt("/proc/cpuinfo") or ""
        version = (host.read_opt("/proc/version") or "").rsplit(") ", 1)[-1]
        uname = f"Linux {facts.hostname} {facts.kernel_release} {version} {arch(host, read_cpuinfo(host))}"
        out: list[Finding] = []
        skipped: list[str] = []
        for unit in comp.units.values():
            cond = _tuned.unit_applies(unit, comp.variables, uname, cpu_text)
            for key, value, knob in self._tuned_knobs(unit):
                src = unit.sources.get(key, unit.file)
                what = f"TuneD profile {' '.join(names)}: [{unit.name}] {key}={value} ({src})"
                if cond.applies is False:
                    skipped.append(f"{what}: not applied here — {cond.why}")
                    if knob.key in want and _differs(knob, value, want[knob.key]):
                        out.append(Finding("pass", f"{what} would set {knob.key} to {value}, but not on this "
                                           f"node: {cond.why}"))
                    continue
                if knob.key not in want:
                    continue
                if _differs(knob, value, want[knob.key]):
                    may = "" if cond.applies else f" (may apply: {cond.why})"
                    out.append(Finding("fail" if cond.applies else "warn",
                                       f"{what} sets {knob.key} to {value}; the profile wants "
                                       f"{knob.label(want[knob.key])}{may}",
                                       f"remove {key} from [{unit.name}] in {src} (or make a site profile that "
                                       f"includes it and drops it: [{unit.name}] drop={key}), then "
                                       "`tuned-adm profile <name>`"))
                else:
                    out.append(Finding("pass", f"{what} agrees with the profile"))
        ev["tuned"] = {"active": names, "files": comp.files, "problems": comp.problems,
                       "conditional_not_applied": skipped}
        for p in comp.problems:
            out.append(Finding("warn", p, "fix /etc/tuned/active_profile or install the profile"))
        return out

    @staticmethod
    def _tuned_knobs(unit: _tuned.Unit) -> list[tuple[str, str, Knob]]:
        out = []
        for key, value in _tuned.settings(unit).items():
            if unit.type == "sysctl":
                name = key.replace("/", ".")
                for knob in BY_KEY.values():
                    if sysctl_name(knob) == name:
                        out.append((key, value, knob))
            elif unit.type == "vm" and key in TUNED_VM:
                out.append((key, value, BY_KEY[TUNED_VM[key]]))
            elif unit.type == "sysfs":
                for knob in BY_KEY.values():
                    if fnmatch.fnmatchcase(knob.path, key):
                        out.append((key, value, knob))
        return out

    # -- sysctl.d ----------------------------------------------------------------------------------------------
    def _sysctl_d(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        files = _ordered_files(host, SYSCTL_DIRS, ".conf")
        if host.fs.exists("/etc/sysctl.conf"):
            files.append("/etc/sysctl.conf")
        winners: dict[str, tuple[str, str]] = {}  # sysctl name → (value, file:line)
        for path in files:
            for n, raw in enumerate((host.read_opt(path) or "").splitlines(), 1):
                line = raw.strip()
                if not line or line[0] in "#;":
                    continue
                key, sep, value = line.partition("=")
                if not sep:
                    continue
                key = key.strip().lstrip("-").replace("/", ".")
                for knob in BY_KEY.values():
                    name = sysctl_name(knob)
                    if name and fnmatch.fnmatchcase(name, key):
                        winners[name] = (value.strip(), f"{path}:{n}")
        ev["sysctl_d"] = {"files": files, "sets": {k: {"value": v, "at": at} for k, (v, at) in winners.items()}}
        out = []
        for knob in BY_KEY.values():
            name = sysctl_name(knob)
            if name not in winners or knob.key not in want:
                continue
            value, at = winners[name]
            if _differs(knob, value, want[knob.key]):
                out.append(Finding("fail", f"{at} sets {name} = {value} at every boot; the profile wants "
                                   f"{knob.label(want[knob.key])}",
                                   f"remove the line from {at.rsplit(':', 1)[0]} (or set it to "
                                   f"{knob.format(want[knob.key])}); nodeagent's value lasts only until the next "
                                   "boot otherwise"))
            else:
                out.append(Finding("pass", f"{at} sets {name} = {value}, as the profile does"))
        return out

    # -- udev --------------------------------------------------------------------------------------------------
    def _udev(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        out: list[Finding] = []
        hits: list[str] = []
        for path in _ordered_files(host, UDEV_DIRS, ".rules"):
            text = (host.read_opt(path) or "").replace("\\\n", " ")
            for n, line in enumerate(text.splitlines(), 1):
                rule = line.strip()
                if not rule or rule.startswith("#"):
                    continue
                if re.search(r'SUBSYSTEM=="memory"', rule) and re.search(
                        r'ATTR\{(state|online)\}="|RUN\+?=".*(online|/state)', rule):
                    hits.append(f"{path}:{n}")
                    managed = want.get("memory.auto_online_blocks")
                    status = "fail" if managed == "offline" else "warn"
                    out.append(Finding(status, f"{path}:{n} onlines hot-added memory blocks itself "
                                       "(in the kernel's default zone), before daxctl or nodeagent choose"
                                       + ("; the profile keeps memory.auto_online_blocks offline" if managed
                                          else ""),
                                       f"remove or override the rule: an empty file or a link to /dev/null named "
                                       f"/etc/udev/rules.d/{path.rsplit('/', 1)[-1]}"))
                elif 'SUBSYSTEM=="dax"' in rule and "daxdev-reconfigure" in rule:
                    hits.append(f"{path}:{n}")
                    out += self._daxctl_config(host, f"{path}:{n}")
        ev["udev"] = hits
        return out

    @staticmethod
    def _daxctl_config(host: Host, where: str) -> list[Finding]:
        active = []
        for name in host.fs.listdir("/etc/daxctl.conf.d"):
            path = f"/etc/daxctl.conf.d/{name}"
            for n, raw in enumerate((host.read_opt(path) or "").splitlines(), 1):
                if re.match(r"\s*\[reconfigure-device\b", raw):
                    active.append(f"{path}:{n}")
        if not active:
            return [Finding("pass", f"{where}: daxctl's udev rule is installed but /etc/daxctl.conf.d has no "
                            "[reconfigure-device] section, so it changes nothing")]
        return [Finding("warn", f"{where}: daxctl reconfigures DAX devices at every boot as {', '.join(active)} "
                        "says — another agent managing the same devices",
                        f"let one tool own the devices: remove the sections in {', '.join(active)}, or leave the "
                        "devices out of nodeagent's profile")]

    # -- kernel command line --------------------------------------------------------------------------------
    def _cmdline(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        params = cmdline_params(read_cmdline(host))
        state = params.get("memhp_default_state")
        ev["memhp_default_state"] = state
        managed = want.get("memory.auto_online_blocks")
        if state is None:
            return []
        if state == "offline":
            return [Finding("pass", "kernel command line memhp_default_state=offline helps: memory hot-added at "
                            "boot waits offline for daxctl or nodeagent to choose its zone")]
        status = "fail" if managed == "offline" else "warn"
        return [Finding(status, f"kernel command line memhp_default_state={state} hurts: CXL memory probed at boot "
                        f"comes online{' in ZONE_MOVABLE' if state == 'online_movable' else ''} before nodeagent "
                        "runs"
                        + (" (the profile sets memory.auto_online_blocks: offline, which only applies after boot)"
                           if managed == "offline" else ""),
                        "set memhp_default_state=offline (or remove it) in GRUB_CMDLINE_LINUX in /etc/default/grub, "
                        "run update-grub, and reboot")]

    # -- DAMON modules -------------------------------------------------------------------------------------------
    @staticmethod
    def _damon(host: Host, ev: dict[str, Any]) -> list[Finding]:
        out = []
        enabled = {}
        for mod, what in DAMON_MODULES.items():
            path = f"/sys/module/{mod}/parameters/enabled"
            value = host.read_opt(path)
            if value is None:
                continue
            enabled[mod] = value.strip()
            if value.strip() in ("Y", "y", "1"):
                out.append(Finding("warn", f"{path} = Y: {what} runs its own kdamond beside nodeagent's",
                                   f"echo N > {path}, and remove {mod}.enabled=Y from the kernel command line "
                                   "if it is there"))
        ev["damon_modules"] = enabled
        return out
