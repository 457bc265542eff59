"""Node labels of the memory tiers, through Node Feature Discovery's ``local`` source (no API access needed).

nfd-worker reads every file in ``/etc/kubernetes/node-feature-discovery/features.d/`` on each discovery pass
(60 s by default) and turns its ``name=value`` lines into node labels; a ``# +expiry-time=<RFC 3339>`` comment
makes the lines after it void from then on. nodeagent keeps one such file, ``features.d/nodeagent``, written
atomically (a dot-named temp file in the same directory, which NFD ignores, then a rename).

Every label is written with an explicit namespace: ``feature.node.kubernetes.io/`` by default, the one
nfd-master always accepts (NFD still auto-prefixes unprefixed names, but that is deprecated). Another namespace
(``--label-prefix example.com``) is only published when nfd-master runs with ``-extra-label-ns=example.com``.

:data:`LABELS` documents each label's values and stability; :func:`node_labels` is the pure part (facts and
records in, labels out) and :func:`gather` the part that reads the node.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..util.dataclass import dataclass

if TYPE_CHECKING:
    from ..engine.core import Engine
    from ..facts import Facts
    from ..host import Host
    from ..profile import LoadedProfile

FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
FEATURES_FILE = f"{FEATURES_DIR}/nodeagent"
DEFAULT_PREFIX = "feature.node.kubernetes.io"
#: nfd-worker ignores a feature file larger than this.
MAX_FILE_BYTES = 64 * 1024
GiB = 1024**3

#: The kinds of memory a node's tiers are made of, fastest first.
KINDS = ("hbm", "dram", "cpuless", "hmem", "pmem", "cxl")

_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")


@dataclass(frozen=True)
class LabelDoc:
    name: str  # after the prefix; <kind> stands for each of KINDS
    values: str
    meaning: str
    stability: str = "stable"  # stable: name and values kept across releases; beta: may change with notice


LABELS: tuple[LabelDoc, ...] = (
    LabelDoc("nodeagent.memory.tiers", "integer", "how many kernel memory tiers (memory_tierN) the node has"),
    LabelDoc("nodeagent.memory.<kind>", "true", "the node has memory of this kind (hbm: GPU memory, dram: NUMA "
             "nodes with CPUs, cxl: nodes of CXL-backed DAX devices, pmem / hmem: nodes of pmem / soft-reserved "
             "DAX devices, cpuless: other CPU-less nodes); absent when it has none"),
    LabelDoc("nodeagent.memory.<kind>.size-gib", "integer", "its total, rounded down to a power of two GiB (1, 2, "
             "4 ... 512, 1024, 2048 ...) so that it does not change with a block offlined; use with nodeAffinity "
             "operator Gt"),
    LabelDoc("nodeagent.cxl.present", "true | false", "CXL memory devices (memdevs or PCI class 0502) are present"),
    LabelDoc("nodeagent.cxl.online", "true | partial | false", "the memory of the CXL-backed DAX devices is online "
             "as system RAM: all of it, some, none"),
    LabelDoc("nodeagent.cxl.zone", "movable | normal | mixed | none", "the zone CXL memory was onlined to"),
    LabelDoc("nodeagent.damon.tiering", "true | false", "a running kdamond has a migrate_hot or migrate_cold "
             "scheme (DAMON-based promotion/demotion)"),
    LabelDoc("nodeagent.profile", "name", "the profile the node is held to (sanitized to a label value)"),
    LabelDoc("nodeagent.profile.digest", "12 hex digits", "the start of that profile's digest"),
    LabelDoc("nodeagent.state", "converged | drifted | partial | unknown", "the node against that profile: partial "
             "when part of it cannot be done here, unknown when it was never applied", "beta"),
    LabelDoc("nodeagent.checks", "passed | warnings | failed | unknown", "the preflight checks' last result",
             "beta"),
)


def label_value(text: str) -> str:
    """``text`` as a label value: at most 63 of ``[A-Za-z0-9._-]``, starting and ending alphanumeric."""
    v = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    v = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", v)
    assert _VALUE.fullmatch(v)
    return v


def check_prefix(prefix: str) -> str:
    """A label namespace (a DNS subdomain), without the slash; ValueError when it is not one."""
    prefix = prefix.rstrip("/")
    if len(prefix) > 253 or not _PREFIX.fullmatch(prefix):
        raise ValueError(f"{prefix!r} is not a DNS subdomain (lower-case letters, digits, '-' and '.')")
    return prefix


def size_bucket(nbytes: int) -> int:
    """GiB, rounded down to a power of two (0 below 1 GiB)."""
    gib = nbytes // GiB
    return 0 if gib <= 0 else 1 << (gib.bit_length() - 1)


def memory_kinds(facts: Facts, gpu_bytes: int | None = None) -> dict[str, int]:
    """Bytes of memory per kind (only kinds present)."""
    from ..facts.dax import from_facts as dax_facts

    backing: dict[int, str] = {}
    for d in dax_facts(facts).devices:
        if d.target_node is not None and d.mode == "system-ram":
            backing.setdefault(d.target_node, d.backing if d.backing in ("cxl", "pmem", "hmem") else "cpuless")
    out: dict[str, int] = {}
    for n in facts.nodes:
        if not n.has_memory or n.mem_total <= 0:
            continue
        kind = backing.get(n.id) or ("dram" if n.has_cpu else "cpuless")
        out[kind] = out.get(kind, 0) + n.mem_total
    if gpu_bytes:
        out["hbm"] = gpu_bytes
    return {k: out[k] for k in KINDS if k in out}


def _cxl(facts: Facts) -> dict[str, str]:
    from ..facts.cxl import from_facts as cxl_facts
    from ..facts.dax import from_facts as dax_facts

    cxl = cxl_facts(facts)
    devs = [d for d in dax_facts(facts).devices if d.backing == "cxl"]
    present = bool(cxl.memdevs or cxl.pci_functions or devs)
    total = sum(d.blocks_total for d in devs)
    online = sum(d.blocks_online for d in devs if d.mode == "system-ram")
    zones = {z.lower() for d in devs for z, n in d.zones.items() if n}
    return {"nodeagent.cxl.present": _bool(present),
            "nodeagent.cxl.online": "false" if not online else "true" if online >= total else "partial",
            "nodeagent.cxl.zone": "none" if not zones else zones.pop() if len(zones) == 1 else "mixed"}


def damon_tiering(facts: Facts) -> bool:
    from ..facts.damon import from_facts as damon_facts

    actions = {"migrate_hot", "migrate_cold"}
    return any(k.running and any(re.fullmatch(r"contexts/\d+/schemes/\d+/action", key) and v.strip() in actions
                                 for key, v in k.config.items())
               for k in damon_facts(facts).kdamonds)


def checks_state(results: list[dict[str, Any]] | None) -> str:
    """passed / warnings / failed / unknown from check results ({name, severity, status})."""
    if not results:
        return "unknown"
    statuses = {r.get("status") for r in results}
    return "failed" if "fail" in statuses else "warnings" if "warn" in statuses else "passed"


def node_labels(facts: Facts, *, profile: str | None, digest: str | None, state: str, checks: str,
                gpu_bytes: int | None = None) -> dict[str, str]:
    """The labels (names without the prefix), from facts and what is known of the profile. Pure."""
    labels = {"nodeagent.memory.tiers": str(len(facts.tiers))}
    for kind, nbytes in memory_kinds(facts, gpu_bytes).items():
        labels[f"nodeagent.memory.{kind}"] = "true"
        labels[f"nodeagent.memory.{kind}.size-gib"] = str(size_bucket(nbytes))
    labels |= _cxl(facts)
    labels["nodeagent.damon.tiering"] = _bool(damon_tiering(facts))
    if profile:
        labels["nodeagent.profile"] = label_value(profile) or "unnamed"
    if digest:
        hexpart = re.sub(r"[^0-9a-f]", "", digest.split(":")[-1].lower())[:12]
        if hexpart:
            labels["nodeagent.profile.digest"] = hexpart
    labels["nodeagent.state"] = state
    labels["nodeagent.checks"] = checks
    for name, value in labels.items():
        assert _NAME.fullmatch(name) and _VALUE.fullmatch(value), (name, value)
    return labels


def render(labels: dict[str, str], *, prefix: str = DEFAULT_PREFIX, expires: datetime | None = None,
           source: str = "") -> str:
    """The feature file: a comment, the optional ``# +expiry-time=`` directive, one ``prefix/name=value`` each."""
    prefix = check_prefix(prefix)
    lines = ["# Written by nodeagent (`nodeagent labels`); rewritten on every apply and run interval."]
    if source:
        lines.append(f"# profile source: {re.sub(r'[^ -~]', '?', source)}")
    if expires is not None:
        lines.append(f"# +expiry-time={expires.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}")
    lines += [f"{prefix}/{name}={value}" for name, value in sorted(labels.items())]
    text = "\n".join(lines) + "\n"
    assert len(text.encode()) < MAX_FILE_BYTES
    return text


def parse(text: str) -> tuple[dict[str, str], str | None]:
    """The labels and expiry time of a feature file, read as nfd-worker's local source reads it."""
    labels: dict[str, str] = {}
    expiry = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#"):
            m = re.fullmatch(r"#\s*\+expiry-time=(\S+)", line)
            if m:
                expiry = m.group(1)
            continue
        if line:
            name, _, value = line.partition("=")
            labels[name] = value or "true"
    return labels, expiry


# -- reading the node ---------------------------------------------------------------------------------------------

def _gpu_bytes(host: Host) -> int | None:
    from ..facts.hardware import read_gpu_memory
    from ..util.errors import NodeagentError

    try:
        mem = read_gpu_memory(host)
    except NodeagentError:
        return None
    return mem.total_bytes if mem else None


def _last_checks(engine: Engine) -> list[dict[str, Any]] | None:
    return [r._asdict() for r in engine.state.last_checks().results] or None


def gather(engine: Engine, loaded: LoadedProfile | None = None, *, facts: Facts | None = None,
           checks: list[dict[str, Any]] | None = None, state: str | None = None) -> dict[str, str]:
    """The node's labels: against ``loaded`` when given, else against the last applied profile (drift says
    converged or drifted); ``checks`` default to the last recorded ones (``last-checks.json``)."""
    from ..drift import detect
    from ..util.errors import NodeagentError

    facts = facts or engine.facts()
    last = engine.state.last_applied()
    name, digest = (loaded.name, loaded.digest) if loaded is not None else (last.profile, last.profile_digest)
    if state is None:
        state = "unknown"
        if loaded is not None or last.desired or last.resolved:
            try:
                report = detect(engine, loaded)
                state = "partial" if report.cannot_be_done else "converged" if report.converged else "drifted"
            except NodeagentError:
                state = "unknown"
    return node_labels(facts, profile=name, digest=digest, state=state,
                       checks=checks_state(checks if checks is not None else _last_checks(engine)),
                       gpu_bytes=_gpu_bytes(engine.host))


def features_dir_exists(host: Host) -> bool:
    return host.fs.is_dir(FEATURES_DIR)


def write(host: Host, text: str) -> None:
    """Replace the feature file atomically (the host layer's temp file is dot-named: NFD skips it)."""
    host.fs.write_file_atomic(FEATURES_FILE, text)


def after_apply(engine: Engine, loaded: LoadedProfile, result: Any, *, mode: str = "auto",
                prefix: str | None = None, expires: datetime | None = None, source: str | None = None) -> str | None:
    """The post-apply hook (:mod:`nodeagent.engine.hooks`): keep the feature file current — with ``mode`` auto
    only where the features.d directory exists (NFD's worker, or the DaemonSet, mounts it there). An apply that
    succeeded stays a success when the labels cannot be written: returns the message to show instead of raising."""
    from ..util.errors import NodeagentError

    try:
        _after_apply(engine, loaded, result, mode, prefix or DEFAULT_PREFIX, expires, source)
    except NodeagentError as exc:
        return f"labels: {FEATURES_FILE} not updated: {exc.render()}"
    return None


def _after_apply(engine: Engine, loaded: LoadedProfile, result: Any, mode: str, prefix: str,
                 expires: datetime | None, source: str | None) -> bool:
    if result.dry_run or mode == "never" or (mode == "auto" and not features_dir_exists(engine.host)):
        return False
    checks = [{"name": r.name, "severity": r.severity, "status": r.status}
              for r in (result.checks.results if result.checks is not None else ())] or None
    state = "converged" if result.status in ("converged", "unchanged") and result.ok else None
    labels = gather(engine, loaded, checks=checks, state=state)
    write(engine.host, render(labels, prefix=prefix, expires=expires,
                              source=loaded.path or "" if source is None else source))
    return True


def _bool(v: bool) -> str:
    return "true" if v else "false"


def now_plus(seconds: float) -> datetime:
    from datetime import timedelta

    return datetime.now(UTC) + timedelta(seconds=seconds)
