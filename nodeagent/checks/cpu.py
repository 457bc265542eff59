"""``cpu``: the CPU the operating system sees — required instruction-set flags, and no generic virtual CPU model.

Flags are read from ``/proc/cpuinfo``: what the kernel enabled (after BIOS settings, ``clearcpuid=`` and the
hypervisor's CPU model), not raw CPUID. Running in a VM is not a failure by itself — a VM whose CPU is passed
through (QEMU ``-cpu host``, libvirt ``host-passthrough``) has every flag of the host. A *generic* virtual CPU
model is: QEMU's ``kvm64`` (``Common KVM processor``) and ``qemu64`` (``QEMU Virtual CPU version …``) hide AVX,
AVX2, FMA and AVX-512, so every CPU-side kernel (weights or KV cache offloaded to host RAM, tokenizers,
sampling) falls back to SSE code. A field report: half the layers on the CPU took decode from 38 to 3.7 tok/s.

Example::

    checks:
      cpu: {require_flags: [avx2, fma, avx512f], reject_virtual_models: true}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..facts import Facts
from ..facts.hardware import (  # noqa: F401  (classify_model and its tables are this check's vocabulary)
    GENERIC_MODELS,
    NAMED_QEMU_MODELS,
    Hardware,
    LiveHardware,
    Virtualization,
    classify_model,
    cmdline_params,
)
from ..host import Host
from .base import CheckContext, Finding, Skip

if TYPE_CHECKING:
    from ..profile.checks import CpuCheck

#: Kernel parameters that hide CPU features from everything above the kernel.
HIDING_PARAMS = ("clearcpuid", "noxsave", "noxsaveopt", "noxsaves", "noavx", "noavx2", "noavx512")

PASSTHROUGH_FIX = ("give the VM the host's CPU: CPU type 'host' (Proxmox: cpu: host; QEMU: -cpu host; "
                   "libvirt: <cpu mode='host-passthrough'/>), then power the VM off and start it again — a cold "
                   "boot: a reboot from inside the guest keeps the old CPU model")


class CpuCheckImpl:
    name = "cpu"

    def run(self, host: Host, spec: CpuCheck, facts: Facts, ctx: CheckContext) -> tuple[list[Finding],
                                                                                         dict[str, Any]]:
        hw: Hardware = ctx.hardware or LiveHardware(host)
        cpu = hw.cpuinfo()
        if cpu is None:
            raise Skip("/proc/cpuinfo is missing or has no processor entries"
                       + (" in the saved facts" if hw.offline else ""))
        virt = hw.virtualization(cpu)
        params = cmdline_params(hw.cmdline())
        hiding = [f"{k}={v}" if v else k for k, v in params.items() if k in HIDING_PARAMS]
        evidence: dict[str, Any] = {
            "model": cpu.model, "vendor": cpu.vendor, "cpus": cpu.count,
            "virtualization": virt.kind or "none", "virtualization_evidence": list(virt.evidence),
            "required_flags": list(spec.require_flags),
            "present_flags": [f for f in spec.require_flags if f in cpu.flags],
        }
        if cpu.models:
            evidence["models"] = list(cpu.models)
        if hiding:
            evidence["cmdline_hides_features"] = hiding
        findings: list[Finding] = []
        kind = classify_model(cpu.model)
        if kind and kind[0] == "generic":
            msg = f"CPU model {cpu.model!r} is {kind[1]}: a generic virtual CPU without AVX2/FMA/AVX-512"
            if spec.reject_virtual_models:
                findings.append(Finding("fail", msg, PASSTHROUGH_FIX))
            else:
                findings.append(Finding("warn", msg + " (allowed by reject_virtual_models: false)", PASSTHROUGH_FIX))
        elif kind and kind[0] == "named" and virt.kind:
            findings.append(Finding("warn", f"CPU model {cpu.model!r} is {kind[1]}: the guest sees that model's "
                                    "flags, not the host's", PASSTHROUGH_FIX))
        missing = [f for f in spec.require_flags if f not in cpu.flags]
        if missing:
            findings.append(Finding("fail", f"missing CPU flags: {', '.join(missing)} (not enabled by the kernel in "
                                    "/proc/cpuinfo)", self._flag_remedy(virt, kind, hiding, missing)))
        elif spec.require_flags:
            findings.append(Finding("pass", f"required flags present: {', '.join(spec.require_flags)}"))
        if virt.kind and not any(f.status != "pass" for f in findings):
            findings.append(Finding("pass", f"runs in a {virt.kind} VM with a host-like CPU ({cpu.model!r}): fine"))
        elif not virt.kind and not findings:
            findings.append(Finding("pass", f"{cpu.model} on bare metal"))
        if not findings:
            findings.append(Finding("pass", f"{cpu.model}"))
        return findings, evidence

    @staticmethod
    def _flag_remedy(virt: Virtualization, kind: tuple[str, str] | None, hiding: list[str],
                     missing: list[str]) -> str:
        if hiding:
            return (f"the kernel command line hides CPU features ({' '.join(hiding)}): remove it from the boot "
                    "loader configuration and reboot")
        if virt.kind:
            return PASSTHROUGH_FIX
        return (f"this CPU or its firmware does not enable {', '.join(missing)}: check the BIOS/UEFI settings "
                "(AVX/AVX-512 can be disabled there), or run the workload on a CPU that has them")
