"""Reading TuneD's active profile the way TuneD composes it, without TuneD: includes, merged units, variables,
and the conditions (``uname_regex``, ``cpuinfo_regex``, ``enabled``) that decide whether a unit applies here.

Only what nodeagent needs: which units would be applied on this node, each option with the file that set it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..host import Host

ACTIVE = "/etc/tuned/active_profile"
#: Where profiles are looked up; a later directory overrides an earlier one (TuneD 2.23+ and older layouts).
PROFILE_DIRS = ("/usr/lib/tuned", "/usr/lib/tuned/profiles", "/etc/tuned", "/etc/tuned/profiles")
_VAR = re.compile(r"\$\{([^}]+)\}")
MAX_DEPTH = 16


@dataclass
class Unit:
    name: str
    options: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # option → file that set it
    file: str = ""

    @property
    def type(self) -> str:
        return self.options.get("type", self.name)


@dataclass
class Composed:
    names: list[str]
    files: list[str] = field(default_factory=list)
    units: dict[str, Unit] = field(default_factory=dict)
    variables: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def parse_ini(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Sections of a tuned.conf in order: ``[(section, [(key, value)])]``. Comments start with ``#`` or ``;``."""
    sections: list[tuple[str, list[tuple[str, str]]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = re.fullmatch(r"\[([^\]]+)\]", line)
        if m:
            sections.append((m.group(1).strip(), []))
            continue
        key, sep, value = line.partition("=")
        if sep and sections:
            sections[-1][1].append((key.strip(), value.strip()))
    return sections


def locate(host: Host, name: str) -> str | None:
    for d in reversed(PROFILE_DIRS):
        path = f"{d}/{name}/tuned.conf"
        if host.fs.exists(path):
            return path
    return None


def active_profiles(host: Host) -> list[str]:
    return (host.read_opt(ACTIVE) or "").split()


def compose(host: Host, names: list[str]) -> Composed:
    """Load ``names`` (and what they include) and merge them as TuneD does: included first, includer overrides."""
    out = Composed(list(names))
    seen: set[str] = set()

    def load(name: str, depth: int) -> None:
        if depth > MAX_DEPTH or name in seen:
            return
        seen.add(name)
        path = locate(host, name)
        if path is None:
            out.problems.append(f"TuneD profile {name!r} not found in {', '.join(PROFILE_DIRS)}")
            return
        sections = parse_ini(host.read_opt(path) or "")
        main = dict(next((opts for sec, opts in sections if sec == "main"), []))
        variables = dict(next((opts for sec, opts in sections if sec == "variables"), []))
        if "include" in main:
            text = expand(main["include"], {**out.variables, **variables})
            for inc in re.split(r"\s*[,;]\s*", text or ""):
                if inc and "${" not in inc:
                    load(inc, depth + 1)
                elif inc:
                    out.problems.append(f"{path}: include={main['include']} uses a TuneD function nodeagent "
                                        "cannot evaluate")
        out.files.append(path)
        out.variables.update(variables)
        for sec, opts in sections:
            if sec in ("main", "variables"):
                continue
            merge(out.units, sec, opts, path)

    for n in names:
        load(n, 0)
    return out


def merge(units: dict[str, Unit], name: str, opts: list[tuple[str, str]], path: str) -> None:
    d = dict(opts)
    if d.get("replace", "false").lower() in ("true", "1") or name not in units:
        units[name] = Unit(name, file=path)
    unit = units[name]
    for key in re.split(r"\s*[,;]\s*", d.pop("drop", "")):
        unit.options.pop(key, None)
        unit.sources.pop(key, None)
    d.pop("replace", None)
    for key, value in d.items():
        unit.options[key] = value
        unit.sources[key] = path
    unit.file = path


def expand(text: str, variables: dict[str, str]) -> str | None:
    """``${name}`` from [variables] (repeatedly); None when a TuneD function (``${f:...}``) or unknown name is left."""
    for _ in range(10):
        new = _VAR.sub(lambda m: variables.get(m.group(1), m.group(0)), text)
        if new == text:
            break
        text = new
    return None if _VAR.search(text) else text


@dataclass(frozen=True)
class Condition:
    applies: bool | None  # None: cannot tell (a TuneD function in a condition)
    why: str


def unit_applies(unit: Unit, variables: dict[str, str], uname: str, cpuinfo: str) -> Condition:
    if unit.options.get("enabled", "true").lower() in ("false", "0"):
        return Condition(False, "enabled=false")
    for key, subject in (("uname_regex", uname), ("cpuinfo_regex", cpuinfo)):
        if key not in unit.options:
            continue
        pattern = expand(unit.options[key], variables)
        if pattern is None:
            return Condition(None, f"{key} uses a variable nodeagent cannot evaluate")
        try:
            if re.search(pattern, subject, re.MULTILINE) is None:
                return Condition(False, f"{key}={unit.options[key]} does not match this node")
        except re.error:
            return Condition(None, f"{key} is not a valid regular expression")
    return Condition(True, "applies")


CONTROL = {"type", "enabled", "replace", "drop", "devices", "devices_udev_regex", "cpuinfo_regex", "uname_regex",
           "script_pre", "script_post", "priority", "prepend"}


def settings(unit: Unit) -> dict[str, str]:
    """The unit's settings (its options less TuneD's own control keys)."""
    return {k: v for k, v in unit.options.items() if k not in CONTROL}
