"""DAMON in simulated nodes: the boot-time layout step, and nodes that start with someone else's kdamond or
with a DAMON module enabled.

``h100-cxl-foreign-kdamond`` is h100-cxl booted with a running kdamond nodeagent does not own, configured like
the one the hosting environment runs on the machine these tools were written on (``damon-sysfs-tree-6.18.txt``:
paddr, pageout of pages idle for 12 aggregation intervals, 128 MiB / 50 ms per second, anon pages excluded).
:func:`start_foreign` does the same on any simulated node, the way another agent would: through the kernel;
:func:`foreign_writes` lists those writes, so the real-kernel tier replays the very same ones in its guest.
``h100-cxl-damon-stat`` is h100-cxl on 6.18 booted with DAMON_STAT enabled: a kdamond (``kdamond.0``) that
shows nowhere under ``/sys/kernel/mm/damon/admin`` and keeps any sysfs kdamond from starting.
"""

from __future__ import annotations

from dataclasses import replace

from . import presets
from .damon_layout import KDAMONDS, lay_out
from .damon_modules import enable
from .kernel import SimKernel

#: Presets that boot with a foreign running kdamond, and the preset each is a variant of.
FOREIGN = {"h100-cxl-foreign-kdamond": "h100-cxl"}
#: Presets that boot with a DAMON module enabled (as with CONFIG_DAMON_STAT_ENABLED_DEFAULT=y): the preset each
#: is a variant of, the module, and the kernel release (DAMON_STAT is 6.17+).
MODULE_AT_BOOT = {"h100-cxl-damon-stat": ("h100-cxl", "damon_stat", "6.18.0-nodeagent-sim")}


#: The physical range the foreign kdamond monitors by default (start, end): 4 GiB .. 8.375 GiB.
FOREIGN_REGION = (4294967296, 8992587776)


def foreign_writes(k: SimKernel, region: tuple[int, int] = FOREIGN_REGION) -> list[tuple[str, str]]:
    """The DAMON sysfs writes (path, value) that configure kdamond 0 as the foreign agent does, ``state=on``
    excluded. Shared with the real-kernel tier, which replays them through the guest's sysfs."""
    base = f"{KDAMONDS}/0"
    ctx = f"{base}/contexts/0"
    sch = f"{ctx}/schemes/0"
    writes = [(f"{KDAMONDS}/nr_kdamonds", "1"), (f"{base}/contexts/nr_contexts", "1"), (f"{ctx}/operations", "paddr"),
              (f"{ctx}/monitoring_attrs/intervals/sample_us", "500000"),
              (f"{ctx}/monitoring_attrs/intervals/aggr_us", "5000000"),
              (f"{ctx}/monitoring_attrs/nr_regions/min", "1024"), (f"{ctx}/monitoring_attrs/nr_regions/max", "8192"),
              (f"{ctx}/targets/nr_targets", "1"), (f"{ctx}/targets/0/regions/nr_regions", "1"),
              (f"{ctx}/targets/0/regions/0/start", str(region[0])),
              (f"{ctx}/targets/0/regions/0/end", str(region[1])),
              (f"{ctx}/schemes/nr_schemes", "1"), (f"{sch}/action", "pageout"),
              (f"{sch}/access_pattern/sz/max", str(2**64 - 1)), (f"{sch}/access_pattern/nr_accesses/max", "1"),
              (f"{sch}/access_pattern/age/min", "12"), (f"{sch}/access_pattern/age/max", str(2**32 - 1)),
              (f"{sch}/quotas/ms", "50"), (f"{sch}/quotas/bytes", "134217728"),
              (f"{sch}/quotas/reset_interval_ms", "1000"), (f"{sch}/quotas/weights/age_permil", "1000")]
    if k.at_least(6, 15):
        writes += [(f"{sch}/ops_filters/nr_filters", "2"), (f"{sch}/ops_filters/0/type", "anon"),
                   (f"{sch}/ops_filters/0/matching", "Y"), (f"{sch}/ops_filters/1/type", "unmapped"),
                   (f"{sch}/ops_filters/1/matching", "Y"), (f"{sch}/ops_filters/1/allow", "Y")]
    elif k.at_least(6, 3):
        writes += [(f"{sch}/filters/nr_filters", "1"), (f"{sch}/filters/0/type", "anon"),
                   (f"{sch}/filters/0/matching", "Y")]
    return writes


def start_foreign(k: SimKernel, pid: int = 77, region: tuple[int, int] = FOREIGN_REGION) -> int:
    """Create kdamond 0 and start it as another agent would (requires that no kdamond exists). Its pid."""
    if k.tree.read(f"{KDAMONDS}/nr_kdamonds") != "0":
        raise ValueError("start_foreign needs a node without kdamonds")
    base = f"{KDAMONDS}/0"
    writes = foreign_writes(k, region)
    for path, value in writes:
        k.write(path, value)
    with k.locked():
        state = k.state()
        d = state.setdefault("damon", {"next_pid": 200, "kdamonds": {}})
        keep, d["next_pid"] = d["next_pid"], pid
        k.save_state(state)
    k.write(f"{base}/state", "on")
    with k.locked():
        state = k.state()
        state["damon"]["next_pid"] = max(keep, pid + 1)
        k.save_state(state)
    return pid


def add_foreign(k: SimKernel, *, operations: str = "paddr", action: str = "stat", start: bool = True,
                region: tuple[int, int] = FOREIGN_REGION) -> int:
    """One more kdamond, configured and (with ``start``) started as another agent would, through the kernel's
    files: ``nr_kdamonds`` grows by one, which resets every kdamond and fails with EBUSY while any runs. Its
    index."""
    n = int(k.tree.read(f"{KDAMONDS}/nr_kdamonds") or 0)
    base = f"{KDAMONDS}/{n}"
    for path, value in foreign_writes(k, region):
        if path == f"{KDAMONDS}/nr_kdamonds":
            value = str(n + 1)
        path = path.replace(f"{KDAMONDS}/0/", f"{base}/", 1)
        if path.endswith("/operations"):
            value = operations
        elif path.endswith("/schemes/0/action"):
            value = action
        k.write(path, value)
    if start:
        k.write(f"{base}/state", "on")
    return n


def _step(k: SimKernel, preset: presets.Preset) -> None:
    lay_out(k)
    if preset.name in FOREIGN:
        start_foreign(k)
    module = MODULE_AT_BOOT.get(preset.name, ("", "", ""))[1]
    if module and k.tree.exists(f"/sys/module/{module}/parameters/enabled"):  # not with an older --kernel
        enable(k, module)


def _variant(name: str, base: str) -> presets.Preset:
    p = presets.get(base)
    return replace(p, name=name, description=f"{base} with a running kdamond nodeagent does not own (pid 77)")


def _module_variant(name: str, base: str, module: str, kernel: str) -> presets.Preset:
    return replace(presets.get(base), name=name, kernel=kernel,
                   description=f"{base} on kernel {kernel.split('-')[0]} with {module.upper()} enabled at boot "
                   "(its kdamond runs outside DAMON sysfs)")


presets.LAYERS.append(_step)
for _name, _base in FOREIGN.items():
    presets.PRESETS[_name] = lambda n=_name, b=_base: _variant(n, b)
for _name, (_base, _module, _kernel) in MODULE_AT_BOOT.items():
    presets.PRESETS[_name] = lambda n=_name, b=_base, m=_module, r=_kernel: _module_variant(n, b, m, r)
