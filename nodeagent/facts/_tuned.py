"""TuneD profiles as TuneD itself resolves them (read-only; used by :mod:`.setters`).

- The active profile(s): ``/etc/tuned/active_profile`` (several names separated by spaces are merged in order).
- A name is looked up in ``/etc/tuned/profiles``, ``/etc/tuned``, ``/usr/lib/tuned/profiles``,
  ``/usr/lib/tuned`` (first found wins; a profile that includes its own name gets the next one down, the way
  ``/etc/tuned/balanced`` customises the shipped ``balanced``).
- ``[main] include=a,b`` loads ``a`` then ``b`` before the including profile, which overrides them.
- Units merge by section name: ``replace=true`` drops the older unit, ``drop=opt1,opt2`` removes options,
  otherwise options are updated. A unit's plugin is its ``type=`` or its name (``[my_sysctl] type=sysctl``).
- A unit is skipped when ``enabled=false`` or when its conditions do not match this node: ``cpuinfo_regex``
  (searched in ``/proc/cpuinfo``) and ``uname_regex`` (searched in "ostype hostname release version arch").
- ``${i:PROFILE_DIR}`` and ``[variables]`` are expanded; a value that calls a TuneD function (``${f:...}``) is
  kept as written.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from ..host import Host

ACTIVE = "/etc/tuned/active_profile"
LOAD_DIRS = ("/etc/tuned/profiles", "/etc/tuned", "/usr/lib/tuned/profiles", "/usr/lib/tuned")
RUNNING = "/run/tuned/tuned.pid"
_UNIT_KEYS = {"type", "enabled", "replace", "drop", "devices", "devices_udev_regex", "cpuinfo_regex",
              "uname_regex", "script_pre", "script_post", "priority"}


@dataclass(frozen=True)
class TunedSetting:
    unit: str
    plugin: str
    key: str
    value: str
    file: str
    line: int


@dataclass
class TunedProfile:
    names: list[str]
    files: list[str]
    running: bool
    settings: list[TunedSetting] = field(default_factory=list)  # of units that apply on this node
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (unit, why it does not apply)
    reapply_sysctl: bool = True


@dataclass
class _Unit:
    name: str
    options: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # key -> (value, file, line)

    def get(self, key: str, default: str | None = None) -> str | None:
        v = self.options.get(key)
        return v[0] if v else default


def _parse_ini(text: str, path: str) -> dict[str, dict[str, tuple[str, str, int]]]:
    """TuneD's ConfigParser settings (``=`` only, ``#``/``;`` comments, inline `` #``), with line numbers."""
    sections: dict[str, dict[str, tuple[str, str, int]]] = {}
    current: dict[str, tuple[str, str, int]] | None = None
    last: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if raw[:1].isspace() and current is not None and last is not None:  # continuation line
            value, f, ln = current[last]
            current[last] = (f"{value}\n{stripped}", f, ln)
            continue
        m = re.fullmatch(r"\[([^\]]+)\]", stripped)
        if m:
            current = sections.setdefault(m.group(1).strip(), {})
            last = None
            continue
        if current is None or "=" not in stripped:
            continue
        key, _, value = stripped.partition("=")
        value = re.split(r"\s#", value, maxsplit=1)[0]
        last = key.strip()
        current[last] = (value.strip(), path, n)
    return sections


def _locate(host: Host, name: str, processed: list[str]) -> str | None:
    for d in LOAD_DIRS:
        path = f"{d}/{posixpath.basename(name)}/tuned.conf"
        if path not in processed and host.fs.exists(path):
            return path
    return None


def _load(host: Host, names: list[str], out: list[tuple[str, dict]], processed: list[str], depth: int = 0) -> None:
    if depth > 16:
        return
    for name in names:
        path = _locate(host, name, processed)
        if path is None:
            continue
        processed.append(path)
        config = _parse_ini(host.read_opt(path) or "", path)
        pdir = posixpath.dirname(path)
        for opts in config.values():
            for k, (v, f, ln) in list(opts.items()):
                opts[k] = (v.replace("${i:PROFILE_DIR}", pdir), f, ln)
        include = config.get("main", {}).pop("include", None)
        if include:
            _load(host, [i for i in re.split(r"\s*[,;]\s*", include[0].strip()) if i], out, processed, depth + 1)
        out.append((name, config))


def _merge(configs: list[tuple[str, dict]]) -> tuple[dict[str, _Unit], dict[str, str], dict[str, str]]:
    units: dict[str, _Unit] = {}
    main: dict[str, str] = {}
    variables: dict[str, str] = {}
    for _, config in configs:
        for section, opts in config.items():
            if section == "main":
                main.update({k: v[0] for k, v in opts.items()})
                continue
            if section == "variables":
                variables.update({k: v[0] for k, v in opts.items()})
                continue
            replace = opts.get("replace", ("false",))[0].lower() in ("true", "1")
            if replace or section not in units:
                units[section] = _Unit(section, dict(opts))
                units[section].options.pop("drop", None)
                continue
            unit = units[section]
            drop = opts.get("drop")
            for k in re.split(r"\s*[,;]\s*", drop[0]) if drop else []:
                unit.options.pop(k, None)
            unit.options.update({k: v for k, v in opts.items() if k != "drop"})
    return units, main, variables


def _expand(value: str, variables: dict[str, str]) -> str:
    for _ in range(8):
        new = re.sub(r"(?<!\\)\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: variables.get(m.group(1), m.group(0)), value)
        if new == value:
            break
        value = new
    return value


def _uname(host: Host) -> str:
    parts = [host.read_opt(f"/proc/sys/kernel/{k}") for k in ("ostype", "hostname", "osrelease", "version", "arch")]
    return " ".join(p.strip() for p in ([parts[0] or "Linux"] + parts[1:]) if p)


def load_tuned(host: Host) -> TunedProfile | None:
    names = (host.read_opt(ACTIVE) or "").split()
    if not names:
        return None
    configs: list[tuple[str, dict]] = []
    processed: list[str] = []
    _load(host, names, configs, processed)
    units, _main, variables = _merge(configs)
    prof = TunedProfile(names, processed, host.fs.exists(RUNNING))
    cpuinfo: str | None = None
    for unit in units.values():
        enabled = (unit.get("enabled", "true") or "true").lower() in ("true", "1")
        if not enabled:
            prof.skipped.append((unit.name, "enabled=false"))
            continue
        if (rx := unit.get("cpuinfo_regex")) is not None:
            rx = _expand(rx, variables)
            cpuinfo = (host.read_opt("/proc/cpuinfo") or "") if cpuinfo is None else cpuinfo
            if not re.search(rx, cpuinfo, re.MULTILINE):
                prof.skipped.append((unit.name, f"cpuinfo_regex {rx!r} does not match this node"))
                continue
        rx = unit.get("uname_regex")
        if rx is not None and not re.search(rx := _expand(rx, variables), _uname(host), re.MULTILINE):
            prof.skipped.append((unit.name, f"uname_regex {rx!r} does not match this node"))
            continue
        plugin = unit.get("type", unit.name) or unit.name
        for key, (value, f, ln) in unit.options.items():
            if key in _UNIT_KEYS:
                continue
            if plugin == "sysctl" and key == "reapply_sysctl":
                prof.reapply_sysctl = value.strip().lower() in ("true", "1")
                continue
            prof.settings.append(TunedSetting(unit.name, plugin, key, _expand(value, variables), f, ln))
    return prof
