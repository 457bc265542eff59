"""Priming a kdamond whose schemes act on young pages: one walk over its memory before they first apply.

DAMON's young test (``damon_folio_young()``, mm/damon/paddr.c) reads "an accessed bit set **or the idle flag
clear**", and only DAMON sets the idle flag: its sampling (one page per region per sample) and a young filter, on
every page it finds young. A page DAMON never checked therefore passes as young — one reclaim demoted (the
demotion pass, kswapd) or one allocated before the kdamond ran. A scheme that acts on young pages through a young
filter (``migrate_hot`` skipping pages not accessed since the last check) takes all of them along in the first
hot region it finds: measured on 6.12 after a demotion pass, the promotion kdamond moved 190-357 MiB of cold
pages back to DRAM in its first two applications (bench/placement/README.md, "What 6.12 makes hard").

So such a kdamond starts with one more scheme, last in its list: ``lru_deprio`` on every region, with a young
filter that skips young pages (and so marks them idle) and deactivates the pages already idle. Its quota bounds
each pass to 1 GiB per aggregation interval (a region is walked without yielding the CPU; the kernel resumes
where the quota stopped it, so passes cover the memory in turn). Until the walk has covered the memory, the
young-acting schemes match no region (their minimum region size is staged as the largest value); then the kdamond
is committed to the profile's schemes, same pid. The kernel keeps every scheme by index at a commit, so the
profile's schemes keep their statistics. Pure functions here; ``apply`` does the writes and the wait.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...profile.resolved import Frozen
from . import model

if TYPE_CHECKING:  # the read-only commands import this module's PRIMING (the renderer) and never pydantic
    from ...profile.damon import Kdamond, Scheme

SCHEMES = "contexts/0/schemes"
#: How an outcome message names the walk (the text renderer prints such a message: it is all the walk leaves).
PRIMING = "young-filter priming walk"

Writes = list[tuple[str, str]]


def acts_on_young(s: Scheme) -> bool:
    """Whether a young filter restricts ``s`` to young pages: it skips those not young, or allows only young."""
    return any(f.type == "young" and f.matching == f.allow for f in s.filters)


#: How much memory one pass of the walk may cover (its quota, per aggregation interval).
WALK_PER_PASS = 1 << 30
#: A region size no region reaches: a scheme staged with it as its minimum applies nowhere.
NOWHERE = str(2**64 - 1)


def marker(kd: Kdamond) -> Scheme:
    """The walk: every region, each aggregation interval, at most :data:`WALK_PER_PASS` a pass; young pages are
    skipped (and marked), idle ones deactivated (``lru_deprio`` neither moves a page nor touches its idle flag).
    Validated values in plain data, shaped like a :class:`~nodeagent.profile.damon.Scheme` (plan runs from the
    profile cache without pydantic)."""
    aggr = kd.monitoring.aggregate
    return Frozen({  # type: ignore[return-value]
        "action": "lru_deprio", "target_node": None, "dests": None,
        "access": {k: {"min": None, "max": None} for k in ("size", "nr_accesses", "age")},
        "quota": {"time": None, "size": WALK_PER_PASS, "reset_interval": max(-(-aggr // 1000), 1) * 1000,
                  "weights": {"size": 0, "nr_accesses": 0, "age": 0}, "goals": [], "goal_tuner": None},
        "watermarks": None,
        "filters": [{"type": "young", "matching": True, "allow": False, "memcg": None, "range": None,
                     "target": None, "size": None}],
        "apply_interval": aggr, "dest_free": None, "max_snapshots": None})


def wanted(kd: Kdamond, schemes: list[Scheme], caps: dict, has_apply_interval: bool) -> bool:
    """Priming applies to a kdamond that asks for it, has a young-acting scheme and runs where the walk can."""
    # a profile validated by an older nodeagent (a last-applied record from before ``prime``) reads as the default
    return (getattr(kd, "prime", True) and any(acts_on_young(s) for s in schemes) and has_apply_interval
            and "lru_deprio" in caps.get("actions", ()) and "young" in caps.get("filter_types", ()))


def stage_writes(schemes: list[Scheme], written: list[Writes], walk: Writes) -> tuple[tuple[str, str], ...]:
    """The scheme files of the priming configuration: the profile's schemes (the young-acting ones applying
    nowhere), then the walk. Writing ``nr_schemes`` recreates every scheme directory, so all of them are
    written."""
    n = len(written)
    out: Writes = [(f"{SCHEMES}/nr_schemes", str(n + 1))]
    for j, (s, w) in enumerate(zip(schemes, written, strict=True)):
        paused = acts_on_young(s)
        out += [(f"{SCHEMES}/{j}/{k}", NOWHERE if paused and k == "access_pattern/sz/min" else v) for k, v in w]
    out += [(f"{SCHEMES}/{n}/{k}", v) for k, v in walk]
    return tuple(out)


def final_writes(writes: tuple[tuple[str, str], ...] | list) -> list[tuple[str, str]]:
    """The scheme files of the profile's own configuration (what the commit after the walk stages)."""
    return [(p, v) for p, v in writes if p.startswith(f"{SCHEMES}/")]


def walk_index(stage: tuple[tuple[str, str], ...] | list) -> int:
    """The walk's scheme index in a staged priming configuration (the last one)."""
    return int(dict(stage)[f"{SCHEMES}/nr_schemes"]) - 1


def walk_bytes(config: dict[str, str]) -> int:
    """The memory the kdamond monitors: the sum of its targets' regions."""
    return sum(end - start for start, end in model.parse(config).regions())
