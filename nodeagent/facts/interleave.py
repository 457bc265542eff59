"""Weighted interleave's system weights (fact section ``interleave``): ``/sys/kernel/mm/mempolicy/
weighted_interleave/`` (6.9, mm/mempolicy.c), read only.

- ``nodeN``: the weight MPOL_WEIGHTED_INTERLEAVE gives node N — how many pages go to it before the next node —
  for tasks that do not set their own. 6.9-6.15 list every possible node; since 6.16 only nodes with memory, a
  file appearing when a node's memory comes online and leaving when its last block goes.
- ``auto`` (6.16): ``true`` while the kernel derives the weights from the nodes' bandwidth (HMAT/CDAT, the
  access1 coordinates), ``false`` once they are set by hand (writing any ``nodeN`` turns it off). A 6.18 kernel
  names the file ``__auto_type`` (tests/data/mempolicy/weighted-interleave-6.18.txt): the section takes
  whichever it finds, by probing, never by version.
- ``bandwidth``: the nodes whose bandwidth the firmware declares (``nodeN/access1/initiators/read_bandwidth``);
  with none, writing ``auto`` true fails with ENODEV.
"""

from __future__ import annotations

from typing import Any

from ..host import Host
from ..util.dataclass import dataclass
from ..util.errors import HostError
from . import SECTIONS, Facts
from .numa import NODE

DIR = "/sys/kernel/mm/mempolicy/weighted_interleave"
#: The names the auto switch has had: ``auto`` (6.16, 6.17), ``__auto_type`` (6.18: see the module docs).
AUTO_NAMES = ("auto", "__auto_type")


@dataclass(frozen=True)
class InterleaveFacts:
    present: bool  # the directory exists (6.9+, CONFIG_NUMA)
    weights: dict[int, int]  # node → weight, as nodeN shows it
    auto_file: str | None = None  # the auto switch's name where the kernel has one (6.16+)
    auto: bool | None = None
    bandwidth: tuple[int, ...] = ()  # nodes with a declared bandwidth
    known: bool = True  # False: facts gathered before this section existed

    def auto_path(self) -> str | None:
        return f"{DIR}/{self.auto_file}" if self.auto_file else None


def gather(host: Host) -> dict[str, Any]:
    try:
        names = host.fs.listdir(DIR) if host.fs.exists(DIR) else None
    except HostError:
        names = None
    if names is None:
        return {"present": False, "weights": {}, "auto_file": None, "auto": None, "bandwidth": []}
    weights: dict[str, int] = {}
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            text = (host.read_opt(f"{DIR}/{name}") or "").strip()
            if text.isdigit():
                weights[name[4:]] = int(text)
    auto_file = next((n for n in AUTO_NAMES if n in names), None)
    auto_text = (host.read_opt(f"{DIR}/{auto_file}") or "").strip() if auto_file else ""
    nodes = [n[4:] for n in (host.fs.listdir(NODE) if host.fs.exists(NODE) else []) if n[4:].isdigit()
             and n.startswith("node")]
    bandwidth = sorted(int(n) for n in nodes if host.fs.exists(f"{NODE}/node{n}/access1/initiators/read_bandwidth"))
    return {"present": True, "weights": dict(sorted(weights.items(), key=lambda kv: int(kv[0]))),
            "auto_file": auto_file, "auto": {"true": True, "false": False}.get(auto_text), "bandwidth": bandwidth}


def from_facts(facts: Facts) -> InterleaveFacts:
    data = facts.sections.get("interleave")
    if not data:
        return InterleaveFacts(False, {}, known=False)
    return InterleaveFacts(bool(data.get("present")), {int(n): int(w) for n, w in data.get("weights", {}).items()},
                           data.get("auto_file"), data.get("auto"), tuple(int(n) for n in data.get("bandwidth", ())))


SECTIONS["interleave"] = gather
