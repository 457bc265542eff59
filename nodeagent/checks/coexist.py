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
- **DAMON modules** enabled (``damon_reclaim``, ``damon_lru_sort``, ``damon_stat``): each runs an exclusive kdamond, and
  no sysfs kdamond can start while it runs (EBUSY).

Every file is read by :mod:`nodeagent.facts.setters`, the reader ``nodeagent drift`` names causes with.

A conflict with a value the profile sets is a ``fail``; the rest are warnings or notes.

Example::

    checks:
      coexistence: {severity: warning}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.hardware import cmdline_params, read_cmdline
from ..facts.knobs import BY_KEY, Knob
from ..facts.setters import (
    TunedSetting,
    computed,
    daxctl_sections,
    read_damon_modules,
    sysctl_d_files,
    sysctl_d_setting,
    sysctl_key,
    tuned_profile,
    tuned_sets,
    udev_rules,
)
from ..host import Host
from .base import CheckContext, Finding

if TYPE_CHECKING:
    from ..profile.checks import CoexistenceCheck


def _differs(knob: Knob, raw: str, want: Any) -> bool:
    try:
        return knob.parse(raw.lstrip(">").strip()) != want
    except ValueError:
        return True


def _knobs(s: TunedSetting) -> list[Knob]:
    return [k for k in BY_KEY.values() if tuned_sets(s, k.path)]


class CoexistenceCheckImpl:
    name = "coexistence"

    def run(self, host: Host, spec: CoexistenceCheck, facts: Facts,
            ctx: CheckContext) -> tuple[list[Finding], dict[str, Any]]:
        want = ctx.desired_knobs
        evidence: dict[str, Any] = {"managed": {k: v for k, v in want.items()}}
        findings: list[Finding] = []
        findings += self._tuned(host, want, evidence)
        findings += self._sysctl_d(host, want, evidence)
        findings += self._udev(host, want, evidence)
        findings += self._cmdline(host, want, evidence)
        findings += self._damon(host, evidence)
        if not any(f.status != "pass" for f in findings):
            findings.append(Finding("pass", "no other agent sets what this profile manages"))
        return findings, evidence

    # -- TuneD -------------------------------------------------------------------------------------------------
    def _tuned(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        prof = tuned_profile(host)
        if prof is None:
            ev["tuned"] = None
            return []
        names = " ".join(prof.names)
        out: list[Finding] = []
        skipped: list[str] = []
        for unit in prof.units:
            # As written in the file (TuneD itself stops at the first condition that fails).
            why = ", ".join(f"{c.key}={c.written} does not match this node" if c.met is False else c.why
                            for c in sorted(unit.unmet, key=lambda c: c.line))
            for s in unit.settings:
                for knob in _knobs(s):
                    what = f"TuneD profile {names}: [{unit.name}] {s.key}={s.value} ({s.file})"
                    if unit.applies is False:
                        skipped.append(f"{what}: not applied here — {why}")
                        if knob.key in want and (computed(s.value) or _differs(knob, s.value, want[knob.key])):
                            out.append(Finding("pass", f"{what} would set {knob.key} to {s.value}, but not on "
                                               f"this node: {why}"))
                        continue
                    if knob.key not in want:
                        continue
                    if computed(s.value) or _differs(knob, s.value, want[knob.key]):
                        may = "" if unit.applies else f" (may apply: {why})"
                        value = f"a value TuneD computes ({s.value})" if computed(s.value) else s.value
                        out.append(Finding("fail" if unit.applies and not computed(s.value) else "warn",
                                           f"{what} sets {knob.key} to {value}; the profile wants "
                                           f"{knob.label(want[knob.key])}{may}",
                                           f"remove {s.key} from [{unit.name}] in {s.file} (or make a site profile "
                                           f"that includes it and drops it: [{unit.name}] drop={s.key}), then "
                                           "`tuned-adm profile <name>`"))
                    else:
                        out.append(Finding("pass", f"{what} agrees with the profile"))
        ev["tuned"] = {"active": prof.names, "files": prof.merged, "problems": prof.problems,
                       "conditional_not_applied": skipped}
        for p in prof.problems:
            out.append(Finding("warn", p, "fix /etc/tuned/active_profile or install the profile"))
        return out

    # -- sysctl.d ----------------------------------------------------------------------------------------------
    def _sysctl_d(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        winners = {}
        for knob in BY_KEY.values():
            name = sysctl_key(knob.path)
            s = sysctl_d_setting(host, name) if name else None
            if s is not None:
                winners[knob.key] = (name, s)
        ev["sysctl_d"] = {"files": sysctl_d_files(host),
                          "sets": {name: {"value": s.value, "at": s.where} for name, s in winners.values()}}
        out = []
        for key, (name, s) in winners.items():
            if key not in want:
                continue
            knob = BY_KEY[key]
            if _differs(knob, s.value, want[key]):
                out.append(Finding("fail", f"{s.where} sets {name} = {s.value} at every boot; the profile wants "
                                   f"{knob.label(want[key])}",
                                   f"remove the line from {s.file} (or set it to {knob.format(want[key])}); "
                                   "nodeagent's value lasts only until the next boot otherwise"))
            else:
                out.append(Finding("pass", f"{s.where} sets {name} = {s.value}, as the profile does"))
        return out

    # -- udev --------------------------------------------------------------------------------------------------
    def _udev(self, host: Host, want: dict[str, Any], ev: dict[str, Any]) -> list[Finding]:
        out: list[Finding] = []
        rules = udev_rules(host)
        managed = want.get("memory.auto_online_blocks")
        for r in rules:
            where = f"{r.file}:{r.line}"
            if "daxctl" in r.what:
                out += self._daxctl_config(host, where)
                continue
            out.append(Finding("fail" if managed == "offline" else "warn",
                               f"{where} onlines hot-added memory blocks itself (in the kernel's default zone), "
                               "before daxctl or nodeagent choose"
                               + ("; the profile keeps memory.auto_online_blocks offline" if managed else ""),
                               f"remove or override the rule: an empty file or a link to /dev/null named "
                               f"/etc/udev/rules.d/{r.file.rsplit('/', 1)[-1]}"))
        ev["udev"] = [f"{r.file}:{r.line}" for r in rules]
        return out

    @staticmethod
    def _daxctl_config(host: Host, where: str) -> list[Finding]:
        active = [s.where for s in daxctl_sections(host)]
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
        modules = read_damon_modules(host)
        for m in modules:
            path = f"/sys/module/{m.module}/parameters/enabled"
            if m.enabled:
                out.append(Finding("warn", f"{path} = Y: {m.name} ({m.purpose}) runs an exclusive kdamond"
                                   + (f" (pid {m.kdamond_pid})" if m.kdamond_pid else "")
                                   + ": while it runs the kernel refuses to start any sysfs kdamond (EBUSY), "
                                   "so nodeagent's DAMON schemes cannot run",
                                   f"echo N > {path}, and remove {m.module}.enabled=Y from the kernel command line "
                                   "if it is there"))
        ev["damon_modules"] = {m.module: "Y" if m.enabled else "N" for m in modules}
        return out
