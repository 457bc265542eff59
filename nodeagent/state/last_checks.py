"""``last-checks.json`` (:class:`LastChecks`): the last preflight check results (for the metrics and labels)."""

from __future__ import annotations

from typing import Any, NamedTuple

from .records import FORMAT, Record, _version
from .shape import _list, _obj, _str


class CheckOutcome(NamedTuple):
    """How one check ended, as the file keeps it (the report's :class:`nodeagent.checks.base.CheckResult`, without
    its findings and evidence)."""

    name: str
    severity: str
    status: str


class LastChecks(Record):
    """The preflight check results of the last run that ran them (``check``, ``apply``, the k8s agent)."""

    __slots__ = ("results",)
    FILE = "last-checks.json"
    HOLDS = "the last checks' results"

    def __init__(self, results: list[CheckOutcome] | None = None) -> None:
        self.results = results or []

    def __bool__(self) -> bool:
        return bool(self.results)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "results": [r._asdict() for r in self.results]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LastChecks:
        _version(data, cls.FILE)
        out = []
        for i, r in enumerate(_list(data.get("results"), "results")):
            r = _obj(r, f"results[{i}]")
            out.append(CheckOutcome(*(_str(r.get(k), f"results[{i}].{k}", optional=False) or ""
                                     for k in CheckOutcome._fields)))
        return cls(out)
