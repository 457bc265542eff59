"""``gpu_pcie``: every GPU's PCIe link, as trained, against what the device can do and what the profile needs.

GPUs are found by walking ``/sys/bus/pci/devices`` under the node's root (class 0x0300 VGA or 0x0302 3D
controller); on the real root the walk is cross-checked against udev (pyudev). For each GPU the check compares
``current_link_speed/width`` with ``max_link_speed/width`` and with the profile's ``min_gen`` / ``min_width``.
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
from ..facts.hardware import PciGpu, PciLink, is_gpu_class, pci_devices, read_gpus, udev_pci_devices
from ..host import Host
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import GpuPcieCheck

WIDTH_FIX = ("a link trained narrower than the slot: reseat the GPU, check the riser/cable and that the slot is "
             "wired x16 (not shared or bifurcated in the BIOS), then cold-boot")
SPEED_FIX = ("if the GPU was idle, look again under load (nvidia-smi --query-gpu=pcie.link.gen.current,"
             "pcie.link.gen.max --format=csv): idle GPUs lower their link speed; if it stays low, check the BIOS "
             "PCIe speed setting for the slot, the riser/retimer, and reseat the card")


def _label(link_speed: str | None, width: int | None) -> str:
    gen = PciLink.gen(link_speed)
    return f"Gen{gen if gen else '?'} x{width if width is not None else '?'}"


class GpuPcieCheckImpl:
    name = "gpu_pcie"

    def run(self, host: Host, spec: GpuPcieCheck, facts: Facts, ctx: CheckContext) -> tuple[list[Finding],
                                                                                             dict[str, Any]]:
        gpus = read_gpus(host)
        evidence: dict[str, Any] = {"gpus": [self._ev(g) for g in gpus]}
        findings: list[Finding] = []
        if host.is_real:
            findings += self._cross_check(host, evidence)
        if not gpus:
            if spec.min_count > 0:
                findings.append(Finding("fail", f"no GPU on the PCI bus (min_count {spec.min_count})",
                                        "check that the GPUs are seated and powered, and enabled in the BIOS; "
                                        "in a VM, that they are passed through"))
                return findings, evidence
            raise Skip("no GPU on the PCI bus")
        if len(gpus) < spec.min_count:
            findings.append(Finding("fail", f"{len(gpus)} GPUs on the PCI bus, fewer than min_count "
                                    f"{spec.min_count}", "a GPU fell off the bus (check dmesg for 'fallen off "
                                    "the bus' / Xid 79), or is not seated or powered"))
        for g in gpus:
            findings += self._one(g, spec)
        return findings, evidence

    @staticmethod
    def _ev(g: PciGpu) -> dict[str, Any]:
        d: dict[str, Any] = {"address": g.address, "vendor": g.vendor_name, "device": g.device,
                             "class": g.pci_class, "numa_node": g.numa_node,
                             "link": _label(g.link.speed, g.link.width),
                             "max_link": _label(g.link.max_speed, g.link.max_width),
                             "current_link_speed": g.link.speed, "current_link_width": g.link.width}
        if g.upstream:
            d["upstream"] = g.upstream
            if g.upstream_link:
                d["upstream_max_link"] = _label(g.upstream_link.max_speed, g.upstream_link.max_width)
        return d

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
        if g.upstream_link and g.upstream_link.max_width and link.max_width and \
                g.upstream_link.max_width < link.max_width:
            out.append(Finding("warn", f"{name}: its slot ({g.upstream}) is only "
                               f"x{g.upstream_link.max_width} wide", "move the GPU to an x16 slot"))
        if not out:
            out.append(Finding("pass", f"{name}: {now} (device max {top})"))
        return out

    @staticmethod
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
