"""TuneD profiles as TuneD itself resolves them, without TuneD (read-only; used by :mod:`.setters`).

- The active profile(s): ``/etc/tuned/active_profile`` (several names separated by spaces are merged in order).
- Where a name is looked up: TuneD's ``profile_dirs`` — from ``/etc/tuned/tuned-main.conf`` when it sets them,
  else the layout of the installed TuneD: ``/usr/lib/tuned/profiles`` and ``/etc/tuned/profiles`` (TuneD 2.23
  and later), ``/usr/lib/tuned`` and ``/etc/tuned`` (older). The last directory is searched first and the first
  file found wins; a profile that includes its own name gets the next one down, the way
  ``/etc/tuned/profiles/balanced`` customises the shipped ``balanced``.
- ``[main] include=a,b`` loads ``a`` then ``b`` before the including profile, which overrides them; ``-name``
  includes a profile only if it exists. A profile that cannot be found is reported in ``problems``.
- Units merge by section name: ``replace=true`` drops the older unit, ``drop=opt1,opt2`` removes options,
  otherwise options are updated. A unit's plugin is its ``type=`` or its name (``[my_sysctl] type=sysctl``).
- A unit is skipped when ``enabled=false`` or when a condition does not match this node, checked in TuneD's
  order: ``cpuinfo_regex`` (searched in ``/proc/cpuinfo``), then ``uname_regex`` (searched in "ostype hostname
  release version arch"). A condition that calls a TuneD function (``${f:...}``) cannot be evaluated here: the
  unit *may* apply.
- ``${i:PROFILE_DIR}`` and ``[variables]`` are expanded; a value that calls a TuneD function is kept as written.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import field

from ..host import Host
from ..util.dataclass import dataclass

ACTIVE = "/etc/tuned/active_profile"
RUNNING = "/run/tuned/tuned.pid"
MAIN_CONF = "/etc/tuned/tuned-main.conf"
#: TuneD's default ``profile_dirs``, lowest priority first (as tuned-main.conf lists them).
PROFILE_DIRS = ("/usr/lib/tuned/profiles", "/etc/tuned/profiles")  # TuneD >= 2.23
LEGACY_PROFILE_DIRS = ("/usr/lib/tuned", "/etc/tuned")  # TuneD < 2.23
MAX_DEPTH = 16
#: Options that steer TuneD itself rather than set anything.
UNIT_KEYS = frozenset({"type", "enabled", "replace", "drop", "devices", "devices_udev_regex", "cpuinfo_regex",
                       "uname_regex", "script_pre", "script_post", "priority", "prepend"})
_VAR = re.compile(r"(?<!\\)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

Options = dict[str, tuple[str, str, int]]  # key -> (value, file, line)


@dataclass(frozen=True)
class TunedSetting:
    unit: str
    plugin: str
    key: str
    value: str  # variables expanded; a value TuneD computes (``${f:...}``) is kept as written
    file: str
    line: int


@dataclass(frozen=True)
class Condition:
    """A unit condition that is not (or may not be) met on this node."""

    key: str  # "enabled", "cpuinfo_regex", "uname_regex"
    written: str  # as in the file
    expanded: str  # variables expanded
    line: int
    met: bool | None  # False: does not match; None: nodeagent cannot tell

    @property
    def why(self) -> str:
        if self.key == "enabled":
            return "enabled=false"
        if self.met is None:
            return f"{self.key} {self.written!r} cannot be evaluated here (a TuneD function or a bad regex)"
        return f"{self.key} {self.expanded!r} does not match this node"


@dataclass(frozen=True)
class TunedUnit:
    name: str
    plugin: str
    file: str  # the file that last touched the unit
    unmet: tuple[Condition, ...]  # every condition not (surely) met, in TuneD's order of checking
    settings: tuple[TunedSetting, ...]

    @property
    def applies(self) -> bool | None:
        """True: TuneD applies the unit here; False: it skips it; None: cannot tell."""
        if any(c.met is False for c in self.unmet):
            return False
        return None if self.unmet else True


@dataclass
class TunedProfile:
    names: list[str]
    files: list[str]  # in the order TuneD loads them: a profile before what it includes
    running: bool
    dirs: tuple[str, ...] = ()  # searched, first one first
    merged: list[str] = field(default_factory=list)  # in the order they are merged: included ones first
    units: list[TunedUnit] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    reapply_sysctl: bool = True

    @property
    def settings(self) -> list[TunedSetting]:
        """Settings of the units that apply (or may apply) on this node."""
        return [s for u in self.units if u.applies is not False for s in u.settings]

    @property
    def skipped(self) -> list[tuple[str, str]]:
        """``(unit, why)`` for each unit TuneD skips here, with the first failed condition in TuneD's order."""
        return [(u.name, next(c.why for c in u.unmet if c.met is False)) for u in self.units
                if u.applies is False]


def parse_ini(text: str, path: str) -> dict[str, Options]:
    """TuneD's ConfigParser settings (``=`` only, ``#``/``;`` comments, inline `` #``, continuation lines,
    repeated sections merged), with the line each option is on."""
    sections: dict[str, Options] = {}
    current: Options | None = None
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


def expand(value: str, variables: dict[str, str]) -> str:
    """``${name}`` from ``[variables]``, repeatedly; what is left (``${f:...}``, unknown names) stays."""
    for _ in range(10):
        new = _VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), value)
        if new == value:
            break
        value = new
    return value


def computed(value: str) -> bool:
    """Whether TuneD computes ``value`` at run time (a function or a variable nodeagent could not expand)."""
    return "${" in value


def profile_dirs(host: Host) -> tuple[str, ...]:
    """TuneD's profile directories on this node, lowest priority first."""
    conf = parse_ini("[main]\n" + (host.read_opt(MAIN_CONF) or ""), MAIN_CONF).get("main", {})
    if "profile_dirs" in conf:
        dirs = tuple(d.strip() for d in re.split(r"[,;]", conf["profile_dirs"][0]) if d.strip())
        if dirs:
            return dirs
    if any(host.fs.is_dir(d) for d in PROFILE_DIRS):
        return PROFILE_DIRS
    return LEGACY_PROFILE_DIRS


def _locate(host: Host, dirs: tuple[str, ...], name: str, processed: list[str]) -> tuple[str | None, bool]:
    """(path, skipped): the profile's tuned.conf, the first found in ``dirs`` (search order); ``skipped`` when
    the only candidates were files already loaded (TuneD then silently moves on)."""
    skipped = False
    for d in dirs:
        path = posixpath.normpath(f"{d}/{posixpath.basename(name)}/tuned.conf")
        if path in processed:
            skipped = True
            continue
        if host.fs.exists(path):
            return path, False
    return None, skipped


def _load(host: Host, prof: TunedProfile, names: list[str], out: list[dict[str, Options]],
          variables: dict[str, str], depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        prof.problems.append(f"TuneD profiles include each other more than {MAX_DEPTH} levels deep")
        return
    for raw_name in names:
        optional = raw_name.startswith("-")
        name = raw_name[1:] if optional else raw_name
        path, skipped = _locate(host, prof.dirs, name, prof.files)
        if path is None:
            if not (optional or skipped):
                prof.problems.append(f"TuneD profile {name!r} not found in {', '.join(prof.dirs)}")
            continue
        prof.files.append(path)  # before its includes: a profile that includes its own name gets the next one
        config = parse_ini(host.read_opt(path) or "", path)
        pdir = posixpath.dirname(path)
        for opts in config.values():
            for k, (v, f, ln) in list(opts.items()):
                opts[k] = (re.sub(r"(?<!\\)\$\{i:PROFILE_DIR\}", pdir, v), f, ln)
        variables.update({k: v[0] for k, v in config.get("variables", {}).items()})
        include = config.get("main", {}).pop("include", None)
        if include:
            text = expand(include[0], variables)
            if computed(text):
                prof.problems.append(f"{path}:{include[2]}: include={include[0]} uses a TuneD function nodeagent "
                                     "cannot evaluate")
            else:
                _load(host, prof, [i for i in re.split(r"\s*[,;]\s*", text.strip()) if i], out, variables,
                      depth + 1)
        prof.merged.append(path)
        out.append(config)


def _merge(configs: list[dict[str, Options]], files: list[str]
           ) -> tuple[dict[str, Options], dict[str, str], dict[str, str]]:
    """(units, variables, the file that last touched each unit), merging ``configs`` (from ``files``) in order."""
    units: dict[str, Options] = {}
    variables: dict[str, str] = {}
    touched: dict[str, str] = {}
    for config, path in zip(configs, files, strict=True):
        for section, opts in config.items():
            if section == "main":
                continue
            if section == "variables":
                variables.update({k: v[0] for k, v in opts.items()})
                continue
            touched[section] = path
            replace = opts.get("replace", ("false",))[0].lower() in ("true", "1")
            if replace or section not in units:
                units[section] = {k: v for k, v in opts.items() if k != "drop"}
                continue
            unit = units[section]
            drop = opts.get("drop")
            for k in re.split(r"\s*[,;]\s*", drop[0]) if drop else []:
                unit.pop(k, None)
            unit.update({k: v for k, v in opts.items() if k != "drop"})
    return units, variables, touched


def uname(host: Host) -> str:
    """What TuneD matches ``uname_regex`` against: ``os.uname()`` joined by spaces."""
    from .hardware import arch, read_cpuinfo

    parts = [host.read_opt(f"/proc/sys/kernel/{k}") for k in ("ostype", "hostname", "osrelease", "version")]
    words = [(parts[0] or "Linux").strip()] + [p.strip() for p in parts[1:] if p]
    known = (host.read_opt("/proc/sys/kernel/arch") or "").strip()  # cpuinfo (thousands of lines) only without it
    return " ".join(words + [known or arch(host, read_cpuinfo(host))])


def _conditions(opts: Options, variables: dict[str, str], node: dict[str, str]) -> tuple[Condition, ...]:
    out: list[Condition] = []
    enabled = opts.get("enabled")
    if enabled and enabled[0].lower() not in ("true", "1"):
        out.append(Condition("enabled", enabled[0], enabled[0], enabled[2], False))
        return tuple(out)
    for key, subject in (("cpuinfo_regex", "cpuinfo"), ("uname_regex", "uname")):
        if key not in opts:
            continue
        written, _, line = opts[key]
        rx = expand(written, variables)
        met: bool | None
        if computed(rx):
            met = None
        else:
            try:
                met = re.search(rx, node[subject], re.MULTILINE) is not None
            except re.error:
                met = None
        if met is not True:
            out.append(Condition(key, written, rx, line, met))
    return tuple(out)


def load_tuned(host: Host) -> TunedProfile | None:
    """The active TuneD profile(s) merged with their includes, or ``None`` when no profile is active."""
    names = (host.read_opt(ACTIVE) or "").split()
    if not names:
        return None
    prof = TunedProfile(names, [], host.fs.exists(RUNNING), tuple(reversed(profile_dirs(host))))
    configs: list[dict[str, Options]] = []
    _load(host, prof, names, configs, {})
    units, variables, touched = _merge(configs, prof.merged)
    node = {"cpuinfo": host.read_opt("/proc/cpuinfo") or "", "uname": uname(host)}
    for name, opts in units.items():
        plugin = opts.get("type", (name,))[0] or name
        settings: list[TunedSetting] = []
        for key, (value, f, ln) in opts.items():
            if key in UNIT_KEYS:
                continue
            if plugin == "sysctl" and key == "reapply_sysctl":
                prof.reapply_sysctl = value.strip().lower() in ("true", "1")
                continue
            settings.append(TunedSetting(name, plugin, key, expand(value, variables), f, ln))
        prof.units.append(TunedUnit(name, plugin, touched[name], _conditions(opts, variables, node),
                                    tuple(settings)))
    return prof
