"""The protocol every resource kind follows, and what the planner hands it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..facts import Facts
from ..host import Host
from ..plan import Change, Problem
from ..profile import LoadedProfile


@dataclass(frozen=True)
class PlanContext:
    allow_disruptive: bool = False
    state: dict[str, Any] = field(default_factory=dict)  # ownership and last-applied records


@dataclass
class ResourcePlan:
    changes: list[Change] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


class Resource(Protocol):
    kind: str

    def plan(self, loaded: LoadedProfile, facts: Facts, ctx: PlanContext) -> ResourcePlan:
        """Pure: compare what the profile wants with the facts. Never touches the node."""
        ...

    def apply(self, host: Host, change: Change) -> str:
        """Carry out one change of this kind; return a short description of what was done."""
        ...
