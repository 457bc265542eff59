"""Values the kernel cannot hold are refused at plan time, at the profile field they come from.

One case per C type of the DAMON sysfs files (unsigned int, unsigned long, int) and per conversion (ages in
aggregation intervals, durations in microseconds and milliseconds, sizes in bytes): each must become a plan
problem naming ``file:line`` and the kernel file's type — never a value that passes validation and then fails
(or is silently cut) half-way through building a kdamond.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from nodeagent.cli.main import main
from nodeagent.kinds.damon.spec import KERNEL_RANGES, KERNEL_TYPES, kernel_type

HEAD = "apiVersion: nodeagent/v1\nkind: NodeProfile\nmetadata: {name: ranges}\n"


def profile(tmp_path: Path, monitoring: str = "{sample: 1ms, aggregate: 1ms}", access: str = "{}",
            quota: str = "", extra: str = "") -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(HEAD + textwrap.dedent(f"""\
        memory:
          auto_online_blocks: offline
          dax:
            - {{name: all, match: {{all: true}}, mode: system-ram, zone: movable}}
        damon:
          kdamonds:
            - name: demote
              operations: paddr
              monitoring: {monitoring}
              targets: [{{node: fast}}]
              {extra}
              schemes:
                - action: migrate_cold
                  target_node: slow
                  access: {access}
                  {quota}
        """))
    return p


CASES = {
    # age.min 100000h with a 1 ms aggregation interval: 360,000,000,000 intervals for an unsigned int
    "age in aggregation intervals (unsigned int)": (dict(access="{age: {min: 100000h}}"), r"p.yaml:18:\d+: "
                                                    r"damon.kdamonds\[0\].schemes\[0\].access.age.min: becomes "
                                                    r"360000000000 aggregation intervals .*unsigned int"),
    "age max (unsigned int)": (dict(access="{age: {max: 5000000000ms}}"), r"access.age.max: becomes 5000000000 "),
    "size (unsigned long)": (dict(access="{size: {min: 16384PiB}}"), r"access.size.min: becomes 18446744073709551616 "
                                                                      r".*unsigned long"),
    "interval (unsigned long)": (dict(monitoring="{sample: 1ms, aggregate: 5124095577h}"),
                                 r"monitoring.aggregate: becomes \d{20} .*unsigned long"),
    "quota bytes (unsigned long)": (dict(quota="quota: {size: 16384PiB, reset_interval: 1s}"),
                                    r"quota.size: becomes \d+ .*unsigned long"),
    "quota reset interval ms (unsigned long)": (dict(quota="quota: {size: 1MiB, reset_interval: 5124095576030432h}"),
                                                r"quota.reset_interval: becomes \d+ .*unsigned long"),
    "stats refresh ms (unsigned int)": (dict(extra="stats_refresh: 5000000000ms"),
                                        r"stats_refresh: becomes 5000000000 .*unsigned int"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_values_beyond_the_kernel_file_s_type_are_plan_problems(make_node, tmp_path, capsys, case) -> None:
    kw, pattern = CASES[case]
    p = profile(tmp_path, **kw)
    root = make_node("h100-cxl", kernel="6.18.0")  # every DAMON file (refresh_ms: 6.17)
    code = main(["--root", str(root), "plan", str(p)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0, text
    assert re.search(pattern, text), text
    assert "Traceback" not in text


def test_apply_refuses_before_writing_anything(make_node, tmp_path, capsys) -> None:
    root = make_node("h100-cxl")
    p = profile(tmp_path, access="{age: {min: 100000h}}")
    journal = root / ".nodeagent-machine/writes.log"
    before = journal.read_text() if journal.exists() else ""
    code = main(["--root", str(root), "apply", "--yes", "--skip-checks", "all", str(p)])
    out = capsys.readouterr()
    assert code != 0 and "360000000000 aggregation intervals" in out.out + out.err
    after = journal.read_text() if journal.exists() else ""
    assert "kdamonds" not in after[len(before):]


def test_values_at_the_edge_of_the_type_still_plan(tmp_path, capsys) -> None:
    """2^32-1 aggregation intervals is the largest age an unsigned int holds: it plans."""
    p = profile(tmp_path, access=f"{{age: {{min: {2**32 - 1}ms}}}}")
    code = main(["--simulate", "h100-cxl", "plan", str(p)])
    out = capsys.readouterr()
    assert code == 0 and "aggregation intervals for" not in out.out + out.err, out.out + out.err


#: Numeric kdamond files and the kernel's type of each.
FILES = [
    ("refresh_ms", "unsigned int"),
    ("contexts/nr_contexts", "int"),
    ("contexts/0/monitoring_attrs/intervals/aggr_us", "unsigned long"),
    ("contexts/0/monitoring_attrs/nr_regions/max", "unsigned long"),
    ("contexts/0/targets/0/regions/3/end", "unsigned long"),
    ("contexts/0/schemes/2/target_nid", "int"),
    ("contexts/0/schemes/0/access_pattern/age/min", "unsigned int"),
    ("contexts/0/schemes/0/access_pattern/nr_accesses/max", "unsigned int"),
    ("contexts/0/schemes/0/access_pattern/sz/max", "unsigned long"),
    ("contexts/0/schemes/0/quotas/weights/age_permil", "unsigned int"),
    ("contexts/0/schemes/0/quotas/goals/1/nid", "int"),
    ("contexts/0/schemes/0/quotas/goals/1/target_value", "unsigned long"),
    ("contexts/0/schemes/0/ops_filters/0/damon_target_idx", "int"),
    ("contexts/0/schemes/0/core_filters/1/addr_end", "unsigned long"),
    ("contexts/0/schemes/0/filters/nr_filters", "int"),
]


@pytest.mark.parametrize(("file", "ctype"), FILES)
def test_every_numeric_kdamond_file_has_the_kernel_s_type(file, ctype) -> None:
    found = kernel_type(file)
    assert found is not None and found[0] == ctype


def test_a_lookup_tries_only_the_patterns_whose_plain_text_the_file_has() -> None:
    """kernel_type skips a rule whose pattern's plain runs the file lacks: every file a pattern of the table matches
    holds its runs, so the answer is the whole table's, in its order."""
    from nodeagent.kinds.damon.spec import KERNEL_TYPE_RULES, _plain_runs

    assert _plain_runs("a|b") == () and _plain_runs("(a|b)c") == ("c",) and _plain_runs(r"ab*c\.d") == ("a", "c", "d")
    assert _plain_runs("[0-9a-f]{4}") == ()
    files = [f for f, _ in FILES] + ["state", "contexts/0/schemes/0/action", "contexts/0/schemes/0/filters/0/min",
                                    "contexts/0/schemes/3/watermarks/interval_us", "contexts/0/targets/nr_targets"]
    for file in files:
        whole = next(((c, f, m.groups()) for rx, c, f in KERNEL_TYPES if (m := rx.fullmatch(file))), None)
        found = kernel_type(file)
        assert (found and (found[0], found[1], found[2].groups())) == whole, file
    for rx, _, _ in KERNEL_TYPE_RULES:  # each run is plain text of the pattern outside its groups
        assert all(run in rx for run in _plain_runs(rx)), rx


def test_the_type_table_only_names_types_with_ranges() -> None:
    assert {ctype for _, ctype, _ in KERNEL_TYPES} <= set(KERNEL_RANGES)


@pytest.mark.parametrize(("value", "ok"), [(2**31 - 1, True), (2**31, False), (2**32 - 1, False), (-1, False)])
def test_knob_values_fit_the_sysctl_s_type(tmp_path, value, ok) -> None:
    """numa_balancing_promote_rate_limit_MBps is proc_dointvec_minmax: an int from 0."""
    from nodeagent.profile import load_profile
    from nodeagent.util.errors import ProfileError

    p = tmp_path / "k.yaml"
    p.write_text(HEAD + f"kernel:\n  numa_balancing_promote_rate_limit_mbps: {value}\n")
    if ok:
        assert load_profile(p).profile.kernel.numa_balancing_promote_rate_limit_mbps == value
    else:
        with pytest.raises(ProfileError, match=r"k.yaml:5:\d+: kernel.numa_balancing_promote_rate_limit_mbps"):
            load_profile(p)
