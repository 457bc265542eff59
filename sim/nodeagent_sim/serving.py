"""A serving engine's memory on a simulated node: what ``verify-serving`` reads and what the bind probe asks.

- :func:`set_mempolicy` answers the bind probe (:mod:`nodeagent.host.numabind`) as ``set_mempolicy(2)`` does:
  EINVAL for a node that is not online or has no memory; a mode the node's seccomp/cpuset forbids (modelled by
  :func:`deny`, kept in ``.nodeagent-machine/mempolicy.json``) fails with the errno given there.
- :func:`start_engine` lays out a running engine: its unit's cgroup under the cgroup v2 mount
  (``system.slice/NAME/{cgroup.procs,memory.numa_stat}``) and ``/proc/PID/numa_maps``, in the kernel's formats
  (Documentation/admin-guide/cgroup-v2.rst ``memory.numa_stat``: one line per item, ``N<node>=<bytes>`` for every
  node with memory; Documentation/filesystems/proc.rst and fs/proc/task_mmu.c ``show_numa_map``: one line per
  mapping, pages per node).
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path

from nodeagent.util.kfmt import format_list

from . import ownfiles
from .hardware import mbind_target

POLICY = "mempolicy.json"
PAGE = 4096

#: memory.numa_stat's items, in the kernel's order, as the 6.12 guest prints them
#: (tests/realkernel/captured/memory.numa_stat-kvpool.txt); the workingset and pgdemote/pgpromote items are counts.
NUMA_STAT_ITEMS = ("anon", "file", "kernel_stack", "pagetables", "sec_pagetables", "shmem", "file_mapped",
                   "file_dirty", "file_writeback", "swapcached", "anon_thp", "file_thp", "shmem_thp",
                   "inactive_anon", "active_anon", "inactive_file", "active_file", "unevictable",
                   "slab_reclaimable", "slab_unreclaimable", "workingset_refault_anon", "workingset_refault_file",
                   "workingset_activate_anon", "workingset_activate_file", "workingset_restore_anon",
                   "workingset_restore_file", "workingset_nodereclaim", "pgdemote_kswapd", "pgdemote_direct",
                   "pgdemote_khugepaged", "pgpromote_success")


def deny(root: Path, modes: dict[str, str]) -> None:
    """Make ``set_mempolicy`` fail for these modes (``{"membind": "EPERM"}``), as a seccomp filter does."""
    ownfiles.replace(root, POLICY, json.dumps(modes))


def set_mempolicy(root: Path, mode: str, nodes: tuple[int, ...]) -> None:
    text = ownfiles.read_text(root, POLICY)
    denied = json.loads(text) if text else {}
    if mode in denied:
        code = getattr(errno, denied[mode], errno.EPERM)
        raise OSError(code, f"{errno.errorcode[code]}: {os.strerror(code)} (seccomp/cpuset of the simulated node)")
    for n in nodes if mode == "membind" else nodes[:1]:
        try:
            mbind_target(Path(root), n)
        except OSError as exc:
            raise OSError(exc.errno, f"EINVAL: {exc.strerror}") from None


@dataclass(frozen=True)
class Mapping:
    """One mapping of the engine: ``pages`` (4 KiB) per node, its policy as numa_maps prints it."""

    start: int
    pages: dict[int, int]
    policy: str = "default"
    kind: str = "anon"  # anon | heap | stack | file=<path>


def _memory_nodes(root: Path) -> list[int]:
    base = Path(root) / "sys/devices/system/node"
    text = (base / "has_memory").read_text().strip() if (base / "has_memory").is_file() else "0"
    from nodeagent.util.kfmt import parse_list

    return parse_list(text)


def numa_maps_text(maps: list[Mapping]) -> str:
    lines = []
    for m in maps:
        head = f"{m.start:x} {m.policy}" + ("" if m.kind == "anon" else f" {m.kind}")
        total = sum(m.pages.values())
        if not total:
            lines.append(head)
            continue
        anon = total if not m.kind.startswith("file=") else 0
        parts = [head]
        if anon:
            parts += [f"anon={anon}", f"dirty={anon}"]
        else:
            parts.append(f"mapped={total}")
        # no active=: the kernel prints it only when fewer pages are active than mapped (a fresh, touched pool)
        parts += [f"N{n}={p}" for n, p in sorted(m.pages.items()) if p]
        parts.append(f"kernelpagesize_kB={PAGE // 1024}")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


def numa_stat_text(root: Path, anon: dict[int, int], file: dict[int, int], unevictable: dict[int, int]) -> str:
    nodes = _memory_nodes(root)
    values = {"anon": anon, "file": file, "active_anon": anon, "active_file": file, "unevictable": unevictable,
              "file_mapped": file}
    return "".join(f"{item} " + " ".join(f"N{n}={values.get(item, {}).get(n, 0)}" for n in nodes) + "\n"
                   for item in NUMA_STAT_ITEMS)


def start_engine(root: Path, unit: str, pid: int, maps: list[Mapping], *, locked: bool = True,
                 slice_: str = "system.slice") -> Path:
    """Lay out a running engine (its unit's cgroup and its numa_maps); the cgroup directory is returned.
    ``locked``: the pool is mlocked (counted ``unevictable``), as an engine that pins with mlock does."""
    root = Path(root)
    anon: dict[int, int] = {}
    file: dict[int, int] = {}
    for m in maps:
        into = file if m.kind.startswith("file=") else anon
        for n, p in m.pages.items():
            into[n] = into.get(n, 0) + p * PAGE
    cg = root / "sys/fs/cgroup" / slice_ / unit
    cg.mkdir(parents=True, exist_ok=True)
    (cg / "cgroup.procs").write_text(f"{pid}\n")
    (cg / "memory.numa_stat").write_text(numa_stat_text(root, anon, file, anon if locked else {}))
    (cg / "memory.current").write_text(f"{sum(anon.values()) + sum(file.values())}\n")
    proc = root / "proc" / str(pid)
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "numa_maps").write_text(numa_maps_text(maps))
    (proc / "comm").write_text(unit.split(".")[0][:15] + "\n")
    return cg


def policy_text(mode: str, nodes: list[int]) -> str:
    """A mapping's policy as numa_maps prints it (mm/mempolicy.c mpol_to_str)."""
    word = {"membind": "bind", "preferred": "prefer", "none": "default"}[mode]
    return word if word == "default" else f"{word}:{format_list(nodes)}"


__all__ = ["Mapping", "NUMA_STAT_ITEMS", "deny", "numa_maps_text", "numa_stat_text", "policy_text",
           "set_mempolicy", "start_engine"]
