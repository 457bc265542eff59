"""What each peer tool says about a simulated node, held against ``nodeagent facts``: a list of disagreements.

Every function takes the tool's parsed output and the facts (``nodeagent --format json facts``) and returns
human-readable disagreements (empty: they agree). A tool that printed an error or nothing parseable is itself a
disagreement (see :func:`tool_errors`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

#: libdaxctl/libcxl/libndctl log lines that mean a device was dropped or misread, and lsmem/damo failures.
ERROR = re.compile(r"add_dev\(\) failed|lookup failure|unable to determine|failed|error|Traceback", re.I)


def tool_errors(name: str, rc: int, out: str, err: str) -> list[str]:
    problems = []
    if rc != 0:
        problems.append(f"{name}: exit {rc}: {err.strip()[:500]}")
    for line in err.splitlines():
        if ERROR.search(line):
            problems.append(f"{name}: {line.strip()}")
    if name != "lsmem-summary":
        try:
            json.loads(out) if out.strip() else None
        except ValueError as exc:
            problems.append(f"{name}: output is not JSON ({exc}): {out[:200]!r}")
    return problems


def walk(obj: object) -> Iterator[dict]:
    """Every JSON object inside ``obj`` (cxl-cli nests memdevs under endpoints, regions under decoders...)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk(v)


def _blocks(lsmem: dict) -> dict[int, dict]:
    out = {}
    for r in lsmem.get("memory", []):
        first, _, last = str(r["block"]).partition("-")
        for b in range(int(first), int(last or first) + 1):
            out[b] = r
    return out


def daxctl(listing: list, facts: dict) -> list[str]:
    """``daxctl list -DRMi`` against facts' dax devices: names, regions, sizes, nodes, modes, blocks, mappings."""
    devs = {d["name"]: d for d in facts["sections"]["dax"]["devices"]}
    seen = {}
    for region in listing:
        for dev in region.get("devices", []):
            seen[dev["chardev"]] = (region, dev)
    problems = []
    if set(seen) != set(devs):
        problems.append(f"daxctl lists {sorted(seen)}, facts {sorted(devs)}")
    for name in sorted(set(seen) & set(devs)):
        region, dev = seen[name]
        f = devs[name]
        mode = dev.get("mode", "devdax" if dev.get("state") != "disabled" else None)
        checks = [("region id", region.get("id"), f["region"]), ("size", dev["size"], f["size"]),
                  ("target_node", dev.get("target_node"), f["target_node"]), ("mode", mode, f["mode"])]
        if dev.get("mappings"):
            checks.append(("mapping start", dev["mappings"][0]["start"], f["resource"]))
        if f["mode"] == "system-ram":
            checks += [("online_memblocks", dev.get("online_memblocks"), f["blocks_online"]),
                       ("total_memblocks", dev.get("total_memblocks"), f["blocks_present"])]
            if f["blocks_online"]:
                checks.append(("movable", dev.get("movable"), set(f["zones"]) == {"Movable"}))
        problems += [f"{name} {what}: daxctl {a!r}, facts {b!r}" for what, a, b in checks if a != b]
    return problems


def cxl(listing: list, facts: dict) -> list[str]:
    """``cxl list -MDRETi`` against facts' CXL section: memdevs, decoders, regions and their mappings."""
    c = facts["sections"].get("cxl") or {}
    problems = []
    objs = list(walk(listing))
    mems = {o["memdev"]: o for o in objs if "memdev" in o and "serial" in o}
    fmem = {m["name"]: m for m in c.get("memdevs", [])}
    if set(mems) != set(fmem):
        problems.append(f"cxl lists memdevs {sorted(mems)}, facts {sorted(fmem)}")
    for name in sorted(set(mems) & set(fmem)):
        m, f = mems[name], fmem[name]
        for what, a, b in (("serial", m["serial"], f["serial"]), ("ram_size", m.get("ram_size", 0), f["ram_size"]),
                           ("pmem_size", m.get("pmem_size", 0), f["pmem_size"]), ("host", m.get("host"), f["pci"])):
            if a != b:
                problems.append(f"{name} {what}: cxl {a!r}, facts {b!r}")
    decs = {o["decoder"]: o for o in objs if "decoder" in o and isinstance(o["decoder"], str)
            and re.fullmatch(r"decoder\d+\.\d+", o["decoder"]) and "interleave_ways" in o}
    fdec = {d["name"]: d for d in c.get("decoders", [])}
    if set(decs) != set(fdec):
        problems.append(f"cxl lists decoders {sorted(decs)}, facts {sorted(fdec)}")
    for name in sorted(set(decs) & set(fdec)):
        d, f = decs[name], fdec[name]
        checks = [("interleave_ways", d["interleave_ways"], f["interleave_ways"]),
                  ("region", d.get("region"), f["region"]),
                  ("state", "disabled" if d.get("state") == "disabled" else "enabled",
                   "disabled" if f["size"] == 0 else "enabled")]
        if f["size"]:
            checks += [("resource", d.get("resource"), f["start"]), ("size", d.get("size"), f["size"])]
        if f["kind"] == "endpoint" and f["dpa_size"]:
            checks += [("mode", d.get("mode"), f["mode"]), ("dpa_size", d.get("dpa_size"), f["dpa_size"]),
                       ("dpa_resource", d.get("dpa_resource"), f["dpa_resource"])]
        problems += [f"{name} {what}: cxl {a!r}, facts {b!r}" for what, a, b in checks if a != b]
    regs = {o["region"]: o for o in objs if "decode_state" in o}
    freg = {r["name"]: r for r in c.get("regions", [])}
    if set(regs) != set(freg):
        problems.append(f"cxl lists regions {sorted(regs)}, facts {sorted(freg)}")
    for name in sorted(set(regs) & set(freg)):
        r, f = regs[name], freg[name]
        maps = sorted((m["position"], m["decoder"]) for m in r.get("mappings", []))
        checks = [("resource", r.get("resource"), f["start"]), ("size", r.get("size"), f["size"]),
                  ("interleave_ways", r.get("interleave_ways"), f["interleave_ways"]),
                  ("interleave_granularity", r.get("interleave_granularity"), f["interleave_granularity"]),
                  ("committed", r.get("decode_state") == "commit", f["committed"]),
                  ("mappings", [d for _, d in maps], f["targets"])]
        problems += [f"{name} {what}: cxl {a!r}, facts {b!r}" for what, a, b in checks if a != b]
    return problems


def ndctl(listing: list | dict, facts: dict) -> list[str]:
    """``ndctl list -RNDi``: one region and a devdax namespace per pmem-backed DAX device of the facts."""
    pmem = {d["name"]: d for d in facts["sections"]["dax"]["devices"] if d.get("backing") == "pmem"}
    objs = list(walk(listing))
    namespaces = {o["chardev"]: o for o in objs if str(o.get("dev", "")).startswith("namespace") and "chardev" in o}
    for o in objs:
        for dax in o.get("daxregion", {}).get("devices", []) if isinstance(o.get("daxregion"), dict) else []:
            namespaces.setdefault(dax["chardev"], o)
    problems = []
    if set(namespaces) != set(pmem):
        problems.append(f"ndctl shows devdax namespaces of {sorted(namespaces)}, facts pmem devices {sorted(pmem)}")
    for name in sorted(set(namespaces) & set(pmem)):
        ns = namespaces[name]
        if ns.get("mode") != "devdax":
            problems.append(f"{name}: ndctl mode {ns.get('mode')!r}, facts devdax-backed")
        if ns.get("size") != pmem[name]["size"]:
            problems.append(f"{name}: ndctl size {ns.get('size')!r}, facts {pmem[name]['size']!r}")
    return problems


def lsmem(listing: dict, summary: str, facts: dict) -> list[str]:
    """lsmem's blocks against facts: block size, and each DAX device's blocks (state, node, zone)."""
    problems = []
    m = re.search(r"Memory block size:\s+(\d+)", summary)
    bs = facts["block_size_bytes"]
    if not m or int(m[1]) != bs:
        problems.append(f"lsmem block size {m[1] if m else None}, facts {bs}")
    blocks = _blocks(listing)
    nodes_with_blocks = {r["node"] for r in listing.get("memory", [])}
    fnodes = {n["id"] for n in facts["nodes"] if n["has_memory"]}
    if nodes_with_blocks != fnodes:
        problems.append(f"lsmem has blocks on nodes {sorted(nodes_with_blocks)}, facts memory on {sorted(fnodes)}")
    for d in facts["sections"]["dax"]["devices"]:
        first = -(-d["resource"] // bs)
        ids = range(first, (d["resource"] + d["size"]) // bs)
        mine = [blocks[b] for b in ids if b in blocks]
        online = sum(1 for r in mine if r["state"] == "online")
        zones = {r["zones"] for r in mine if r["state"] == "online"}
        checks = [("blocks present", len(mine), d["blocks_present"]), ("blocks online", online, d["blocks_online"]),
                  ("zones", zones, set(d["zones"]))]
        if mine:
            checks.append(("node", {r["node"] for r in mine}, {d["target_node"]}))
        problems += [f"{d['name']} {what}: lsmem {a!r}, facts {b!r}" for what, a, b in checks if a != b]
    return problems


def _num(v: object) -> int:
    return int(float(str(v).split()[0]))


def damo(listing: list, facts: dict) -> list[str]:
    """``damo report damon --damon_params --raw`` against facts' kdamonds: state, pid, and per context the
    operations, targets and regions, intervals, and per scheme action, target node, access pattern, quotas and
    weights, goals, filters and watermarks — as the kernel's files hold them (facts' ``config``)."""
    fk = facts["sections"]["damon"]["kdamonds"]
    problems = []
    if len(listing) != len(fk):
        return [f"damo lists {len(listing)} kdamonds, facts {len(fk)}"]
    for i, (kd, f) in enumerate(zip(listing, fk, strict=True)):
        cfg = f["config"]
        checks = [("state", kd["state"], f["state"]), ("pid", _num(kd["pid"]) if kd["pid"] else None, f["pid"])]
        ctxs = kd["contexts"]
        checks.append(("contexts", len(ctxs), int(cfg.get("contexts/nr_contexts", 0))))
        for c, ctx in enumerate(ctxs):
            p = f"contexts/{c}"
            checks += [(f"{p} ops", ctx["ops"], cfg.get(f"{p}/operations")),
                       (f"{p} targets", len(ctx["targets"]), int(cfg.get(f"{p}/targets/nr_targets", 0))),
                       (f"{p} sample_us", _num(ctx["intervals"]["sample_us"]),
                        _num(cfg[f"{p}/monitoring_attrs/intervals/sample_us"])),
                       (f"{p} aggr_us", _num(ctx["intervals"]["aggr_us"]),
                        _num(cfg[f"{p}/monitoring_attrs/intervals/aggr_us"])),
                       (f"{p} update_us", _num(ctx["intervals"]["ops_update_us"]),
                        _num(cfg[f"{p}/monitoring_attrs/intervals/update_us"])),
                       (f"{p} nr_regions", (_num(ctx["nr_regions"]["min"]), _num(ctx["nr_regions"]["max"])),
                        (_num(cfg[f"{p}/monitoring_attrs/nr_regions/min"]),
                         _num(cfg[f"{p}/monitoring_attrs/nr_regions/max"])))]
            for t, tgt in enumerate(ctx["targets"]):
                q = f"{p}/targets/{t}"
                regions = [(_num(r["start"]), _num(r["end"])) for r in tgt["regions"]]
                fregions = [(_num(cfg[f"{q}/regions/{r}/start"]), _num(cfg[f"{q}/regions/{r}/end"]))
                            for r in range(int(cfg.get(f"{q}/regions/nr_regions", 0)))]
                checks.append((f"{q} regions", regions, fregions))
            checks.append((f"{p} schemes", len(ctx["schemes"]), int(cfg.get(f"{p}/schemes/nr_schemes", 0))))
            for s, sch in enumerate(ctx["schemes"]):
                q = f"{p}/schemes/{s}"
                ap = sch["access_pattern"]
                quotas = sch["quotas"]
                checks += [(f"{q} action", sch["action"], cfg.get(f"{q}/action")),
                           (f"{q} sz", (_num(ap["sz_bytes"]["min"]), _num(ap["sz_bytes"]["max"])),
                            (_num(cfg[f"{q}/access_pattern/sz/min"]), _num(cfg[f"{q}/access_pattern/sz/max"]))),
                           (f"{q} nr_accesses", (_num(ap["nr_accesses"]["min"]), _num(ap["nr_accesses"]["max"])),
                            (_num(cfg[f"{q}/access_pattern/nr_accesses/min"]),
                             _num(cfg[f"{q}/access_pattern/nr_accesses/max"]))),
                           (f"{q} age", (_num(ap["age"]["min"]), _num(ap["age"]["max"])),
                            (_num(cfg[f"{q}/access_pattern/age/min"]), _num(cfg[f"{q}/access_pattern/age/max"]))),
                           (f"{q} quota bytes", _num(quotas["sz_bytes"]), _num(cfg[f"{q}/quotas/bytes"])),
                           # damo keeps the quota's times in ns
                           (f"{q} quota ms", _num(quotas["time_ms"]) // 10**6, _num(cfg[f"{q}/quotas/ms"])),
                           (f"{q} reset_interval_ms", _num(quotas["reset_interval_ms"]) // 10**6,
                            _num(cfg[f"{q}/quotas/reset_interval_ms"])),
                           (f"{q} weights", [_num(quotas["weights"][w]) for w in
                                             ("sz_permil", "nr_accesses_permil", "age_permil")],
                            [_num(cfg[f"{q}/quotas/weights/{w}"]) for w in ("sz_permil", "nr_accesses_permil",
                                                                            "age_permil")]),
                           (f"{q} watermarks metric", sch["watermarks"]["metric"], cfg[f"{q}/watermarks/metric"])]
                if f"{q}/target_nid" in cfg:
                    checks.append((f"{q} target_nid", _num(sch.get("target_nid", -1)), _num(cfg[f"{q}/target_nid"])))
                if f"{q}/apply_interval_us" in cfg:
                    checks.append((f"{q} apply_interval_us", _num(sch["apply_interval_us"]),
                                   _num(cfg[f"{q}/apply_interval_us"])))
                goals = quotas.get("goals", [])
                ng = int(cfg.get(f"{q}/quotas/goals/nr_goals", 0))
                checks.append((f"{q} goals", len(goals), ng))
                for g, goal in enumerate(goals[:ng]):
                    r = f"{q}/quotas/goals/{g}"
                    checks += [(f"{r} metric", goal.get("metric"), cfg.get(f"{r}/target_metric", "user_input")),
                               (f"{r} target_value", _num(goal["target_value"]), _num(cfg[f"{r}/target_value"]))]
                    if f"{r}/nid" in cfg:
                        checks.append((f"{r} nid", _num(goal.get("nid", 0)), _num(cfg[f"{r}/nid"])))
                filters = sch.get("filters", [])
                fdir = "filters"
                nf = int(cfg.get(f"{q}/{fdir}/nr_filters", 0))
                nf += int(cfg.get(f"{q}/core_filters/nr_filters", 0)) + int(cfg.get(f"{q}/ops_filters/nr_filters", 0))
                checks.append((f"{q} filters", len(filters), nf))
                ftypes = sorted(v for k, v in cfg.items() if k.startswith(f"{q}/") and re.search(
                    r"(?:^|/)(?:filters|core_filters|ops_filters)/\d+/type$", k))
                checks.append((f"{q} filter types", sorted(x["filter_type"] for x in filters), ftypes))
        problems += [f"kdamond {i} {what}: damo {a!r}, facts {b!r}" for what, a, b in checks if a != b]
    return problems


#: DAMOS statistics damo reads (``_damon_sysfs.files_content_to_damos_stats``); the last three are optional files
#: (sz_ops_filter_passed 6.14, nr_snapshots/max_nr_snapshots later) that damo shows as 0 where the kernel lacks them.
DAMOS_STATS = ("nr_tried", "sz_tried", "nr_applied", "sz_applied", "qt_exceeds", "sz_ops_filter_passed",
               "nr_snapshots", "max_nr_snapshots")


def damo_stats(listing: list, facts: dict) -> list[str]:
    """``damo report damon --damos_stats --raw`` (after its own ``update_schemes_stats``) against facts read
    afterwards: every scheme of every kdamond, every statistic the kernel has (0 in damo where it has none)."""
    fk = facts["sections"]["damon"]["kdamonds"]
    want = {(int(kd["index"]), 0, s) for kd in fk
            for s in range(int(kd["config"].get("contexts/0/schemes/nr_schemes", 0)))}
    seen = {(int(i["kdamond"]), int(i["context"]), int(i["scheme"])): st for i, st in listing}
    if set(seen) != want:
        return [f"damo lists schemes {sorted(seen)}, facts {sorted(want)}"]
    # (max_nr_snapshots is writable: facts keep it with the configuration)
    status = {int(kd["index"]): {**kd["config"], **kd.get("status", {})} for kd in fk}
    problems = []
    for (kd, c, s), st in sorted(seen.items()):
        for name in DAMOS_STATS:
            fact = status[kd].get(f"contexts/{c}/schemes/{s}/stats/{name}")
            got = _num(st.get(name, 0))
            if got != (_num(fact) if fact is not None else 0):
                problems.append(f"kdamond {kd} scheme {s} {name}: damo {got}, facts {fact!r}")
    return problems
