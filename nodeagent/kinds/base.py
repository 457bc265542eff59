"""The protocol every resource kind follows, and what the planner hands it.

A kind owns the whole lifecycle of what it manages: ``plan`` (pure), ``apply`` (one change), the ``original`` it
records before its first change, and — optionally, see :class:`Reverting` — the current value it records for a
managed setting that already matches (:meth:`Reverting.current`), the ``revert`` it plans from a recorded original
and the ownership records it drops once reverted (``forget``). Its drift causes register in
:mod:`nodeagent.drift.causes` under its kind. The paths it writes it declares in ``writes``; they are on the one
allow-list of the host layer (:data:`nodeagent.host.fs.WRITE_ALLOW`). A kind without the optional parts still
plans and applies; ``revert`` then reports its recorded originals as a non-blocking problem (undo by hand).
A kind whose changes take DAX memory away or rezone it says which (optional ``rezones(change) -> bool``): the
executor's ordering puts the kdamond stops marked ``before_dax`` ahead of the first of them
(:func:`nodeagent.engine.core.rezones`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from ..facts import Facts
from ..host import Host
from ..plan import Change, Problem
from ..state import Original, Ownership, PlanState
from ..util.dataclass import dataclass

if TYPE_CHECKING:
    from ..profile import LoadedProfile


@dataclass(frozen=True)
class PlanContext:
    allow_disruptive: bool = False
    # the records planning reads (ownership, last applied, originals); a facts document's JSON is validated
    state: PlanState = field(default_factory=PlanState)
    # nodeagent.kinds.projection.NodeProjection: the node once the earlier kinds are done (make_plan fills it in)
    projection: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, PlanState):
            object.__setattr__(self, "state", PlanState.coerce(self.state))


def projection_of(loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> Any:
    """The node's projection the planner put in ``ctx`` (made here when a kind is planned on its own)."""
    if ctx.projection is not None:
        return ctx.projection
    from .projection import project  # the projection reads the DAX rules, so it sits above the kinds

    return project(loaded, facts, ctx.allow_disruptive)


@dataclass
class ResourcePlan:
    changes: list[Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


@dataclass
class ApplyContext:
    """What an apply step may use besides the host: options, the state store, a progress callback."""

    allow_disruptive: bool = False
    state: Any = None  # nodeagent.state.StateStore (ownership records: read and write them with state.edit)
    progress: Callable[[str, int, int], None] | None = None  # (what, done, total), for long operations
    scratch: dict[str, Any] = field(default_factory=dict)  # notes a resource leaves for its later changes

    def report(self, what: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(what, done, total)


class Resource(Protocol):
    kind: str
    #: Regular expressions of every path its apply (and revert) writes through the host layer; each must be on the
    #: host layer's one allow-list (:data:`nodeagent.host.fs.WRITE_ALLOW`), which holds nothing a kind does not
    #: declare here (besides nodeagent's own files): tests/unit/test_write_allow.py.
    writes: tuple[str, ...]

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        """Pure: compare what the profile wants with the facts. Never touches the node."""
        ...

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        """Carry out one change of this kind; return a short description of what was done."""
        ...

    def original(self, change: Change, facts: Facts) -> tuple[str, Original | dict[str, Any]] | None:
        """``(target, record)`` to remember before ``change`` is made, so that ``revert`` can put it back:
        an :class:`~nodeagent.state.Original` (or a dict with ``kind``, ``path`` and ``value``); the first record
        of a target is kept."""
        ...


class Reverting(Protocol):
    """The optional revert half of a kind's lifecycle (the engine looks each method up, so a kind may have
    some or none)."""

    #: Originals targets that stand for every item of the kind (``damon.kdamonds``: all of nodeagent's kdamonds).
    covers_kind: frozenset[str]

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        """``(original target, record)`` of a managed setting that already matches the profile: recorded at the
        first apply that manages it, so that revert restores what it was before nodeagent managed it."""
        ...

    def revert(self, target: str, original: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Pure: the changes that put ``target`` back as ``original`` says (none: it already is; disruptive ones
        flagged). Raises ValueError, with the message to show, when it cannot be put back."""
        ...

    def forget(self, target: str, ownership: Ownership) -> None:
        """Drop the ownership records of a reverted ``target``."""
        ...
