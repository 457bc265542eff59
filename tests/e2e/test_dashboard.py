"""The shipped Grafana dashboard: a datasource variable, the five signals on the first row, per-node and per-GPU
rows, and every query (panels and variables) reads only series, and labels, the collector emits."""

from __future__ import annotations

import json
from typing import Any

from tests.series_helpers import MONITORING, emitted

from .test_monitoring import check_expr


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "dashboard.json").read_text())


def rows(d: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for p in d["panels"]:
        if p["type"] == "row":
            out.append((p, list(p.get("panels", []))))
        else:
            assert out, f"panel {p['title']!r} sits above the first row"
            out[-1][1].append(p)
    return out


def test_datasource_variable_and_every_panel_uses_it() -> None:
    d = dashboard()
    ds = [v for v in d["templating"]["list"] if v["type"] == "datasource"]
    assert ds and ds[0]["query"] == "prometheus"
    for _, panels in rows(d):
        for p in panels:
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]


def test_first_row_has_the_five_signals_and_there_are_per_node_and_per_gpu_rows() -> None:
    (first, panels), *rest = rows(dashboard())
    assert first["gridPos"]["y"] == 0
    titles = " | ".join(p["title"] for p in panels).lower()
    for signal in ("hbm usage", "pcie swap rate", "cxl usage", "false promotion", "cxl latency"):
        assert signal in titles, signal
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for series in ("nodeagent_gpu_memory_used_bytes", "nodeagent_gpu_pcie_rx_bytes_per_second",
                   "nodeagent_node_memory_used_bytes", "nodeagent_tiering_pingpong_ratio",
                   "nodeagent_memory_latency_ratio"):
        assert series in exprs, series
    repeats = {r.get("repeat") for r, _ in rest}
    assert {"node", "gpu"} <= repeats
    names = {v["name"] for v in dashboard()["templating"]["list"]}
    assert {"datasource", "instance", "node", "gpu"} <= names


def test_every_query_reads_emitted_series(make_node) -> None:
    known = emitted(make_node)
    d = dashboard()
    n = 0
    for _, panels in rows(d):
        for p in panels:
            for t in p["targets"]:
                check_expr(t["expr"], known, f"panel {p['title']!r}")
                n += 1
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            check_expr(v["query"]["query"], known, f"variable {v['name']}")
    assert n >= 15


def test_panels_do_not_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']!r} overlaps another panel"
        cells |= mine
