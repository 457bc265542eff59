"""``gpu_pcie``: every GPU's PCIe link, as trained, against what the device can do and what the profile needs.

GPUs are found by walking ``/sys/bus/pci/devices`` under the node's root: a device of class 0x0300 (VGA),
0x0302 (3D), 0x0380 (display) or 0x1200 (accelerator) from NVIDIA, AMD, Intel or Habana. Display-only devices —
the BMC's VGA every server has (ASPEED, Matrox, Huawei iBMC...), emulated VGA in a VM, Intel integrated graphics,
or anything bound to a display driver such as ``ast`` or ``bochs-drm`` — are listed in the evidence and never
judged (see :func:`nodeagent.facts.hardware.classify`). On the real root the walk is cross-checked against udev.

For each GPU the check compares ``current_link_speed/width`` with ``max_link_speed/width`` and with the
profile's ``min_gen`` / ``min_width``, then every link above it up to the root port (through PCIe switches): the
narrowest or slowest hop caps host-to-GPU bandwidth as surely as the GPU's own link, so it is held to the same
minimum, and a hop trained below its maximum warns. GPUs sharing one switch uplink are reported with the ratio
of lanes below to lanes above (2:1 is how HGX boards are built; it is reported, not judged).
A link trained down to x8 or to Gen1 halves (or worse) host-to-GPU bandwidth without any error anywhere.

Caveat the remedy repeats: an idle NVIDIA GPU lowers its link *speed* to save power (it shows Gen1 until it
works); its *width* does not change. Look again under load before reseating anything.

Example::

    checks:
      gpu_pcie: {min_gen: 4, min_width: 16, min_count: 1}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.hardware import (
    Hardware,
    LiveHardware,
    PciGpu,
    PciHop,
    PciLink,
    is_gpu_class,
    oversubscription,
    pci_devices,
)
from ..host import Host
from ..host.udev import udev_pci_devices
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import GpuPcieCheck

WIDTH_FIX = ("a link trained narrower than the slot: reseat the GPU, check the riser/cable and that the slot is "
             "wired x16 (not shared or bifurcated in the BIOS), then cold-boot")
SPEED_FIX = ("if the GPU was idle, look again under load (nvidia-smi --query-gpu=pcie.link.gen.current,"
             "pcie.link.gen.max --format=csv): idle GPUs lower their link speed; if it stays low, check the BIOS "
             "PCIe speed setting for the slot, the riser/retimer, and reseat the card")
HOP_FIX = ("a PCIe switch uplink or riser trained below its width or speed caps every GPU behind it: check the "
           "switch board's cable/retimer and the BIOS bifurcation and speed settings of the root port, then "
           "cold-boot")


def _label(link_speed: str | None, width: int | None) -> str:
    gen = PciLink.gen(link_speed)
    return f"Gen{gen if gen else '?'} x{width if width is not None else '?'}"


class GpuPcieCheckImpl:
    name = "gpu_pcie"

    def run(self, host: Host, spec: GpuPcieCheck, facts: Facts, ctx: CheckContext) -> tuple[list[Finding],
                                                                                             dict[str, Any]]:
        hw: Hardware = ctx.hardware or LiveHardware(host)
        devices = hw.pci()
        gpus = [d for d in devices if d.kind == "gpu"]
        shared = oversubscription(gpus)
        evidence: dict[str, Any] = {"gpus": [gpu_evidence(g) for g in gpus]}
        for kind, key in (("display", "display_only"), ("other", "not_judged")):
            listed = [gpu_evidence(d) for d in devices if d.kind == kind]
            if listed:
                evidence[key] = listed
        if shared:
            evidence["oversubscription"] = shared
        findings: list[Finding] = []
        if not hw.offline and host.is_real:
            findings += _cross_check(host, evidence)
        if not gpus:
            seen = "; ".join(f"{d.address} is {d.why}" for d in devices)
            extra = f" (not GPUs: {seen})" if seen else ""
            if spec.min_count > 0:
                findings.append(Finding("fail", f"no GPU on the PCI bus (min_count {spec.min_count}){extra}",
                                        "check that the GPUs are seated and powered, and enabled in the BIOS; "
                                        "in a VM, that they are passed through"))
                return findings, evidence
            raise Skip(f"no GPU on the PCI bus{extra}")
        if len(gpus) < spec.min_count:
            findings.append(Finding("fail", f"{len(gpus)} GPUs on the PCI bus, fewer than min_count "
                                    f"{spec.min_count}", "a GPU fell off the bus (check dmesg for 'fallen off "
                                    "the bus' / Xid 79), or is not seated or powered"))
        for g in gpus:
            findings += self._one(g, spec)
        for s in shared:
            findings.append(Finding("pass", f"{len(s['gpus'])} GPUs ({', '.join(s['gpus'])}) share the "
                                    f"{s['link']} uplink of switch port {s['uplink']} to root port "
                                    f"{s['root_port']}: {s['downstream_lanes']} lanes below {s['uplink_lanes']}, "
                                    f"oversubscribed {s['ratio']}"))
        return findings, evidence

    def _one(self, g: PciGpu, spec: GpuPcieCheck) -> list[Finding]:
        link = g.link
        cur, mx = PciLink.gen(link.speed), PciLink.gen(link.max_speed)
        now = _label(link.speed, link.width)
        top = _label(link.max_speed, link.max_width)
        name = f"GPU {g.address} ({g.vendor_name} {g.device})"
        out: list[Finding] = []
        if link.width is None or cur is None:
            return [Finding("warn", f"{name}: the kernel shows no link speed/width (not a PCIe link, or the "
                            "device is in a low-power state)", None)]
        if spec.min_width is not None and link.width < spec.min_width:
            out.append(Finding("fail", f"{name}: link trained at {now}, narrower than min_width x{spec.min_width} "
                               f"(device max {top})", WIDTH_FIX))
        elif link.max_width is not None and link.width < link.max_width:
            out.append(Finding("warn", f"{name}: link trained at {now}, narrower than the device's {top}",
                               WIDTH_FIX))
        if spec.min_gen is not None and cur < spec.min_gen:
            if mx is not None and mx < spec.min_gen:
                out.append(Finding("fail", f"{name}: the device tops out at {top}, below min_gen Gen{spec.min_gen}",
                                   "this GPU cannot meet the profile's min_gen: lower it, or use a newer GPU"))
            else:
                out.append(Finding("fail", f"{name}: link running at {now}, below min_gen Gen{spec.min_gen} "
                                   f"(device max {top})", SPEED_FIX))
        elif mx is not None and cur < mx:
            out.append(Finding("warn", f"{name}: link running at {now}, below the device's {top}", SPEED_FIX))
        first = g.hops[0] if g.hops and g.hops[0].device == g.address else None
        if first is not None and first.link.max_width and link.max_width and first.link.max_width < link.max_width:
            out.append(Finding("warn", f"{name}: its slot ({first.port}) is only x{first.link.max_width} wide",
                               "move the GPU to an x16 slot"))
        out += self._hops(g, name, spec)
        if not out:
            up = g.switch_uplink
            via = f"; behind switch {up.device}, uplink {up.link.label()} to root port {up.port}" if up else ""
            out.append(Finding("pass", f"{name}: {now} (device max {top}){via}"))
        return out

    @staticmethod
    def _hops(g: PciGpu, name: str, spec: GpuPcieCheck) -> list[Finding]:
        """The links above the GPU (switch uplinks): a hop trained below its maximum warns; the narrowest or
        slowest hop is held to the profile's minimum like the GPU's own link."""
        out: list[Finding] = []
        above = [h for h in g.hops if h.device != g.address]
        for h in above:
            if not h.link.trained:
                out.append(Finding("warn", f"{name}: the link {_hop(h)} shows no speed/width", None))
                continue
            if h.link.max_width and (h.link.width or 0) < h.link.max_width:
                out.append(Finding("warn", f"{name}: the link {_hop(h)} trained at {h.link.label()}, narrower "
                                   f"than its {h.link.label(maximum=True)}", HOP_FIX))
            elif (PciLink.gen(h.link.speed) or 0) < (PciLink.gen(h.link.max_speed) or 0):
                out.append(Finding("warn", f"{name}: the link {_hop(h)} runs at {h.link.label()}, below its "
                                   f"{h.link.label(maximum=True)}", HOP_FIX))
        worst = g.bottleneck
        if worst is None or worst.device == g.address or not worst.link.trained:
            return out
        low_width = spec.min_width is not None and (worst.link.width or 0) < spec.min_width
        low_gen = spec.min_gen is not None and (PciLink.gen(worst.link.speed) or 0) < spec.min_gen
        if low_width or low_gen:
            need = " and ".join(x for x, bad in ((f"min_width x{spec.min_width}", low_width),
                                                 (f"min_gen Gen{spec.min_gen}", low_gen)) if bad)
            out.append(Finding("fail", f"{name}: its own link is {g.link.label()}, but the narrowest hop to the "
                               f"CPU, {_hop(worst)}, is {worst.link.label()} ({worst.gbps:g} GB/s), below {need}",
                               HOP_FIX))
        return out


def _hop(h: PciHop) -> str:
    return f"{h.device} → {h.port} ({h.port_role})"


def gpu_evidence(g: PciGpu) -> dict[str, Any]:
    """A GPU's (or display-only device's) evidence and facts entry: identity, kind, link, path, NUMA node."""
    d: dict[str, Any] = {"address": g.address, "vendor": g.vendor_name, "vendor_id": g.vendor, "device": g.device,
                         "class": g.pci_class, "kind": g.kind, "why": g.why, "driver": g.driver,
                         "numa_node": g.numa_node, "link": _label(g.link.speed, g.link.width),
                         "max_link": _label(g.link.max_speed, g.link.max_width),
                         "current_link_speed": g.link.speed, "current_link_width": g.link.width}
    if (g.link.speed, g.link.width, g.link.max_speed, g.link.max_width) == (None,) * 4:
        d["link"] = d["max_link"] = None  # a conventional PCI device (a BMC's VGA behind its bridge): no PCIe link
    if g.numa_node_from:
        d["numa_node_from"] = g.numa_node_from
    if g.upstream:
        d["upstream"] = g.upstream
        if g.upstream_link:
            d["upstream_max_link"] = _label(g.upstream_link.max_speed, g.upstream_link.max_width)
    if g.path:
        d["root_port"] = g.root_port
        d["path"] = list(g.path)
    if g.hops:
        d["hops"] = [{"device": h.device, "port": h.port, "port_role": h.port_role, "link": h.link.label(),
                      "max_link": h.link.label(maximum=True), "gb_per_s": h.gbps} for h in g.hops]
    worst = g.bottleneck
    if worst is not None:
        d["narrowest_hop"] = {"device": worst.device, "port": worst.port, "link": worst.link.label(),
                              "gb_per_s": worst.gbps}
    return d


def _cross_check(host: Host, evidence: dict[str, Any]) -> list[Finding]:
    """On the real root: the sysfs walk and udev must see the same GPUs."""
    udev = udev_pci_devices()
    if udev is None:
        evidence["udev"] = "unavailable"
        return []
    walk = {a for a, c in pci_devices(host).items() if is_gpu_class(c)}
    seen = {a for a, c in udev.items() if is_gpu_class(c)}
    evidence["udev"] = sorted(seen)
    if walk != seen:
        return [Finding("warn", f"sysfs shows GPUs {sorted(walk)} but udev shows {sorted(seen)}",
                        "a GPU appeared or vanished during the check (hot-plug, driver reset): run it again")]
    return []
