"""The protocol every resource kind follows, and what the planner hands it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..facts import Facts
from ..host import Host
from ..plan import Change, Problem
from ..state import PlanState

if TYPE_CHECKING:
    from ..profile import LoadedProfile


@dataclass(frozen=True)
class PlanContext:
    allow_disruptive: bool = False
    # the records planning reads (ownership, last applied, originals); a facts document's JSON is validated
    state: PlanState = field(default_factory=PlanState)
    # nodeagent.projection.NodeProjection: the node once the earlier kinds are done (make_plan fills it in)
    projection: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, PlanState):
            object.__setattr__(self, "state", PlanState.coerce(self.state))


def projection_of(loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> Any:
    """The node's projection the planner put in ``ctx`` (made here when a kind is planned on its own)."""
    if ctx.projection is not None:
        return ctx.projection
    from ..projection import project  # the projection reads the DAX rules, so it sits above the kinds

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

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        """Pure: compare what the profile wants with the facts. Never touches the node."""
        ...

    def apply(self, host: Host, change: Change, actx: ApplyContext) -> str:
        """Carry out one change of this kind; return a short description of what was done."""
        ...

    def original(self, change: Change, facts: Facts) -> tuple[str, dict[str, Any]] | None:
        """``(target, record)`` to remember before ``change`` is made, so that ``revert`` can put it back:
        ``record`` holds ``kind``, ``path`` and ``value`` (JSON); the first record of a target is kept."""
        ...
