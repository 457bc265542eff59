"""The base every resource kind derives from (:class:`Kind`), and what the planner hands it.

A kind owns the whole lifecycle of what it manages: ``plan`` (pure), ``apply`` (one change), the ``original`` it
records before its first change, the current value it records for a managed setting that already matches
(``current``), the ``revert`` it plans from a recorded original (a :attr:`Kind.revertible` kind), what it can undo
when the originals were lost (``revert_unrecorded``) and the ownership records it drops once reverted
(``forget``). Every hook but ``plan`` and ``apply`` has a default. Its drift causes register in
:mod:`nodeagent.drift.causes` under its kind. The paths it writes it declares in ``writes``; they are on the one
allow-list of the host layer (:data:`nodeagent.host.fs.WRITE_ALLOW`). A kind that is not revertible still plans
and applies; ``revert`` then reports its recorded originals as a non-blocking problem (undo by hand). A kind
whose changes take DAX memory away or rezone it says which (``rezones(change)``): the executor's ordering puts
the kdamond stops marked ``before_dax`` ahead of the first of them (:func:`nodeagent.engine.core.rezones`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

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


class Kind:
    """One managed kind's lifecycle: plan (pure), apply one change, and what revert needs. Every hook but
    :meth:`plan` and :meth:`apply` has a default, so the engine calls hooks, never looks them up; the registry
    (:mod:`nodeagent.kinds.registry`) checks each kind against this base when it is imported."""

    kind: str = ""
    #: Regular expressions of every path its apply (and revert) writes through the host layer; each must be on the
    #: host layer's one allow-list (:data:`nodeagent.host.fs.WRITE_ALLOW`), which holds nothing a kind does not
    #: declare here (besides nodeagent's own files): tests/unit/test_write_allow.py.
    writes: tuple[str, ...] = ()
    #: Whether :meth:`revert` can put this kind's settings back (``nodeagent revert``).
    revertible: bool = False
    #: Facts sections its revert needs beyond planning's (the CXL bus for the regions nodeagent made).
    revert_sections: frozenset[str] = frozenset()
    #: Originals targets that stand for every item of the kind (``damon.kdamonds``: all of nodeagent's kdamonds).
    covers_kind: frozenset[str] = frozenset()

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        """Pure: compare what the profile wants with the facts. Never touches the node."""
        raise NotImplementedError

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        """Carry out one change of this kind; return a short description of what was done."""
        raise NotImplementedError

    def original(self, change: Change, facts: Facts) -> tuple[str, Original | dict[str, Any]] | None:
        """``(target, record)`` to remember before ``change`` is made, so that ``revert`` can put it back:
        an :class:`~nodeagent.state.Original` (or a dict with ``kind``, ``path`` and ``value``); the first record
        of a target is kept. None: nothing to remember."""
        return None

    def current(self, target: str, facts: Facts) -> tuple[str, Original] | None:
        """``(original target, record)`` of a managed setting that already matches the profile: recorded at the
        first apply that manages it, so that revert restores what it was before nodeagent managed it."""
        return None

    def revert(self, target: str, original: Original, facts: Facts, state: PlanState) -> list[Change]:
        """Pure: the changes that put ``target`` back as ``original`` says (none: it already is; disruptive ones
        flagged). Raises ValueError, with the message to show, when it cannot be put back. Only called on a
        :attr:`revertible` kind."""
        raise NotImplementedError

    #: Its items are undone from its ownership records, not only from originals (nodeagent's own kdamonds): when
    #: the originals record is lost, :meth:`revert_unrecorded` still undoes them.
    reverts_from_ownership: bool = False

    def revert_unrecorded(self, facts: Facts, state: PlanState, why: str) -> tuple[list[Change], list[Problem]]:
        """Revert's changes when the originals record was lost (``why``: what became of it), from this kind's
        ownership records alone, with the problem that says what is left as it is. Default: nothing."""
        return [], []

    def forget(self, target: str, ownership: Ownership) -> None:
        """Drop the ownership records of a reverted ``target``."""

    def rezones(self, change: Change) -> bool:
        """Whether ``change`` takes DAX memory away or rezones it (DAMON stops first what migrates into it)."""
        return False


#: The name the engine and the tests used before kinds had a base class.
Resource = Kind


def check_kind(k: Kind) -> list[str]:
    """What is wrong with kind ``k`` against the base (empty: nothing)."""
    cls = type(k)
    errors = []
    if not isinstance(k, Kind):
        return [f"{cls.__name__}: not a nodeagent.kinds.base.Kind"]
    if not k.kind:
        errors.append(f"{cls.__name__}: no kind name")
    for hook in ("plan", "apply"):
        if getattr(cls, hook) is getattr(Kind, hook):
            errors.append(f"{k.kind}: does not define {hook}()")
    if k.revertible and cls.revert is Kind.revert:
        errors.append(f"{k.kind}: revertible, but does not define revert()")
    if not k.revertible and cls.revert is not Kind.revert:
        errors.append(f"{k.kind}: defines revert() but is not marked revertible")
    return errors
