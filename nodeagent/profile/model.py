"""The node profile (``apiVersion: nodeagent/v1``, ``kind: NodeProfile``).

A key that is absent is unmanaged: nodeagent neither sets nor reports it. Example::

    apiVersion: nodeagent/v1
    kind: NodeProfile
    metadata: {name: cxl-inference, description: CXL as a lower memory tier}
    kernel:
      numa_balancing: memory-tiering        # or disabled | normal | normal+memory-tiering | 0-3
      demotion_enabled: true
      numa_balancing_promote_rate_limit_mbps: 65536
      transparent_hugepage: {enabled: madvise, defrag: defer+madvise}
      zone_reclaim_mode: 0
      min_unmapped_ratio: 1                 # node reclaim's floors, % of the node
      min_slab_ratio: 5
      watermark_scale_factor: 10            # watermark gap, 1/10,000 of a node: the headroom kswapd keeps
      min_free_kbytes: 67584                # the min watermark those gaps stand on, KiB
      lru_gen: {enabled: true, min_ttl_ms: 1000}   # multi-gen LRU; min_ttl_ms > 0: kswapd OOM-kills
      weighted_interleave: {weights: {node0: 3, node2: 1}}   # or {auto: true} (6.16): weights from bandwidth
      numa_balancing_scan_period_max_ms: 60000   # also _scan_delay_ms, _scan_period_min_ms, _scan_size_mb,
                                            #   _hot_threshold_ms (debugfs, sched/numa_balancing/)
    memory:
      auto_online_blocks: offline           # let daxctl choose the zone, not the kernel
      dax:                                  # DAX devices (CXL.mem expanders), first matching rule decides
        - name: maru-part                   # part of one expander for Maru, the rest of it system RAM:
          match: {dax_regions: [1]}         #   one region (or devices: [dax1.0]), a dynamic (CXL) one
          mode: devdax
          use: maru
          size: 512GiB                      #   Maru's device, made in the region (a multiple of its align)
          rest: {mode: system-ram, zone: normal}   # what the region's first device (the rest) becomes
        - name: expanders
          match: {all: true}                # or devices: [dax0.0] | target_nodes: [2] | dax_regions: [0]
                                            #    | min_size: 1TiB (criteria combine with AND)
          mode: system-ram                  # or devdax (left to applications as a character device)
          zone: movable                     # system-ram only: movable (tiered, pageable) | normal (pinned)
          use: tiered                       # optional: tiered | pinned-pool | maru; the plan warns on a mismatch
                                            #   maru (mode devdax): kept for Maru's CXL KV store; put it first
      demotion_pass: {until_free: 20%, timeout: 30s}   # unstick a full fast node kswapd gave up on (see below)
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..util.quantities import parse_size
from ..util.vocab import (
    AUTO_ONLINE_BLOCKS,
    DAX_MODES,
    DAX_USES,
    DAX_ZONES,
    NUMA_BALANCING,
    NUMA_BALANCING_BY_NAME,
    THP_DEFRAG,
    THP_ENABLED,
)
from .checks import Checks, Percent
from .damon import Damon, Duration


def _choice_error(choices: tuple[str, ...] | list[str], value: Any, extra: str = "") -> PydanticCustomError:
    return PydanticCustomError("choice", "expected one of {choices}{extra}, got {got}",
                               {"choices": ", ".join(choices), "extra": extra, "got": _show(value)})


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _numa_balancing(value: Any) -> int:
    names = tuple(NUMA_BALANCING.values())
    if isinstance(value, bool):
        raise _choice_error(names, value, " (or 0-3)")
    if isinstance(value, int) and value in NUMA_BALANCING:
        return value
    if isinstance(value, str) and value in NUMA_BALANCING_BY_NAME:
        return NUMA_BALANCING_BY_NAME[value]
    raise _choice_error(names, value, " (or 0-3)")


def _enum(choices: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def check(value: Any) -> str:
        if isinstance(value, str) and value in choices:
            return value
        raise _choice_error(choices, value)

    return check


def _nonempty_map(what: str):  # type: ignore[no-untyped-def]
    def check(value: Any) -> Any:
        if isinstance(value, dict) and not value:
            raise PydanticCustomError("empty", f"expected at least one {what}, got an empty mapping")
        return value

    return check


def _strict_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PydanticCustomError("bool", "expected true or false, got {got}", {"got": _show(value)})


def _int_range(lo: int, hi: int):  # type: ignore[no-untyped-def]
    def check(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi:
            return value
        raise PydanticCustomError("range", "expected an integer from {lo} to {hi}, got {got}",
                                  {"lo": lo, "hi": hi, "got": _show(value)})

    return check


NumaBalancing = Annotated[int, BeforeValidator(_numa_balancing)]
U32 = Annotated[int, BeforeValidator(_int_range(0, 2**32 - 1))]
StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransparentHugepage(Strict):
    enabled: Annotated[str, BeforeValidator(_enum(THP_ENABLED))] | None = None
    defrag: Annotated[str, BeforeValidator(_enum(THP_DEFRAG))] | None = None


def _lru_gen_enabled(value: Any) -> bool | int:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and 0 <= value <= 7:
        return value
    raise PydanticCustomError("lru_gen", "expected true, false or the feature bits 0-7 (1 the multi-gen LRU, "
                              "2 leaf page-table accessed bits, 4 non-leaf), got {got}", {"got": _show(value)})


class LruGen(Strict):
    """The multi-gen LRU (6.1, /sys/kernel/mm/lru_gen/): see ``nodeagent.facts.knobs``."""

    enabled: Annotated[bool | int, BeforeValidator(_lru_gen_enabled)] | None = Field(
        None, description="lru_gen/enabled: true (every feature the hardware has), false, or the feature bits 0-7")
    # kstrtouint; kept in jiffies, so it reads back rounded up to a jiffy (the plan allows for that).
    min_ttl_ms: U32 | None = Field(
        None, description="lru_gen/min_ttl_ms: the working set (pages used within this long) the multi-gen LRU never "
        "evicts; when it cannot keep it, kswapd invokes the OOM killer. 0 (the default): never — with demotion on and "
        "swap, a node that runs out of memory thrashes instead of killing. Without swap, above 0, kswapd of a full "
        "node with nothing to demote to (the CXL node) kills while other nodes have room")


def _interleave_node(value: Any) -> int:
    if isinstance(value, str) and re.fullmatch(r"node(0|[1-9][0-9]{0,3})", value) and int(value[4:]) <= 1023:
        return int(value[4:])
    raise PydanticCustomError("interleave_node", "expected a node as its weight file is named, node0 to node1023, "
                              "got {got}", {"got": _show(value)})


InterleaveWeight = Annotated[int, BeforeValidator(_int_range(1, 255))]


class WeightedInterleave(Strict):
    """The system weights of MPOL_WEIGHTED_INTERLEAVE (6.9, /sys/kernel/mm/mempolicy/weighted_interleave/): a task
    that interleaves by weight (``numactl --weighted-interleave``, a KV pool spread over DRAM and CXL by bandwidth)
    puts ``weight`` pages on a node before moving to the next. Either ``auto: true`` (6.16: the kernel derives the
    weights from the nodes' bandwidth, as the firmware declares it) or the weights by hand (which turns ``auto``
    off): a node absent from ``weights`` keeps its weight."""

    auto: StrictBool | None = Field(
        None, description="weighted_interleave/auto (6.16): true derives every weight from HMAT/CDAT bandwidth; "
        "false keeps the weights as they are, set by hand")
    weights: Annotated[dict[Annotated[int, BeforeValidator(_interleave_node)], InterleaveWeight],
                       BeforeValidator(_nonempty_map("node weight"))] | None = Field(
        None, description="weighted_interleave/nodeN: {node2: 1, node0: 3}, 1-255 pages per round")

    @model_validator(mode="after")
    def _one_source(self) -> WeightedInterleave:
        if self.auto and self.weights:
            raise ValueError("auto: true derives every weight from the nodes' bandwidth, and writing a weight turns "
                             "auto off again: give weights (with auto: false, or without auto) or auto: true")
        if self.auto is None and self.weights is None:
            raise ValueError("weighted_interleave needs auto or weights")
        return self


class _KernelKnobs(Strict):
    """Kernel tiering knobs. Each maps to one sysctl or sysfs attribute (see ``nodeagent.facts.knobs``)."""

    numa_balancing: NumaBalancing | None = Field(
        None, description="kernel.numa_balancing: memory-tiering promotes hot pages of lower tiers (2); by name or 0-3")
    demotion_enabled: StrictBool | None = Field(
        None, description="/sys/kernel/mm/numa/demotion_enabled: reclaim demotes to a lower tier instead of freeing")
    transparent_hugepage: TransparentHugepage | None = Field(
        None, description="/sys/kernel/mm/transparent_hugepage/{enabled,defrag}")
    lru_gen: LruGen | None = Field(None, description="/sys/kernel/mm/lru_gen/{enabled,min_ttl_ms} (6.1)")
    weighted_interleave: WeightedInterleave | None = Field(
        None, description="/sys/kernel/mm/mempolicy/weighted_interleave/ (6.9; auto 6.16): see WeightedInterleave")

    @model_validator(mode="after")
    def _scan_periods(self) -> _KernelKnobs:
        lo = getattr(self, "numa_balancing_scan_period_min_ms", None)
        hi = getattr(self, "numa_balancing_scan_period_max_ms", None)
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"numa_balancing_scan_period_min_ms ({lo}) is above numa_balancing_scan_period_max_ms "
                             f"({hi}): the scan period adapts between the two; set min <= max")
        return self


def _integer_knobs() -> dict[str, Any]:
    """The integer knobs' fields, generated from their rows of the knob table (``nodeagent.facts.knobs``): the
    name from the key, the bounds (the newest kernel's range) and the description. A new integer sysctl is a row
    there, its line on the write allow-list and its rule in the simulator: nothing here."""
    from ..facts.knobs import KNOBS

    fields: dict[str, Any] = {}
    for knob in KNOBS:
        section, _, name = knob.key.partition(".")
        bounds = knob.profile_bounds
        if section != "kernel" or "." in name or not knob.doc or bounds is None:
            continue
        lo, hi = bounds
        fields[name] = (Annotated[int, BeforeValidator(_int_range(lo, hi))] | None, Field(None, description=knob.doc))
    return fields


Kernel = create_model("Kernel", __base__=_KernelKnobs, __module__=__name__, **_integer_knobs())
Kernel.__doc__ = _KernelKnobs.__doc__


def _dax_name(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"dax[0-9]+\.[0-9]+", value):
        return value
    raise PydanticCustomError("dax_name", "expected a DAX device name such as dax0.0, got {got}",
                              {"got": _show(value)})


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise PydanticCustomError("size", str(exc)) from None


def _nonempty(what: str):  # type: ignore[no-untyped-def]
    def check(value: Any) -> Any:
        if isinstance(value, list | tuple) and not value:
            raise PydanticCustomError("empty", f"expected at least one {what}, got an empty list")
        return value

    return check


DaxName = Annotated[str, BeforeValidator(_dax_name)]
NodeId = Annotated[int, BeforeValidator(_int_range(0, 1023))]
RegionId = Annotated[int, BeforeValidator(_int_range(0, 65535))]


class DaxMatch(Strict):
    """Which DAX devices a rule is for. Criteria combine with AND; ``all: true`` stands alone."""

    all: StrictBool | None = None
    devices: Annotated[tuple[DaxName, ...], BeforeValidator(_nonempty("device"))] | None = None
    target_nodes: Annotated[tuple[NodeId, ...], BeforeValidator(_nonempty("node"))] | None = None
    dax_regions: Annotated[tuple[RegionId, ...], BeforeValidator(_nonempty("region"))] | None = None
    min_size: Annotated[int, BeforeValidator(_size)] | None = None

    @model_validator(mode="after")
    def _criteria(self) -> DaxMatch:
        others = [k for k in ("devices", "target_nodes", "dax_regions", "min_size") if getattr(self, k) is not None]
        if self.all is False:
            raise ValueError("all: false matches no device; remove it, or give devices, target_nodes, "
                             "dax_regions or min_size")
        if self.all and others:
            raise ValueError(f"all: true matches every device and cannot be combined with {', '.join(others)}")
        if not self.all and not others:
            raise ValueError("a match needs a criterion: all: true, devices, target_nodes, dax_regions or min_size")
        return self


def _zone_fits(mode: str, zone: str | None) -> None:
    if mode == "system-ram" and zone is None:
        raise ValueError("zone is required with mode system-ram: movable (pageable memory the kernel tiers) "
                         "or normal (pinned pools, e.g. a KV-cache offload pool)")
    if mode == "devdax" and zone is not None:
        raise ValueError("zone applies only to mode system-ram (a devdax device's memory is not onlined)")


#: The smallest granularity of a DAX device's size (memremap_compat_align(): one 2 MiB subsection on x86-64).
DAX_SIZE_STEP = 2 * 1024**2


class DaxRest(Strict):
    """What the rest of a region becomes once a ``size:`` rule made Maru's device in it (its device N.0)."""

    mode: Annotated[str, BeforeValidator(_enum(DAX_MODES))]
    zone: Annotated[str, BeforeValidator(_enum(DAX_ZONES))] | None = None

    @model_validator(mode="after")
    def _zone_fits_mode(self) -> DaxRest:
        _zone_fits(self.mode, self.zone)
        return self


class DaxRule(Strict):
    """How the DAX devices a rule matches must be: ``mode`` and, for system-ram, the ``zone`` of their memory.

    With ``size`` (``use: maru`` only) the rule splits one dynamic DAX region (a CXL region's): a devdax device
    of ``size`` for Maru is made in it, and the region's first device keeps the rest, as ``rest`` says."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=63)
    match: DaxMatch
    mode: Annotated[str, BeforeValidator(_enum(DAX_MODES))]
    zone: Annotated[str, BeforeValidator(_enum(DAX_ZONES))] | None = None
    use: Annotated[str, BeforeValidator(_enum(DAX_USES))] | None = None
    size: Annotated[int, BeforeValidator(_size)] | None = None
    rest: DaxRest | None = None

    @model_validator(mode="after")
    def _zone_fits_mode(self) -> DaxRule:
        _zone_fits(self.mode, self.zone)
        if self.use == "maru" and self.mode != "devdax":
            raise ValueError("use: maru needs mode: devdax — Maru maps the DAX character device (/dev/daxX.Y) "
                             "itself, and a device onlined as system-ram has none")
        if self.size is not None:
            if self.use != "maru":
                raise ValueError("size makes a device for Maru in part of a region: it needs use: maru (and mode: "
                                 "devdax); without size the rule decides whole devices")
            if self.size <= 0 or self.size % DAX_SIZE_STEP:
                raise ValueError(f"size {self.size} is not a positive multiple of 2 MiB, the smallest size step of a "
                                 "DAX device; round it to the region's align (2 MiB on CXL regions)")
            m = self.match
            one = (m.dax_regions is not None and len(m.dax_regions) == 1 and m.devices is None) or \
                (m.devices is not None and len(m.devices) == 1 and m.dax_regions is None)
            if not one or m.all or m.target_nodes is not None or m.min_size is not None:
                raise ValueError("size splits one region: match exactly one region (dax_regions: [N]) or one device "
                                 "(devices: [daxN.0])")
            if self.rest is None:
                raise ValueError("size needs rest: what the rest of the region becomes, e.g. rest: {mode: "
                                 "system-ram, zone: normal}")
        elif self.rest is not None:
            raise ValueError("rest applies only with size (the part of a region a Maru device leaves)")
        return self


class DemotionPass(Strict):
    """A one-off demotion pass for fast nodes that kswapd gave up on.

    A fast node that filled up while demotion was off is given up by kswapd (``node_unreclaimable`` in
    ``/proc/zoneinfo``) and nothing wakes kswapd for it again: switching demotion and NUMA balancing's
    memory-tiering mode on afterwards demotes and promotes nothing. When the plan finds such a node, apply —
    after enabling demotion and onlining the CXL nodes, before DAMON and NUMA balancing start — reclaims from it
    by demotion until ``until_free`` of its memory is free or ``timeout`` passes, through the node's ``reclaim`` file
    (6.17) or else the root cgroup's ``memory.reclaim`` (cgroup v2, 5.19). A successful pass makes kswapd
    work on the node again.
    """

    until_free: Percent = 20.0
    timeout: Duration = 30_000_000

    @model_validator(mode="after")
    def _bounds(self) -> DemotionPass:
        if not 0 < self.until_free <= 90:
            raise ValueError(f"until_free: expected a percentage above 0 and at most 90%, got {self.until_free:g}%")
        if not 0 < self.timeout <= 600_000_000:
            raise ValueError("timeout: expected a duration above 0 and at most 10min")
        return self


def _serial(value: Any) -> int:
    """A memdev serial number (``serial`` in sysfs, the PCIe Device Serial Number): an integer or ``0x...``."""
    n = value
    if isinstance(value, str) and re.fullmatch(r"\s*(0[xX][0-9a-fA-F]+|[0-9]+)\s*", value):
        n = int(value.strip(), 0)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < 2**64:
        raise PydanticCustomError("serial", "expected a memdev serial number such as 0x4c454f0001 (`nodeagent facts` "
                                  "lists them), got {got}", {"got": _show(value)})
    if n == 0:
        raise PydanticCustomError("serial", "serial 0 is what a device without a serial number reports, so it "
                                  "names no memdev across boots; select such memdevs by host_bridges or "
                                  "without_region instead")
    return n


def _host_bridge(value: Any) -> str:
    if isinstance(value, str) and re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", value):
        return value
    raise PydanticCustomError("host_bridge", "expected a CXL host bridge such as pci0000:0c, got {got}",
                              {"got": _show(value)})


def _granularity(value: Any) -> int:
    n = value
    if isinstance(value, str):
        try:
            n = parse_size(value)
        except ValueError:
            n = None
    if isinstance(n, int) and not isinstance(n, bool) and n in CXL_GRANULARITIES:
        return n
    raise PydanticCustomError("granularity", "expected an interleave granularity in bytes: a power of two from 256 "
                              "to 16384 (256, 512, 1KiB ... 16KiB), got {got}", {"got": _show(value)})


#: What the kernel takes for a region's interleave (drivers/cxl/cxl.h: ways_to_eiw, granularity_to_eig).
CXL_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
CXL_GRANULARITIES = tuple(256 << i for i in range(7))


def _ways(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in CXL_WAYS:
        return value
    raise PydanticCustomError("ways", "expected interleave ways of {ways}, got {got}",
                              {"ways": ", ".join(map(str, CXL_WAYS)), "got": _show(value)})


def _unique_serials(value: Any) -> Any:
    if isinstance(value, list | tuple):
        seen: dict[int, int] = {}
        for i, v in enumerate(value):
            try:
                n = _serial(v)
            except PydanticCustomError:
                continue  # the item's own error says it
            if n in seen:
                raise PydanticCustomError("duplicate", "serial {serial} is listed twice (items {a} and {b}); a memdev "
                                          "is at one position of one region", {"serial": hex(n), "a": seen[n], "b": i})
            seen[n] = i
    return value


Serial = Annotated[int, BeforeValidator(_serial)]
HostBridge = Annotated[str, BeforeValidator(_host_bridge)]


class CxlMemdevs(Strict):
    """Which CXL memdevs a region rule is for: by serial (their position order, for an interleave set), by host
    bridge, or every memdev no region uses. Never by kernel name (memN follows probe order, which changes)."""

    serials: Annotated[tuple[Serial, ...], BeforeValidator(_nonempty("serial")),
                       BeforeValidator(_unique_serials)] | None = None
    host_bridges: Annotated[tuple[HostBridge, ...], BeforeValidator(_nonempty("host bridge"))] | None = None
    without_region: StrictBool | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> CxlMemdevs:
        given = [k for k in ("serials", "host_bridges", "without_region") if getattr(self, k) is not None]
        if self.without_region is False:
            raise ValueError("without_region: false selects no memdev; remove it, or give serials or host_bridges")
        if len(given) != 1:
            raise ValueError("memdevs needs exactly one of serials, host_bridges or without_region: true"
                             + (f" (got {', '.join(given)})" if given else ""))
        return self


class CxlRegionRule(Strict):
    """A RAM region the memdevs a rule selects must be in: one region per memdev (``ways: 1``, the default), or
    one interleave set of ``ways`` memdevs. The DAX rules (``memory.dax``) then decide the DAX device's zone."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=63)
    memdevs: CxlMemdevs
    type: Annotated[str, BeforeValidator(_enum(("ram",)))] = Field(
        "ram", description="ram: volatile capacity that becomes system RAM (pmem regions are not managed)")
    ways: Annotated[int, BeforeValidator(_ways)] = Field(
        1, description="1: a region of its own for every memdev selected; N: one region interleaving the N selected")
    granularity: Annotated[int, BeforeValidator(_granularity)] | None = Field(
        None, description="interleave granularity in bytes; absent: the CXL window's (root decoder's)")

    @model_validator(mode="after")
    def _set_size(self) -> CxlRegionRule:
        serials = self.memdevs.serials
        if serials is not None and self.ways > 1 and len(serials) != self.ways:
            raise ValueError(f"ways: {self.ways} interleaves {self.ways} memdevs, but memdevs.serials lists "
                             f"{len(serials)}; list one serial per position, in position order")
        return self


class Cxl(Strict):
    regions: tuple[CxlRegionRule, ...] | None = Field(
        None, description="CXL RAM regions, recreated at every boot from memdev serials; the first rule that "
                          "selects a memdev decides it")

    @field_validator("regions")
    @classmethod
    def _unique(cls, rules: tuple[CxlRegionRule, ...] | None) -> tuple[CxlRegionRule, ...] | None:
        names: set[str] = set()
        serials: dict[int, str] = {}
        for r in rules or ():
            if r.name in names:
                raise ValueError(f"two cxl region rules are named {r.name!r}; rule names must be unique")
            names.add(r.name)
            for s in r.memdevs.serials or ():
                if s in serials:
                    raise ValueError(f"serial {s:#x} is in rules {serials[s]!r} and {r.name!r}; a memdev is in one "
                                     "region: remove it from one of them")
                serials[s] = r.name
        return rules


class Memory(Strict):
    auto_online_blocks: Annotated[str, BeforeValidator(_enum(AUTO_ONLINE_BLOCKS))] | None = Field(
        None, description="/sys/devices/system/memory/auto_online_blocks: offline lets daxctl choose the zone")
    dax: tuple[DaxRule, ...] | None = Field(
        None, description="DAX devices (CXL.mem expanders): the first rule that matches a device decides")
    demotion_pass: DemotionPass | None = None  # see DemotionPass; absent: stuck fast nodes are only reported
    cxl: Cxl | None = None  # CXL regions (see CxlRegionRule and nodeagent.kinds.cxl_region)

    @field_validator("dax")
    @classmethod
    def _unique_names(cls, rules: tuple[DaxRule, ...] | None) -> tuple[DaxRule, ...] | None:
        seen: set[str] = set()
        for r in rules or ():
            if r.name in seen:
                raise ValueError(f"two dax rules are named {r.name!r}; rule names must be unique")
            seen.add(r.name)
        # The first rule that matches a device decides it: a Maru rule after a rule for every device keeps
        # nothing as devdax (an extends: merge appends rules, so this is easy to write by accident).
        catch_all = next((r for r in rules or () if r.match.all), None)
        for r in rules or ():
            if r.use == "maru" and catch_all is not None and r is not catch_all and \
                    rules.index(r) > rules.index(catch_all):  # type: ignore[union-attr]
                raise ValueError(f"rule {r.name!r} (use: maru) comes after rule {catch_all.name!r}, which matches "
                                 "every device and so decides them all: put the Maru rule first")
        return rules


class Metadata(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=63)
    description: str = ""


class NodeProfile(Strict):
    """A node profile: how a tiered-memory node must be. A key that is absent is unmanaged."""

    api_version: Literal["nodeagent/v1"] = Field(alias="apiVersion")
    kind: Literal["NodeProfile"]
    metadata: Metadata
    kernel: Kernel = Kernel()
    memory: Memory = Memory()
    checks: Checks = Checks()
    damon: Damon | None = None  # see nodeagent.profile.damon

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
