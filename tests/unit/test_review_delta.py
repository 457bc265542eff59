"""How a profile change moves one node's plan: the pure comparison behind `plan --baseline`."""

from __future__ import annotations

from nodeagent.engine.review import diff_plans
from nodeagent.plan import Change, Plan, Problem


def change(target: str, before: object, after: object, *, disruptive: bool = False) -> Change:
    return Change("knob", target, "set", before, after, disruptive=disruptive)


def plan(*changes: Change, unchanged: tuple[str, ...] = (), problems: tuple[Problem, ...] = ()) -> Plan:
    return Plan("p", "digest", tuple(changes), problems, (), unchanged)


def test_added_removed_different_and_managed() -> None:
    old = plan(change("a", 0, 1), change("b", 0, 1), change("c", 0, 1), unchanged=("d", "e"))
    new = plan(change("a", 0, 2), change("c", 0, 1), change("f", 0, 1), unchanged=("d", "g"))
    delta = diff_plans(old, new)
    assert [(a.target, a.after, b.after) for a, b in delta.different] == [("a", 1, 2)]
    assert [c.target for c in delta.removed] == ["b"]
    assert [c.target for c in delta.added] == ["f"]
    assert delta.no_longer_managed == ("b", "e")
    assert delta.newly_managed == ("g",)  # f is managed too, but it is a change, listed as added
    assert not delta.empty


def test_becoming_disruptive_is_a_difference_and_identical_plans_are_empty() -> None:
    old = plan(change("a", 0, 1))
    assert diff_plans(old, plan(change("a", 0, 1, disruptive=True))).different
    same = diff_plans(old, plan(change("a", 0, 1)))
    assert same.empty and same.to_dict()["changes_plan"] is False


def test_problems_introduced_and_resolved() -> None:
    p1 = Problem("knob", "a", "a: needs kernel 5.18")
    p2 = Problem("knob", "b", "b: does not exist")
    delta = diff_plans(plan(problems=(p1,)), plan(problems=(p2,)))
    assert delta.new_problems == (p2,) and delta.resolved_problems == (p1,)
    assert not delta.empty
    # A management-only difference (a setting dropped that needed no change) does not alter what is done.
    only_managed = diff_plans(plan(unchanged=("a",)), plan())
    assert only_managed.empty and only_managed.no_longer_managed == ("a",)


def test_a_different_value_reads_new_then_the_baselines() -> None:
    """``10 → 200 (baseline: 400)``: the node's value, what the new profile sets, what the baseline set."""
    from nodeagent.render.review import delta_text

    text = delta_text(diff_plans(plan(change("vm.x", 10, 400)), plan(change("vm.x", 10, 200))))
    assert "  ~ vm.x: 10 → 200 (baseline: 400)" in text.splitlines()
