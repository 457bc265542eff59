"""Weighted interleave's system weights (``kernel.weighted_interleave``): one target, the whole table.

A task that interleaves by weight (MPOL_WEIGHTED_INTERLEAVE, 6.9: ``numactl --weighted-interleave``, an engine's
KV pool spread over DRAM and CXL in proportion to their bandwidth) puts a node's weight in pages on it before
moving to the next node. The profile gives either the weights by hand or ``auto: true`` (6.16: the kernel
derives them from the bandwidth the firmware declares, HMAT/CDAT)::

    kernel:
      weighted_interleave: {weights: {node0: 3, node2: 1}}   # DRAM 3 : CXL 1
      # or: weighted_interleave: {auto: true}

The weights, and ``auto``, are one target because the kernel ties them together (mm/mempolicy.c): writing any
weight turns ``auto`` off, and turning it on rewrites every weight — so apply writes the weights first and the
switch last, and revert puts back the whole table as it was. With ``weights``, the plan also asks for
``auto: false`` where the kernel has the switch: weights set by hand stay as set (in auto mode, onlining a node
would recompute them).

Since 6.16 a node has a weight file only while it has memory: a CXL node the plan's DAX rules bring online has
none at plan time. Its weight is planned (before: not online yet) and applied after the DAX changes
(``registry.py``); a node that neither has a file nor comes online is a problem of the plan.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ...facts import Facts
from ...facts.interleave import AUTO_NAMES, DIR, from_facts
from ...host import Host
from ...plan import Change, Problem
from ...state import Original, PlanState
from ..base import ApplyContext, Kind, PlanContext, ResourcePlan, projection_of

if TYPE_CHECKING:
    from ...profile import LoadedProfile

KIND = "interleave"
TARGET = "kernel.weighted_interleave"


def _weights(value: Any) -> dict[int, Any]:
    """``{node: weight}`` from a profile's mapping (node ids as the model or a stored record keys them); a weight
    of None in a change's ``before``: the node has no file yet."""
    if value is None:
        return {}
    items = value.items() if isinstance(value, dict) else iter(value)
    return {int(n): (int(w) if w is not None else None) for n, w in items}


def label(state: dict[str, Any]) -> str:
    parts = []
    if state.get("auto") is not None:
        parts.append(f"auto {'on' if state['auto'] else 'off'}")
    for n, w in sorted(_weights(state.get("weights")).items()):
        parts.append(f"node{n}={w if w is not None else '(not online yet)'}")
    return ", ".join(parts) or "-"


def _state(auto: bool | None, weights: dict[int, int | None]) -> dict[str, Any]:
    return {"auto": auto, "weights": {str(n): w for n, w in sorted(weights.items())}}


def plan(loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
    out = ResourcePlan()
    want = getattr(loaded.profile.kernel, "weighted_interleave", None)
    if want is None:
        return out
    f = from_facts(facts)
    release = facts.kernel_release or "unknown"
    if not f.known:
        out.problems.append(Problem(KIND, TARGET, f"{TARGET}: the facts were gathered by a nodeagent that did not "
                                    "read weighted interleave's weights", hint="gather the facts again"))
        return out
    if not f.present:
        out.problems.append(Problem(KIND, TARGET, f"{TARGET}: {DIR} does not exist on kernel {release} (weighted "
                                    "interleave arrived in 6.9; it needs CONFIG_NUMA)",
                                    hint=f"remove {TARGET} from the profile, or run a kernel >= 6.9"))
        return out
    weights = _weights(want.weights)
    auto = want.auto
    if weights and auto is None and f.auto_file is not None:
        auto = False  # weights by hand stay as set (see the module docs)
    if auto is not None and f.auto_file is None:
        out.problems.append(Problem(KIND, TARGET, f"{TARGET}.auto: {DIR} has no auto switch on kernel {release} "
                                    "(it arrived in 6.16)", hint="give the weights by hand, or run a kernel >= 6.16"))
        return out
    if auto and not f.bandwidth:
        out.problems.append(Problem(
            KIND, TARGET, f"{TARGET}.auto: the firmware declares no node's bandwidth (no "
            "/sys/devices/system/node/nodeN/access1/initiators/read_bandwidth: no HMAT or CDAT figures), so the "
            "kernel refuses auto with ENODEV", hint="give the weights by hand (weights: {node0: 3, node2: 1})"))
        return out
    pending: dict[int, str] = {}
    for n in sorted(weights):
        if n in f.weights:
            continue
        proj = projection_of(loaded, facts, ctx)
        if n in proj.pending and f.auto_file is not None:
            pending[n] = proj.pending[n]
            continue
        why = ("since 6.16 only a node with memory has one, and no memory.dax rule of this profile brings node"
               f"{n} online" if f.auto_file is not None else "not a possible node of this machine")
        out.problems.append(Problem(KIND, TARGET, f"{TARGET}.weights.node{n}: {DIR}/node{n} does not exist ({why})",
                                    hint=f"remove node{n} from the weights, or bring its memory online first"))
    if out.problems:
        return out
    differ = {n: w for n, w in weights.items() if f.weights.get(n) != w}
    auto_differs = auto is not None and f.auto is not auto
    if not differ and not auto_differs:
        out.unchanged.append(TARGET)
        return out
    before = _state(f.auto, {n: f.weights.get(n) for n in differ})
    after = _state(auto, differ) if not auto else _state(True, {})
    reason = "profile sets it"
    if pending:
        reason += "; " + ", ".join(f"node{n} comes online with {d}" for n, d in sorted(pending.items()))
    out.changes.append(Change(KIND, TARGET, "set", before, after, reason=reason, path=DIR,
                              before_label=label(before), after_label=label(after), nodes=tuple(sorted(differ)),
                              needs=tuple(sorted(set(pending.values())))))
    return out


def _auto_path(host: Host) -> str | None:
    return next((f"{DIR}/{n}" for n in AUTO_NAMES if host.fs.exists(f"{DIR}/{n}")), None)


class InterleaveResource(Kind):
    kind = KIND
    revertible = True
    #: What its apply writes: the node weights and the auto switch under either of its names.
    writes: tuple[str, ...] = (re.escape(DIR) + r"/(node[0-9]+|auto|__auto_type)",)

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        return plan(loaded, facts, ctx)

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        """The weights first, then the switch: writing a weight turns auto off, turning it on rewrites them."""
        done = []
        for n, w in sorted(_weights(change.after.get("weights")).items()):
            host.write(f"{DIR}/node{n}", str(w))
            done.append(f"node{n}={w}")
        auto = change.after.get("auto")
        if auto is not None:
            path = _auto_path(host)
            if path is None:
                raise FileNotFoundError(f"{DIR}: no auto switch")
            if (host.read_opt(path) or "").strip() != ("true" if auto else "false"):
                host.write(path, "true" if auto else "false")
            done.append(f"auto {'on' if auto else 'off'}")
        return f"set {', '.join(done)} in {DIR}"

    def original(self, change: Change, facts: Facts) -> tuple[str, Original]:
        return self._whole(facts)

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        f = from_facts(facts)
        return self._whole(facts) if target == TARGET and f.present else None

    @staticmethod
    def _whole(facts: Facts) -> tuple[str, Original]:
        """The whole table as it is, every node's weight and the switch: what revert puts back."""
        f = from_facts(facts)
        return TARGET, Original(KIND, DIR, _state(f.auto, dict(f.weights)))

    def revert(self, target: str, original: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Pure: back to the recorded table. Auto on: turning it on is the whole revert (it rewrites every weight).
        Else each node's recorded weight, a node recorded without one (it came online since) back to 1, where
        the kernel starts a node; then the switch off where it was off."""
        f = from_facts(facts)
        if not f.present:
            raise ValueError(f"{TARGET}: {DIR} does not exist on this kernel any more")
        was = original.value or {}
        was_auto = was.get("auto")
        if was_auto and not f.bandwidth:
            # The boot state reads auto on, but with no bandwidth figures the kernel refuses to turn it on again
            # (ENODEV): the recorded weights (every node at 1 then) are what can be put back.
            was_auto = None
        if was_auto:
            if f.auto:
                return []
            after = _state(True, {})
        else:
            recorded = _weights(was.get("weights"))
            back = {n: recorded.get(n, 1) for n in f.weights if f.weights[n] != recorded.get(n, 1)}
            auto = False if was_auto is False and f.auto else None
            if not back and auto is None:
                return []
            after = _state(auto, back)
        before = _state(f.auto, {n: f.weights.get(n) for n in _weights(after["weights"])})
        return [Change(KIND, target, "revert", before, after, path=DIR, before_label=label(before),
                       after_label=label(after),
                       reason=f"the table before nodeagent managed it (recorded {original.recorded or '?'})")]
