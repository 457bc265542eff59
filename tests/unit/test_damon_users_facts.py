"""The DAMON users in the facts: module kdamonds read as real kernels lay them out (a plain tree, no simulator),
and :func:`nodeagent.facts.damon.other_users` over kdamonds and modules."""

from __future__ import annotations

from pathlib import Path

from nodeagent.facts import Facts
from nodeagent.facts.damon import DamonFacts, Kdamond, from_facts, gather, other_users
from nodeagent.host import open_host


def put(root: Path, path: str, text: str) -> None:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def _facts(section: dict) -> Facts:
    return Facts(hostname="", kernel_release="6.18.0", knobs={}, block_size_bytes=None, possible_nodes=[],
                 nodes=[], tiers={}, sections={"damon": section})


def test_damon_stat_s_kdamond_is_found_among_kthreadd_s_children(tmp_path: Path) -> None:
    put(tmp_path, "/sys/module/damon_stat/parameters/enabled", "Y\n")  # no kdamond_pid parameter
    put(tmp_path, "/sys/module/damon_reclaim/parameters/enabled", "N\n")
    put(tmp_path, "/sys/module/damon_reclaim/parameters/kdamond_pid", "-1\n")
    put(tmp_path, "/proc/2/task/2/children", "3 4 91 ")
    for pid, comm in ((3, "rcu_gp"), (4, "kworker/R-kvfree"), (91, "kdamond.0")):
        put(tmp_path, f"/proc/{pid}/comm", comm + "\n")
    mods = {m["module"]: m for m in gather(open_host(tmp_path))["module_kdamonds"]}
    assert (mods["damon_stat"]["enabled"], mods["damon_stat"]["pid"]) == (True, 91)
    assert (mods["damon_reclaim"]["enabled"], mods["damon_reclaim"]["pid"]) == (False, None)


def test_without_proc_children_every_process_is_looked_at(tmp_path: Path) -> None:
    put(tmp_path, "/sys/module/damon_stat/parameters/enabled", "Y\n")
    put(tmp_path, "/proc/1/comm", "systemd\n")
    put(tmp_path, "/proc/88/comm", "kdamond.0\n")
    put(tmp_path, "/proc/self/comm", "python\n")
    assert gather(open_host(tmp_path))["module_kdamonds"][0]["pid"] == 88


def test_other_users_leave_out_owned_and_empty_slots_and_cap_the_regions() -> None:
    cfg = {"contexts/nr_contexts": "1", "contexts/0/operations": "paddr", "contexts/0/schemes/0/action": "stat"}
    cfg |= {f"contexts/0/targets/0/regions/{i}/{e}": str(i * 100 + (50 if e == "end" else 0))
            for i in range(12) for e in ("start", "end")}
    kds = (Kdamond(0, "on", 77, cfg, {}), Kdamond(1, "on", 78, cfg, {}),
           Kdamond(2, "off", -1, {"contexts/nr_contexts": "0"}, {}))
    damon = DamonFacts(True, 3, kds, {}, {}, {0: [(0, 1000)], 1: [(1000, 2000)]}, (), None,
                       ({"module": "damon_lru_sort", "name": "DAMON_LRU_SORT", "enabled": True, "pid": 300,
                         "region": [1000, 1999]},))
    users = other_users(damon, owned={1})
    assert [u.name for u in users] == ["kdamond 0", "DAMON_LRU_SORT"]
    assert users[0].monitors == "0x0-0x32, 0x64-0x96, 0xc8-0xfa (+9 more)" and users[0].nodes == (0, 1)
    assert (users[1].actions, users[1].nodes, users[1].pid) == (("lru_prio", "lru_deprio"), (1,), 300)


def test_facts_saved_before_module_kdamonds_still_name_the_modules() -> None:
    old = {"sysfs": True, "nr_kdamonds": 0, "kdamonds": [],
           "modules": {"damon_reclaim": True, "damon_lru_sort": False, "damon_stat": None}}
    users = other_users(from_facts(_facts(old)), set())
    assert [(u.name, u.pid, u.monitors) for u in users] == [
        ("DAMON_RECLAIM", None, "System RAM (its default region)")]
    assert users[0].describe().startswith("DAMON_RECLAIM (enabled, kdamond running; not under")
