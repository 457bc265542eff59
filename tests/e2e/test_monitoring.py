"""The shipped alert rules: promtool checks and unit-tests them (never skipped in CI), every alert has a test
that fires it and one that does not, and every series they read is one the collector emits."""

from __future__ import annotations

import re

import yaml

from tests.series_helpers import MONITORING, emitted, run_promtool

#: PromQL words that look like metric names in an expression.
PROMQL = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
          "sum", "min", "max", "avg", "count", "absent", "rate", "irate", "increase", "time", "topk", "bottomk",
          "clamp_min", "clamp_max", "label_replace", "histogram_quantile", "max_over_time", "min_over_time",
          "avg_over_time", "quantile", "stddev", "delta", "deriv", "vector", "scalar", "round", "abs", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers not inside {...} label matchers, quotes, or by(...)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set(re.findall(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\s*(?:\{|\)|\s|$|[-+*/<>=!]|\[))", text))
    return {n for n in names if n not in PROMQL and not re.fullmatch(r"\d.*|e\d+", n)}


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names matched) of every ``metric{...}`` selector."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return [(m.group(1), set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2))))
            for m in re.finditer(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}", text)]


def check_expr(expr: str, known: dict[str, set[str]], where: str) -> None:
    expr = re.sub(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", r"\1", expr)  # a Grafana variable's query
    used = metric_names(expr)
    assert used, f"{where}: no metric in {expr!r}"
    assert used <= set(known), f"{where} reads {sorted(used - set(known))}, which nodeagent never emits"
    for name, labels in selectors(expr):
        assert labels <= known[name], f"{where}: {name} has no label(s) {sorted(labels - known[name])}"


def rules() -> list[dict]:
    doc = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def test_promtool_checks_the_rules() -> None:
    proc = run_promtool("check", "rules", "alerts.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules())} rules found" in proc.stdout


def test_promtool_unit_tests_pass() -> None:
    proc = run_promtool("test", "rules", "alerts_test.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load((MONITORING / "alerts_test.yaml").read_text())["tests"]
    fires, silent = set(), set()
    for t in tests:
        for a in t.get("alert_rule_test", []):
            (fires if a.get("exp_alerts") else silent).add(a["alertname"])
    names = {r["alert"] for r in rules()}
    assert names >= {"NodeagentHbmThrash", "NodeagentCxlTierNearlyFull", "NodeagentTieringPingPong",
                     "NodeagentCxlLatencyHigh", "NodeagentDriftPresent", "NodeagentApplyFailing",
                     "NodeagentCheckFailing", "NodeagentExporterDown"}
    assert names - fires == set(), "alerts never shown firing"
    assert names - silent == set(), "alerts never shown silent"


def test_rules_read_only_series_the_collector_emits(make_node) -> None:
    known = emitted(make_node)
    for r in rules():
        check_expr(r["expr"], known, r["alert"])


def test_series_in_the_unit_tests_are_emitted_too(make_node) -> None:
    known = emitted(make_node)
    tests = yaml.safe_load((MONITORING / "alerts_test.yaml").read_text())["tests"]
    for t in tests:
        for s in t["input_series"]:
            assert s["series"].split("{")[0] in known, s["series"]


def test_metric_names_parser() -> None:
    expr = ('(a_bytes / b_bytes{x="y or z"} > 0.95) and on (instance, gpu) (rate(c_total[5m]) + d > 4e9) '
            'or absent(up{job="n"}) or min by (node) (e{cpuless="true"}) > 3 * 1024')
    assert metric_names(expr) == {"a_bytes", "b_bytes", "c_total", "d", "up", "e"}
    assert selectors(expr) == [("b_bytes", {"x"}), ("up", {"job"}), ("e", {"cpuless"})]
