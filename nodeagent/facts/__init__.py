"""Read-only fact gathering: what the node looks like now, as plain data that round-trips through JSON.

``gather(host)`` never writes. Facts are what planning needs and nothing more, so a saved facts file plans
offline exactly as the live node would (``nodeagent plan --facts``). Other fact sections register a gatherer
in :data:`SECTIONS` and read their part back with their own ``from_facts``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import field
from typing import Any

from ..host import Host
from ..util import jsonin
from ..util.dataclass import asdict, dataclass
from ..util.errors import PermissionDeniedError
from ..util.kfmt import kernel_version, parse_list
from .knobs import KNOBS, Knob
from .numa import _BLOCKS, NumaNode, read_block_size, read_nodes, read_tiers

POSSIBLE = "/sys/devices/system/node/possible"

FORMAT = "nodeagent-facts/v2"  # v2: the hardware section (facts.snapshot documents the version rule)
#: The formats this nodeagent reads: the current one and the previous one.
READS = ("nodeagent-facts/v1", FORMAT)

#: name → gatherer(host) returning JSON-able data; filled by fact modules of other resource kinds.
SECTIONS: dict[str, Callable[[Host], Any]] = {}


@dataclass
class Facts:
    hostname: str
    kernel_release: str
    knobs: dict[str, str | None]  # profile key → the kernel's raw text, None when the attribute is missing
    block_size_bytes: int | None
    possible_nodes: list[int]
    nodes: list[NumaNode]
    tiers: dict[int, list[int]]
    simulated: str | None = None  # preset name when gathered from a simulated node
    sections: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT

    @property
    def kernel_version(self) -> tuple[int, int]:
        return kernel_version(self.kernel_release)

    def node(self, nid: int) -> NumaNode | None:
        return next((n for n in self.nodes if n.id == nid), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tiers"] = [{"tier": t, "nodes": n} for t, n in self.tiers.items()]
        return {"format": self.format, **{k: v for k, v in d.items() if k != "format"}}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Facts:
        if d.get("format") not in READS:
            raise ValueError(f"not a nodeagent facts document (format {d.get('format')!r}, expected {FORMAT!r})")
        return cls(
            hostname=d["hostname"], kernel_release=d["kernel_release"], knobs=dict(d["knobs"]),
            block_size_bytes=d.get("block_size_bytes"), possible_nodes=list(d["possible_nodes"]),
            nodes=[NumaNode(**n) for n in d["nodes"]],
            tiers={int(t["tier"]): list(t["nodes"]) for t in d["tiers"]},
            simulated=d.get("simulated"), sections=dict(d.get("sections", {})), format=d["format"],
        )


#: Sections only some profiles plan from (the CXL bus: a profile with ``memory.cxl``, whose regions the
#: cxl_region kind manages): left out when ``gather`` is asked for planning a profile that does not need them.
NOT_FOR_PLANNING = frozenset({"cxl"})


def needed_sections(loaded: Any) -> frozenset[str]:
    """The sections of :data:`NOT_FOR_PLANNING` that planning ``loaded`` (a profile, or None) needs."""
    memory = getattr(getattr(loaded, "profile", None), "memory", None)
    return frozenset({"cxl"}) if getattr(memory, "cxl", None) is not None else frozenset()


def gather(host: Host, *, planning: bool = False, profile: Any = None, need: frozenset[str] = frozenset()) -> Facts:
    """Everything planning needs, read (never written) through the rooted host; with ``planning``, without
    the sections of :data:`NOT_FOR_PLANNING` that ``profile`` does not need (:func:`needed_sections`) and that
    are not in ``need`` (what a revert needs)."""
    token = _BLOCKS.set({})  # node directories are listed once for every section
    try:
        skip = (NOT_FOR_PLANNING - needed_sections(profile) - need) if planning else frozenset()
        return _gather(host, planning, skip)
    finally:
        _BLOCKS.reset(token)


def _read_knob(host: Host, knob: Knob) -> str | None:
    """A knob's text, ``None`` where the kernel lacks it. A debugfs knob (``knob.missing``) the kernel refuses to
    open is unavailable too: under lockdown (integrity mode, as Secure Boot sets it) debugfs answers EPERM for
    any file with a write bit, and its root is root-only; that must not stop the facts of a node."""
    try:
        return host.read_opt(knob.path)
    except PermissionDeniedError:
        if knob.missing is None:
            raise
        return None


def _gather(host: Host, planning: bool = False, skip: frozenset[str] = frozenset()) -> Facts:
    tiers = read_tiers(host)
    bs = read_block_size(host)
    simulated = None
    if host.simulated:
        try:  # read like any file under the root: regular, bounded, resolved inside it
            meta = jsonin.loads(host.read_opt("/.nodeagent-machine/meta.json") or "{}")
        except (ValueError, RecursionError):
            meta = {}
        simulated = meta.get("preset") if isinstance(meta, dict) else None
    return Facts(
        hostname=(host.read_opt("/proc/sys/kernel/hostname") or host.read_opt("/etc/hostname") or "").strip(),
        kernel_release=host.read_opt("/proc/sys/kernel/osrelease") or "",
        knobs={k.key: _read_knob(host, k) for k in KNOBS},
        block_size_bytes=bs,
        possible_nodes=parse_list(host.read_opt(POSSIBLE) or "", POSSIBLE),
        nodes=read_nodes(host, tiers),
        tiers=tiers,
        simulated=simulated,
        sections={name: fn(host) for name, fn in SECTIONS.items() if name not in skip},
    )


def _cxl(host: Host) -> Any:
    """The "cxl" section (memdevs, decoders, regions); its module loads when the section is gathered."""
    from .cxl import gather as gather_cxl

    return gather_cxl(host)


SECTIONS["cxl"] = _cxl  # (facts.cxl puts its own gatherer under the same name when it is imported)

from . import damon as _damon  # noqa: E402,F401  (registers the DAMON fact section)
from . import dax as _dax  # noqa: E402,F401  (registers the "dax" section)
from . import guard_heartbeat as _guard_heartbeat  # noqa: E402,F401  (registers the "guard" section)
from . import interleave as _interleave  # noqa: E402,F401  (registers the "interleave" section)
from . import reclaim as _reclaim  # noqa: E402,F401  (registers the "reclaim" section)
