"""Real-kernel test harness: boot a Debian 6.12 kernel under QEMU (TCG) and run commands in it.

The guest chroots into the *host's own root* (shared read-only over virtio-9p, made writable
with an overlayfs whose upper layer is guest RAM), so the project's venv and code run
unchanged inside the guest while every /sys and /proc write lands in the guest kernel.

Layout ``3node`` (the default) gives the guest three NUMA nodes::

    node0 [0, 2G)   2 CPUs + DRAM
    node1 [4G, 6G)  CPU-less DRAM
    node2 [6G, 7G)  CPU-less, fully covered by ``memmap=1G!6G`` legacy pmem -> region0/namespace0.0

``ndctl create-namespace -f -e namespace0.0 -m devdax`` then yields ``dax0.0`` (target_node 2),
which ``daxctl reconfigure-device --mode=system-ram`` hot-plugs as a new CPU-less memory node.

Stdlib only.  Shells out to apt-get/apt-cache/dpkg-deb/dpkg-query (asset fetch), the downloaded
kmod's depmod, busybox-static's cpio and qemu-system-x86_64.  Everything it downloads lives in a private
cache directory; it never writes to the host's /sys, /proc or apt state.

CLI::

    python tests/realkernel/harness.py fetch
    python tests/realkernel/harness.py run 'uname -r; cat /sys/devices/system/node/online'
    python tests/realkernel/harness.py capture
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
ARTIFACTS_DIR = Path(os.environ.get("NODEAGENT_RK_ARTIFACTS", HERE / "artifacts"))
CAPTURED_DIR = HERE / "captured"

RECIPE_VERSION = 2  # bump to invalidate every warm cache
BASE_SUITE = "bookworm"
BACKPORTS_SUITE = "bookworm-backports"
KERNEL_META_PACKAGE = "linux-image-amd64"
#: Where the guest's kernel comes from: this suite's ``linux-image-amd64``. ``NODEAGENT_RK_KERNEL_SUITE`` picks
#: another one of the same mirror (``trixie-backports`` for a 6.16+ kernel); its assets get a cache of their own.
KERNEL_SUITE_ENV = "NODEAGENT_RK_KERNEL_SUITE"
TOOL_PACKAGES = ("ndctl", "daxctl", "kmod")  # kmod: depmod here, modprobe in the guest
KMOD_LINKS = ("depmod", "insmod", "lsmod", "modinfo", "modprobe", "rmmod")
# same source package as the tools: always shipped so versions match, even if the host has them
TOOL_LIBRARIES = ("libndctl6", "libdaxctl1", "libcxl1")
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MULTIARCH = "x86_64-linux-gnu"
DEFAULT_MODULES = (
    "libnvdimm",
    "nd_e820",
    "nd_pmem",
    "dax_pmem",
    "device_dax",
    "kmem",
    "9pnet_virtio",
    "9p",
    "overlay",
)
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MARK = "@@NODEAGENT-RK"


class HarnessUnavailable(RuntimeError):
    """QEMU or the guest assets cannot be had on this machine (tests should skip)."""


class GuestError(RuntimeError):
    """The guest did not boot/finish properly (tests should fail)."""

    def __init__(self, message: str, console_path: Path | None = None) -> None:
        super().__init__(f"{message} (console: {console_path})" if console_path else message)
        self.console_path = console_path


class GuestTimeout(GuestError):
    """QEMU was killed because the hard time bound expired."""


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Assets:
    cache_dir: Path
    kernel_version: str  # uname -r of the guest, e.g. 6.12.95+deb12-amd64
    kernel_package: str  # e.g. linux-image-6.12.95+deb12-amd64=6.12.95-1~bpo12+1
    vmlinuz: Path
    modules_dir: Path  # <kernel root>/lib/modules/<kernel_version>, depmod'ed
    tools_root: Path  # ndctl/daxctl/cxl + libs, laid out as usr/bin, usr/lib/<multiarch>, etc
    busybox: Path  # static busybox binary
    packages: tuple[str, ...] = ()  # name=version of every .deb used


@dataclass(frozen=True)
class Layout:
    name: str
    memory: str
    qemu_args: tuple[str, ...]
    kernel_args: tuple[str, ...]
    machine: str = "q35"
    cpu: str = "max"
    #: QEMU at least this version (the CXL layout: cxl-type3 volatile-memdev= arrived in 8.0)
    qemu_min: tuple[int, int] = (0, 0)
    #: TCG plugins (native/NAME.c, built by build_native) loaded into QEMU for this layout under TCG
    qemu_plugins: tuple[str, ...] = ()


def _numa_node(node: int, size: str, cpus: str | None) -> tuple[str, ...]:
    cpu_opt = f",cpus={cpus}" if cpus else ""
    return (
        "-object",
        f"memory-backend-ram,id=m{node},size={size}",
        "-numa",
        f"node,nodeid={node}{cpu_opt},memdev=m{node}",
    )


LAYOUTS: dict[str, Layout] = {
    "3node": Layout(
        name="3node",
        memory="5G",
        qemu_args=_numa_node(0, "2G", "0-1") + _numa_node(1, "2G", None) + _numa_node(2, "1G", None),
        kernel_args=("memmap=1G!6G",),
    ),
    "1node": Layout(name="1node", memory="2G", qemu_args=(), kernel_args=()),
}

# Layout ``placement`` (bench/placement, ../shared/reference/placement/NOTES.md): a small fast node, so that a
# workload fills it.  With more than 2.75G of RAM q35 puts 2G below 4G, so node0 = [0, 1G) (both CPUs),
# node1 = [1G, 2G) (CPU-less DRAM) and node2 = [4G, 5.5G), fully covered by ``memmap=1536M!4G`` legacy pmem
# (devdax -> kmem: 1408 MiB online in ZONE_MOVABLE, memory_tier22).
LAYOUTS["placement"] = Layout(
    name="placement",
    memory="3584M",
    qemu_args=_numa_node(0, "1G", "0-1") + _numa_node(1, "1G", None) + _numa_node(2, "1536M", None),
    kernel_args=("memmap=1536M!4G",),
)
# Layout ``placement-cxl1g``: the same with a CXL stand-in of 1 GiB (node2 = [4G, 5G), ``memmap=1G!4G``), smaller
# than the cold set of a workload 1.1-1.3x the size of node0: what a node whose cold set outgrows its CXL memory
# does (bench/placement: ``run.py --layout placement-cxl1g``).
LAYOUTS["placement-cxl1g"] = Layout(
    name="placement-cxl1g",
    memory="3072M",
    qemu_args=_numa_node(0, "1G", "0-1") + _numa_node(1, "1G", None) + _numa_node(2, "1G", None),
    kernel_args=("memmap=1G!4G",),
)


# Layout ``cxl`` (../shared/reference/realkernel/NOTES.md, Step 6): two CXL type-3 volatile memdevs of 256 MiB
# with distinct serials, each behind its own root port of ONE pxb-cxl host bridge (bus 0c), and one 4 GiB CXL
# window (CFMWS, decoder0.0) over that host bridge. node0 = [0, 2G) with both CPUs, node1 = [4G, 6G) CPU-less
# DRAM; the window's proximity domain becomes node 2 once a region is onlined. Needs QEMU >= 8 (Debian 12 has
# 7.2: the harness fetches bookworm-backports' QEMU), ``cxl=on``, and a CPU without the hypervisor CPUID bit
# (else a region commit fails: ENXIO "Failed to synchronize CPU cache state"). Under TCG QEMU loads the plugin
# native/x86_block_access.c: without it, an FPU state save (such as a signal frame) that crosses from RAM into the
# emulated CXL memory crashes QEMU (SIGSEGV in access_stq), which the shipped profile's demotion makes likely.
CXL_SERIALS = (0x4C454F0001, 0x4C454F0002)
CXL_MEMDEV_SIZE = "256M"
CXL_WINDOW = "4G"
LAYOUTS["cxl"] = Layout(
    name="cxl",
    memory="4G",
    qemu_args=_numa_node(0, "2G", "0-1")
    + _numa_node(1, "2G", None)
    + tuple(
        a
        for i, sn in enumerate(CXL_SERIALS)
        for a in ("-object", f"memory-backend-ram,id=cxl-vmem{i},share=on,size={CXL_MEMDEV_SIZE}")
    )
    + ("-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1")
    + tuple(
        a
        for i, sn in enumerate(CXL_SERIALS)
        for a in (
            "-device", f"cxl-rp,port={i},bus=cxl.1,id=cxl-rp{i},chassis=0,slot={2 + i}",
            "-device", f"cxl-type3,bus=cxl-rp{i},volatile-memdev=cxl-vmem{i},id=cxl-mem{i},sn={sn:#x}",
        )
    )
    + ("-M", f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={CXL_WINDOW}"),
    kernel_args=(),
    machine="q35,cxl=on",
    cpu="max,hypervisor=off",
    qemu_min=(8, 0),
    qemu_plugins=("x86_block_access",),
)

# Layout ``cxl-2hb``: the bare-memdev shape of a two-expander server, one expander per host bridge. node0 = [0, 2G)
# with both CPUs, node1 = [4G, 6G) CPU-less DRAM, node2 = [6G, 7G) an SRAT node covered by ``memmap=1G!6G`` (legacy
# pmem, fsdax, offline: a possible node that no window owns), and two ``pxb-cxl`` host bridges (buses 0c and 14),
# each with one root port and one 256 MiB volatile memdev (serials ...01 under 0c, ...02 under 14). Three CXL
# windows: one per host bridge (decoder0.0 over 0c, decoder0.1 over 14) and one interleaving both (decoder0.2,
# x2): Linux gives each window a node past the SRAT ones, in CFMWS order (3, 4, 5). The shipped profile's x1
# regions can only take the per-bridge windows.
CXL_2HB_SERIALS = (0x4C454F0001, 0x4C454F0002)
LAYOUTS["cxl-2hb"] = Layout(
    name="cxl-2hb",
    memory="5G",
    qemu_args=_numa_node(0, "2G", "0-1")
    + _numa_node(1, "2G", None)
    + _numa_node(2, "1G", None)
    + tuple(
        a
        for i, sn in enumerate(CXL_2HB_SERIALS)
        for a in (
            "-object", f"memory-backend-ram,id=cxl-vmem{i},share=on,size={CXL_MEMDEV_SIZE}",
            "-device", f"pxb-cxl,bus_nr={12 + 8 * i},bus=pcie.0,id=cxl.{i + 1}",
            "-device", f"cxl-rp,port=0,bus=cxl.{i + 1},id=cxl-rp{i},chassis=0,slot={2 + i}",
            "-device", f"cxl-type3,bus=cxl-rp{i},volatile-memdev=cxl-vmem{i},id=cxl-mem{i},sn={sn:#x}",
        )
    )
    + ("-M", ",".join((f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={CXL_WINDOW}",
                       f"cxl-fmw.1.targets.0=cxl.2,cxl-fmw.1.size={CXL_WINDOW}",
                       f"cxl-fmw.2.targets.0=cxl.1,cxl-fmw.2.targets.1=cxl.2,cxl-fmw.2.size={CXL_WINDOW}"))),
    kernel_args=("memmap=1G!6G",),
    machine="q35,cxl=on",
    cpu="max,hypervisor=off",
    qemu_min=(8, 0),
    qemu_plugins=("x86_block_access",),
)

# Layout ``cxl-1md``: issue 51's literal shape: ONE bare 256 MiB volatile memdev (serial ...01) behind one root port of
# one ``pxb-cxl`` host bridge (bus 0c), one 4 GiB window over it, and the SRAT nodes of ``cxl-2hb``: node0 = [0, 2G)
# with both CPUs, node1 = [4G, 6G) CPU-less DRAM, node2 = [6G, 7G) covered by ``memmap=1G!6G`` (legacy pmem, fsdax,
# offline). The window gets the node past SRAT's (3), so the region lands on node 3 while node 2 is the lowest id
# with no memory online: a plan that guessed the next free id would pair DAMON with node 2.
CXL_1MD_SERIAL = 0x4C454F0001
LAYOUTS["cxl-1md"] = Layout(
    name="cxl-1md",
    memory="5G",
    qemu_args=_numa_node(0, "2G", "0-1")
    + _numa_node(1, "2G", None)
    + _numa_node(2, "1G", None)
    + ("-object", f"memory-backend-ram,id=cxl-vmem0,share=on,size={CXL_MEMDEV_SIZE}",
       "-device", "pxb-cxl,bus_nr=12,bus=pcie.0,id=cxl.1",
       "-device", "cxl-rp,port=0,bus=cxl.1,id=cxl-rp0,chassis=0,slot=2",
       "-device", f"cxl-type3,bus=cxl-rp0,volatile-memdev=cxl-vmem0,id=cxl-mem0,sn={CXL_1MD_SERIAL:#x}",
       "-M", f"cxl-fmw.0.targets.0=cxl.1,cxl-fmw.0.size={CXL_WINDOW}"),
    kernel_args=("memmap=1G!6G",),
    machine="q35,cxl=on",
    cpu="max,hypervisor=off",
    qemu_min=(8, 0),
    qemu_plugins=("x86_block_access",),
)


@dataclass
class GuestResult:
    rc: int
    stdout: str
    console_log: str
    wall_seconds: float
    stderr: str = ""
    console_path: Path | None = None  # set when the console was saved (rc != 0)
    guest_uptime: float | None = None  # guest uptime when the command finished


@dataclass(frozen=True)
class Step:
    """One command of a batch run in a single boot; ``capture_as`` names its fixture file."""

    name: str
    command: str
    capture_as: str | None = None


@dataclass(frozen=True)
class StepResult:
    name: str
    command: str
    rc: int
    stdout: str
    stderr: str
    seconds: float | None = None  # guest-side duration of the command

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


@dataclass
class StepsResult:
    guest: GuestResult
    steps: dict[str, StepResult] = field(default_factory=dict)

    def __getitem__(self, name: str) -> StepResult:
        return self.steps[name]


# --------------------------------------------------------------------------- small helpers


def kernel_suite() -> str:
    """The suite whose ``linux-image-amd64`` the guest boots: ``$NODEAGENT_RK_KERNEL_SUITE``, else the backports'."""
    return os.environ.get(KERNEL_SUITE_ENV) or BACKPORTS_SUITE


def _cache_dir_from_env() -> Path:
    if os.environ.get("NODEAGENT_RK_CACHE"):
        return Path(os.environ["NODEAGENT_RK_CACHE"])
    base = os.environ.get("NODEAGENT_CACHE") or str(Path.home() / ".cache" / "nodeagent")
    suite = kernel_suite()
    return Path(base) / ("realkernel" if suite == BACKPORTS_SUITE else f"realkernel-{suite}")


# Resolved at import: the test suite points NODEAGENT_CACHE at a per-run tmp dir later on, which
# would make every run re-download ~110 MB.  NODEAGENT_RK_CACHE still overrides at any time.
_IMPORT_TIME_CACHE_DIR = _cache_dir_from_env()


def default_cache_dir() -> Path:
    """$NODEAGENT_RK_CACHE, else ${NODEAGENT_CACHE:-~/.cache/nodeagent}/realkernel as at import time."""
    if os.environ.get("NODEAGENT_RK_CACHE"):
        return Path(os.environ["NODEAGENT_RK_CACHE"])
    return _IMPORT_TIME_CACHE_DIR


def _run(
    cmd: Sequence[str], *, cwd: Path | None = None, timeout: float = 600, env: Mapping[str, str] | None = None
) -> str:
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise HarnessUnavailable(f"command failed (rc {proc.returncode}): {shlex.join(cmd)}\n{tail}")
    return proc.stdout


def _which(name: str, extra_dirs: Sequence[str] = ("/usr/sbin", "/sbin")) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        candidate = Path(d) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def qemu_binary() -> str | None:
    """Path of qemu-system-x86_64 ($NODEAGENT_QEMU overrides), or None when absent."""
    override = os.environ.get("NODEAGENT_QEMU")
    if override:
        return override if os.access(override, os.X_OK) else None
    return _which("qemu-system-x86_64", ("/usr/bin", "/usr/local/bin"))


# --------------------------------------------------------------------------- apt sources


_NO = ("no", "false", "0", "off")


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None = None
    check_valid_until: bool = True  # False for snapshot mirrors ("Check-Valid-Until: no")


def parse_one_line_sources(text: str) -> list[AptSource]:
    """Parse classic ``deb [opts] uri suite comp...`` lines (deb-src and comments skipped)."""
    out: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb ") and not line.startswith("deb\t"):
            continue
        rest = line[3:].strip()
        opts: dict[str, str] = {}
        if rest.startswith("["):
            inner, _, rest = rest[1:].partition("]")
            for item in inner.split():
                key, _, value = item.partition("=")
                opts[key.lower()] = value
        words = rest.split()
        if len(words) < 2:
            continue
        valid = opts.get("check-valid-until", "yes").lower() not in _NO
        out.append(AptSource(words[0], (words[1],), tuple(words[2:]), opts.get("signed-by"), valid))
    return out


def _deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    para: dict[str, str] = {}
    key = None
    for raw in text.splitlines() + [""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if para:
                yield para
            para, key = {}, None
        elif raw[0] in " \t" and key:
            para[key] += "\n" + raw.strip()
        elif ":" in raw:
            key, _, value = raw.partition(":")
            key = key.strip().lower()
            para[key] = value.strip()


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Parse a deb822 ``*.sources`` file (only enabled ``Types: deb`` stanzas)."""
    out: list[AptSource] = []
    for para in _deb822_paragraphs(text):
        if "deb" not in para.get("types", "").split():
            continue
        if para.get("enabled", "yes").lower() in _NO:
            continue
        signed = para.get("signed-by")
        if signed and ("\n" in signed or "BEGIN PGP" in signed):
            signed = None  # inline key block: not reusable as a path
        suites = tuple(para.get("suites", "").split())
        comps = tuple(para.get("components", "").split())
        for uri in para.get("uris", "").split():
            valid = para.get("check-valid-until", "yes").lower() not in _NO
            out.append(AptSource(uri, suites, comps, signed, valid))
    return out


def host_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    sources: list[AptSource] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        sources += parse_one_line_sources(main_list.read_text(errors="replace"))
    parts = etc_apt / "sources.list.d"
    for path in sorted(parts.glob("*.list")) if parts.is_dir() else []:
        sources += parse_one_line_sources(path.read_text(errors="replace"))
    for path in sorted(parts.glob("*.sources")) if parts.is_dir() else []:
        sources += parse_deb822_sources(path.read_text(errors="replace"))
    return sources


def find_debian_mirror(sources: Sequence[AptSource], suite: str = BASE_SUITE) -> AptSource:
    """The first source that serves ``suite`` (its URI is reused for the backports suite)."""
    for src in sources:
        if suite in src.suites:
            return src
    raise HarnessUnavailable(f"no apt source for suite {suite!r} in the host's apt configuration")


def private_sources_list(mirror: AptSource, kernel_suite: str = BACKPORTS_SUITE) -> str:
    signed = mirror.signed_by or (DEFAULT_KEYRING if Path(DEFAULT_KEYRING).is_file() else None)
    options = [f"signed-by={signed}"] if signed else []
    options += [] if mirror.check_valid_until else ["check-valid-until=no"]
    opts = f"[{' '.join(options)}] " if options else ""
    comps = " ".join(mirror.components) if "main" in mirror.components else "main"
    suites = tuple(dict.fromkeys((BASE_SUITE, BACKPORTS_SUITE, kernel_suite)))
    return "".join(f"deb {opts}{mirror.uri} {suite} {comps}\n" for suite in suites)


# --------------------------------------------------------------------------- private apt


class PrivateApt:
    """apt-get/apt-cache confined to ``<cache>/apt`` (own sources, lists, cache, archives)."""

    def __init__(self, root: Path, mirror: AptSource, kernel_suite: str = BACKPORTS_SUITE) -> None:
        self.root = root
        for sub in ("sources.list.d", "preferences.d", "lists/partial", "state", "cache", "archives/partial"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "sources.list").write_text(private_sources_list(mirror, kernel_suite))

    def options(self) -> list[str]:
        r = self.root
        settings = {
            "Dir::Etc::SourceList": r / "sources.list",
            "Dir::Etc::SourceParts": r / "sources.list.d",
            "Dir::Etc::Preferences": r / "preferences",
            "Dir::Etc::PreferencesParts": r / "preferences.d",
            "Dir::State": r / "state",
            "Dir::State::Lists": r / "lists",
            "Dir::Cache": r / "cache",
            "Dir::Cache::Archives": r / "archives",
            "Debug::NoLocking": "1",
            "APT::Sandbox::User": "root",
            "Acquire::Languages": "none",
        }
        opts = ["-q"]
        for key, value in settings.items():
            opts += ["-o", f"{key}={value}"]
        return opts

    def update(self) -> None:
        _run(["apt-get", *self.options(), "update"], timeout=300)

    def show_field(self, spec: str, name: str) -> str:
        text = _run(["apt-cache", *self.options(), "show", spec])
        for para in _deb822_paragraphs(text):
            if name.lower() in para:
                return para[name.lower()]
        raise HarnessUnavailable(f"apt-cache show {spec}: no {name} field")

    def direct_depends(self, package: str) -> list[str]:
        text = _run(
            [
                "apt-cache",
                *self.options(),
                "depends",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
                "--no-breaks",
                "--no-replaces",
                "--no-enhances",
                "--no-pre-depends",
                package,
            ]
        )
        deps: list[str] = []
        alternative = False
        for line in text.splitlines()[1:]:
            m = re.match(r"\s*(\|?)Depends:\s*(\S+)", line)
            if not m:
                continue
            if not alternative and not m.group(2).startswith("<"):
                deps.append(m.group(2))
            alternative = m.group(1) == "|"
        return deps

    def download(self, specs: Sequence[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        before = set(dest.glob("*.deb"))
        _run(["apt-get", *self.options(), "download", *specs], cwd=dest, timeout=900)
        return sorted(set(dest.glob("*.deb")) - before)


def host_has_package(name: str) -> bool:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", name],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode == 0 and proc.stdout.strip() == "installed"


def tool_package_closure(apt: PrivateApt, roots: Sequence[str] = TOOL_PACKAGES + TOOL_LIBRARIES) -> list[str]:
    """``roots`` plus every (transitive) dependency the host does not have installed.

    The guest chroots into the host root, so host-installed libraries are already there.
    """
    wanted: list[str] = []
    todo = list(roots)
    while todo:
        pkg = todo.pop(0)
        if pkg in wanted:
            continue
        wanted.append(pkg)
        todo += [d for d in apt.direct_depends(pkg) if d not in wanted and not host_has_package(d)]
    return wanted


# --------------------------------------------------------------------------- assets


def _extract(deb: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _run(["dpkg-deb", "-x", str(deb), str(dest)])


def _deb_id(deb: Path) -> str:
    name, version = _run(["dpkg-deb", "-f", str(deb), "Package", "Version"]).splitlines()[:2]
    return f"{name.split(':', 1)[1].strip()}={version.split(':', 1)[1].strip()}"


def run_depmod(kernel_root: Path, kernel_version: str, tools_root: Path, busybox: Path) -> None:
    """depmod -b with the downloaded kmod (writes the .bin indexes libkmod needs); the host's
    depmod or busybox's applet (text modules.dep only, 2x slower) when that cannot run."""
    kmod_depmod = tools_root / "usr/sbin/depmod"
    host_depmod = _which("depmod")
    if kmod_depmod.exists():
        libs = {"LD_LIBRARY_PATH": str(tools_root / "usr/lib" / MULTIARCH)}
        cmd, env = [str(kmod_depmod)], libs
    elif host_depmod:
        cmd, env = [host_depmod], None
    else:
        cmd, env = [str(busybox), "depmod"], None
    _run([*cmd, "-b", str(kernel_root), kernel_version], env=env)
    if not (kernel_root / "lib/modules" / kernel_version / "modules.dep").is_file():
        raise HarnessUnavailable("depmod produced no modules.dep")


def _install_tools(extract_dir: Path, tools_root: Path) -> None:
    """Keep only what the guest needs from the ndctl/daxctl debs (binaries, libs, config)."""
    keep = (
        "usr/bin",
        f"usr/lib/{MULTIARCH}",
        "etc/ndctl",
        "etc/ndctl.conf.d",
        "etc/daxctl.conf.d",
        "usr/share/daxctl",
    )
    for rel in keep:
        src = extract_dir / rel
        if src.is_dir():
            shutil.copytree(src, tools_root / rel, symlinks=True, dirs_exist_ok=True)
    kmod = extract_dir / "bin/kmod"  # Debian 12 ships kmod in /bin + /sbin links: move under /usr
    if kmod.is_file():
        shutil.copy2(kmod, tools_root / "usr/bin/kmod")
        (tools_root / "usr/sbin").mkdir(parents=True, exist_ok=True)
        for name in KMOD_LINKS:
            (tools_root / "usr/sbin" / name).symlink_to("../bin/kmod")
    if not (tools_root / "usr/bin/daxctl").exists():
        raise HarnessUnavailable("daxctl missing from the extracted packages")


def _fetch_assets(cache_dir: Path) -> Assets:
    suite = kernel_suite()
    apt = PrivateApt(cache_dir / "apt", find_debian_mirror(host_apt_sources()), suite)
    apt.update()
    kernel_pkg = os.environ.get("NODEAGENT_RK_KERNEL_PACKAGE") or _kernel_package(apt, suite)
    debs_dir = cache_dir / "debs"
    shutil.rmtree(debs_dir, ignore_errors=True)
    tools = tool_package_closure(apt)
    parts = _kernel_parts(apt, kernel_pkg)
    kernel_debs = apt.download([kernel_pkg, *parts], debs_dir / "kernel")
    tool_debs = apt.download(tools, debs_dir / "tools")
    busybox_debs = apt.download(["busybox-static"], debs_dir / "busybox")
    if len(kernel_debs) != 1 + len(parts) or len(busybox_debs) != 1 or len(tool_debs) != len(tools):
        raise HarnessUnavailable(f"unexpected downloads: {kernel_debs} {tool_debs} {busybox_debs}")
    image = next(d for d in kernel_debs if d.name.startswith(kernel_pkg.split("=")[0] + "_"))
    return _unpack(cache_dir, image, tool_debs, busybox_debs[0], [d for d in kernel_debs if d != image])


def _kernel_parts(apt: PrivateApt, kernel_pkg: str) -> list[str]:
    """What a split kernel package pins at its own version (Debian since 6.17/7.x: ``linux-image-V`` holds no files;
    ``linux-binary-V`` has the vmlinuz, ``linux-modules-V`` the modules, ``linux-base-V`` modules.builtin and the
    config): every ``linux-*`` dependency with ``(= version)``. None for the 6.12 packages, which hold it all."""
    depends = apt.show_field(kernel_pkg, "Depends")
    return [f"{m.group(1)}={m.group(2)}"
            for m in re.finditer(r"(?:^|,)\s*(linux-[^\s,(|]+)\s*\(=\s*([^)\s]+)\)", depends)]


def _kernel_package(apt: PrivateApt, suite: str = BACKPORTS_SUITE) -> str:
    depends = apt.show_field(f"{KERNEL_META_PACKAGE}/{suite}", "Depends")
    m = re.search(r"(linux-image-[^\s,(]+)\s*(?:\(=\s*([^)\s]+)\))?", depends)
    if not m:
        raise HarnessUnavailable(f"cannot resolve {KERNEL_META_PACKAGE}: Depends={depends!r}")
    return f"{m.group(1)}={m.group(2)}" if m.group(2) else m.group(1)


def _merged_usr_kernel(root: Path) -> None:
    """A kernel package of a merged-/usr release (trixie on) installs ``usr/lib/modules/V`` with ``vmlinuz`` in it:
    laid out as the 6.12 packages are (``lib/modules/V``, ``boot/vmlinuz-V``) for depmod and the initramfs."""
    usr = root / "usr/lib/modules"
    if usr.is_dir() and not (root / "lib/modules").exists():
        (root / "lib").mkdir(parents=True, exist_ok=True)
        usr.rename(root / "lib/modules")
    for image in (root / "lib/modules").glob("*/vmlinuz"):
        (root / "boot").mkdir(exist_ok=True)
        dest = root / "boot" / f"vmlinuz-{image.parent.name}"
        if not dest.exists():
            image.rename(dest)


def _unpack(cache_dir: Path, kernel_deb: Path, tool_debs: Sequence[Path], busybox_deb: Path,
            kernel_parts: Sequence[Path] = ()) -> Assets:
    stage = Path(tempfile.mkdtemp(prefix="unpack.", dir=cache_dir))
    try:
        for deb in (kernel_deb, *kernel_parts):
            _extract(deb, stage / "kernel")
        _merged_usr_kernel(stage / "kernel")
        _extract(busybox_deb, stage / "busybox")
        for deb in tool_debs:
            _extract(deb, stage / "tools-extract")
        _install_tools(stage / "tools-extract", stage / "tools")
        shutil.rmtree(stage / "tools-extract")
        versions = sorted((stage / "kernel/lib/modules").iterdir())
        if len(versions) != 1:
            raise HarnessUnavailable(f"expected one module tree, got {versions}")
        kver = versions[0].name
        run_depmod(stage / "kernel", kver, stage / "tools", stage / "busybox/bin/busybox")
        for name in ("kernel", "busybox", "tools"):
            shutil.rmtree(cache_dir / name, ignore_errors=True)
            (stage / name).rename(cache_dir / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    ids = [_deb_id(d) for d in (kernel_deb, busybox_deb, *tool_debs, *kernel_parts)]
    shutil.rmtree(cache_dir / "debs", ignore_errors=True)  # ~110 MB, not needed once unpacked
    return _assets_from(cache_dir, kver, ids[0], tuple(ids))


def _assets_from(cache_dir: Path, kver: str, kernel_pkg: str, packages: tuple[str, ...]) -> Assets:
    return Assets(
        cache_dir=cache_dir,
        kernel_version=kver,
        kernel_package=kernel_pkg,
        vmlinuz=cache_dir / "kernel/boot" / f"vmlinuz-{kver}",
        modules_dir=cache_dir / "kernel/lib/modules" / kver,
        tools_root=cache_dir / "tools",
        busybox=cache_dir / "busybox/bin/busybox",
        packages=packages,
    )


def _load_stamp(cache_dir: Path) -> Assets | None:
    try:
        data = json.loads((cache_dir / "assets.json").read_text())
    except (OSError, ValueError):
        return None
    if data.get("recipe") != RECIPE_VERSION:
        return None
    assets = _assets_from(cache_dir, data["kernel_version"], data["kernel_package"], tuple(data["packages"]))
    required = (
        assets.vmlinuz,
        assets.modules_dir / "modules.dep",
        assets.busybox,
        assets.tools_root / "usr/bin/daxctl",
    )
    return assets if all(p.exists() for p in required) else None


def _write_stamp(assets: Assets) -> None:
    data = {
        "recipe": RECIPE_VERSION,
        "kernel_version": assets.kernel_version,
        "kernel_package": assets.kernel_package,
        "packages": list(assets.packages),
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = assets.cache_dir / "assets.json.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.rename(assets.cache_dir / "assets.json")


def ensure_assets(cache_dir: Path | None = None) -> Assets:
    """Fetch + unpack kernel, ndctl/daxctl/cxl (+libs) and busybox-static; fast no-op when warm.

    Raises HarnessUnavailable when anything cannot be fetched/unpacked.
    """
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HarnessUnavailable(f"cannot create the cache dir {cache_dir}: {exc}") from exc
    warm = _load_stamp(cache_dir)
    if warm:
        return warm
    with _locked(cache_dir / ".lock"):
        warm = _load_stamp(cache_dir)  # another process may have finished meanwhile
        if warm:
            return warm
        try:
            assets = _fetch_assets(cache_dir)
        except (OSError, subprocess.SubprocessError) as exc:
            raise HarnessUnavailable(f"asset fetch failed: {exc}") from exc
        _write_stamp(assets)
        return assets


# --------------------------------------------------------------------------- QEMU >= 8 (the CXL layout)

#: What runs QEMU from extracted debs: the emulator, its firmware/ROMs and keymaps, and its own modules.
QEMU_PACKAGES = ("qemu-system-x86", "qemu-system-common", "qemu-system-data")
#: The host QEMU's module directory: modules of another build abort (or at least warn in) a newer QEMU.
HOST_QEMU_MODULES = Path("/usr/lib") / MULTIARCH / "qemu"
QEMU_RECIPE = 1


@dataclass(frozen=True)
class Qemu:
    """A qemu-system-x86_64: the host's, or bookworm-backports' extracted under the cache (``root``)."""

    binary: str
    version: tuple[int, ...]
    root: Path | None = None
    packages: tuple[str, ...] = ()

    def env(self) -> dict[str, str]:
        if self.root is None:
            return {}
        libs = self.root / "usr/lib" / MULTIARCH
        return {"QEMU_MODULE_DIR": str(libs / "qemu"),
                "LD_LIBRARY_PATH": ":".join(filter(None, [str(libs), os.environ.get("LD_LIBRARY_PATH")]))}

    def args(self) -> list[str]:
        """Firmware search path: the extracted data first (``-L``), then the compiled-in one."""
        return ["-L", str(self.root / "usr/share/qemu")] if self.root is not None else []

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` in a private mount namespace where a tmpfs hides the host QEMU's modules (root only); the
        process keeps QEMU's PID (unshare and sh exec it), so killing it by PID still kills QEMU."""
        if self.root is None or not HOST_QEMU_MODULES.is_dir() or os.geteuid() != 0 or not _which("unshare"):
            return cmd
        hide = 'mount -t tmpfs -o size=64k,mode=0755 nodeagent-hide-qemu-modules "$0" && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, str(HOST_QEMU_MODULES), *cmd]


#: C sources the harness builds with the host's compiler: QEMU plugins and programs the guest runs
NATIVE_DIR = HERE / "native"


def build_native(name: str, cache: Path, *, shared: bool = False, src_dir: Path = NATIVE_DIR,
                 include: Sequence[Path] = ()) -> Path:
    """``src_dir/NAME.c`` compiled with the host's gcc into ``cache`` (a program, or with ``shared`` a shared
    object), named after a digest of the sources and the flags so that an edit rebuilds it (``include``: the
    directories of the files it includes, hashed too). The guest runs host binaries through its chroot, so a
    program built here runs there. HarnessUnavailable without a compiler, or when the build fails."""
    src = src_dir / f"{name}.c"
    flags = ["-O2", "-Wall", "-Wextra", "-Werror"] + (["-shared", "-fPIC"] if shared else ["-pthread"])
    flags += [f"-I{d}" for d in include]
    sources = src.read_bytes() + b"".join(f.read_bytes() for d in include for f in sorted(Path(d).glob("*.[ch]")))
    digest = hashlib.sha256(sources + " ".join(flags).encode()).hexdigest()[:12]
    out = cache / (f"{name}-{digest}.so" if shared else f"{name}-{digest}")
    if out.exists():
        return out
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise HarnessUnavailable(f"no C compiler to build {src.name} (apt-get install gcc libc6-dev)")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    proc = subprocess.run([cc, *flags, "-o", str(tmp), str(src)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise HarnessUnavailable(f"cannot build {src}: {proc.stderr.strip()[-2000:]}")
    tmp.rename(out)
    return out


def qemu_version(binary: str, env: Mapping[str, str] | None = None) -> tuple[int, ...] | None:
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=60, env={**os.environ, **env} if env else None)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"version (\d+)\.(\d+)(?:\.(\d+))?", proc.stdout)
    return tuple(int(x) for x in m.groups() if x is not None) if m and proc.returncode == 0 else None


def _dotted(v: Sequence[int]) -> str:
    return ".".join(map(str, v))


def ensure_qemu(minimum: tuple[int, int], cache_dir: Path | None = None) -> Qemu:
    """A QEMU of at least ``minimum``: the host's when new enough, else bookworm-backports' fetched through the
    harness's private apt (as the kernel is) and run from its extracted debs. HarnessUnavailable otherwise."""
    host = qemu_binary()
    hv = qemu_version(host) if host else None
    if host and hv and hv >= minimum:
        return Qemu(host, hv)
    if os.environ.get("NODEAGENT_QEMU"):
        raise HarnessUnavailable(f"$NODEAGENT_QEMU={host} is QEMU {_dotted(hv or ())}; this layout needs "
                                 f">= {_dotted(minimum)}")
    cache_dir = (Path(cache_dir) if cache_dir else default_cache_dir())
    base = cache_dir / "qemu"
    qemu = _qemu_stamp(base)
    if qemu is None:
        with _locked(cache_dir / ".qemu.lock"):
            qemu = _qemu_stamp(base)  # another process may have fetched it meanwhile
            if qemu is None:
                try:
                    qemu = _fetch_qemu(cache_dir, base)
                except (OSError, subprocess.SubprocessError) as exc:
                    raise HarnessUnavailable(f"QEMU fetch failed: {exc}") from exc
    if qemu.version < minimum:
        raise HarnessUnavailable(f"{BACKPORTS_SUITE} has QEMU {_dotted(qemu.version)}; this layout needs "
                                 f">= {_dotted(minimum)}")
    return qemu


def _qemu_stamp(base: Path) -> Qemu | None:
    try:
        data = json.loads((base / "qemu.json").read_text())
    except (OSError, ValueError):
        return None
    binary = base / "root/usr/bin/qemu-system-x86_64"
    if data.get("recipe") != QEMU_RECIPE or not os.access(binary, os.X_OK):
        return None
    return Qemu(str(binary), tuple(data["version"]), base / "root", tuple(data["packages"]))


def _fetch_qemu(cache_dir: Path, base: Path) -> Qemu:
    apt = PrivateApt(cache_dir / "apt", find_debian_mirror(host_apt_sources()))
    apt.update()
    # the emulator from backports (its own dependencies, not the bookworm version's); libraries the host lacks
    # at their default (bookworm) version, with what they need in turn
    direct = {d for p in QEMU_PACKAGES for d in apt.direct_depends(f"{p}/{BACKPORTS_SUITE}")}
    missing = sorted(d for d in direct - set(QEMU_PACKAGES) if not host_has_package(d))
    deps = tool_package_closure(apt, missing) if missing else []
    specs = [f"{p}/{BACKPORTS_SUITE}" for p in QEMU_PACKAGES] + deps
    stage = Path(tempfile.mkdtemp(prefix="qemu.", dir=cache_dir))
    try:
        debs = apt.download(specs, stage / "debs")
        if len(debs) != len(specs):
            raise HarnessUnavailable(f"unexpected QEMU downloads: {[d.name for d in debs]} for {specs}")
        for deb in debs:
            _extract(deb, stage / "root")
        qemu = Qemu(str(base / "root/usr/bin/qemu-system-x86_64"), (), base / "root",
                    tuple(_deb_id(d) for d in debs))
        shutil.rmtree(stage / "debs")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        (stage / "root").rename(base / "root")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    version = qemu_version(qemu.binary, qemu.env())
    if version is None:
        raise HarnessUnavailable(f"the extracted {qemu.binary} does not run ({BACKPORTS_SUITE} QEMU)")
    data = {"recipe": QEMU_RECIPE, "version": list(version), "packages": list(qemu.packages),
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (base / "qemu.json").write_text(json.dumps(data, indent=2) + "\n")
    return Qemu(qemu.binary, version, qemu.root, qemu.packages)


# --------------------------------------------------------------------------- initramfs


def parse_modules_dep(text: str) -> dict[str, tuple[str, list[str]]]:
    """modules.dep -> {module name: (relative path, [dependency paths])}."""
    out: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        path, sep, deps = line.partition(":")
        if sep:
            out[module_name(path)] = (path.strip(), deps.split())
    return out


def module_name(path: str) -> str:
    base = path.strip().rsplit("/", 1)[-1]
    return re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base).replace("-", "_")


def module_load_order(dep_map: Mapping[str, tuple[str, list[str]]], wanted: Sequence[str]) -> list[str]:
    """Relative paths of ``wanted`` and their dependencies, dependencies first."""
    order: list[str] = []

    def visit(name: str, stack: tuple[str, ...]) -> None:
        key = name.replace("-", "_")
        if key not in dep_map:
            raise HarnessUnavailable(f"kernel module {name!r} not found in modules.dep")
        path, deps = dep_map[key]
        if path in order or key in stack:
            return
        for dep in reversed(deps):  # modules.dep lists deps in reverse load order
            visit(module_name(dep), stack + (key,))
        order.append(path)

    for name in wanted:
        visit(name, ())
    return order


def _decompress_module(src: Path, dest: Path) -> Path:
    """Store a module uncompressed (insmod stays trivial and fast under TCG)."""
    data = src.read_bytes()
    if src.suffix == ".xz":
        data, dest = lzma.decompress(data), dest.with_suffix("")
    elif src.suffix == ".gz":
        data, dest = gzip.decompress(data), dest.with_suffix("")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return dest


INIT_TEMPLATE = r"""#!/bin/busybox sh
# nodeagent real-kernel guest init (generated by tests/realkernel/harness.py)
KVER='@KVER@'
MARK='@MARK@'
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /host /newroot /ov /usr/bin /sbin
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs shm /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
# as systemd's sys-kernel-debug.mount does: NUMA balancing's scan tunables live there since 5.13
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo /bin/modprobe > /proc/sys/kernel/modprobe
log() { echo "$MARK:LOG $*"; }
die() { echo "$MARK:FATAL $*"; dmesg | tail -n 60; poweroff -f; sleep 5; }
while read -r m; do
  insmod "/lib/modules/$KVER/$m" || log "insmod $m failed"
done < /etc/rk/modules
. /rk/run.conf
echo "@PRINTK@" > /proc/sys/kernel/printk
if [ "$RK_HOSTROOT" = 1 ]; then
  mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /host \
    || die "cannot mount the host root over 9p"
  mount -t tmpfs -o mode=0755 tmpfs /ov && mkdir -p /ov/upper /ov/work
  mount -t overlay -o lowerdir=/host,upperdir=/ov/upper,workdir=/ov/work overlay /newroot \
    || die "cannot mount the overlay"
  mount -o rbind /proc /newroot/proc && mount -o rbind /sys /newroot/sys \
    && mount -o rbind /dev /newroot/dev || die "cannot bind /proc /sys /dev"
  # the guest kernel's own modules (full tree, xz) for libkmod inside the chroot
  if [ -d "/host$RK_MODULES" ]; then
    mkdir -p /lib/modules/$KVER && mount -o bind "/host$RK_MODULES" "/lib/modules/$KVER"
    chroot /newroot /bin/mkdir -p "/lib/modules/$KVER"
    mdir=$(chroot /newroot /bin/readlink -f "/lib/modules/$KVER")
    mount -o bind "/host$RK_MODULES" "/newroot$mdir" || log "cannot bind the module tree"
  fi
  # "install" ndctl/daxctl/cxl and their libs into the overlay
  cp -af "/host$RK_TOOLS/." /newroot/ || die "cannot copy ndctl/daxctl into the overlay"
  cp /rk/cmd.sh /newroot/.nodeagent-rk-cmd.sh
  set -- chroot /newroot /usr/bin/env -i /bin/sh /.nodeagent-rk-cmd.sh
else
  set -- /bin/sh /rk/cmd.sh
fi
echo "$MARK:READY uptime=$(cut -d' ' -f1 /proc/uptime)"
echo "$MARK:STDOUT-BEGIN"
{ "$@" </dev/null 2>/tmp/rk.err; echo $? > /tmp/rk.rc; } | cat
echo
echo "$MARK:STDOUT-END"
echo "$MARK:STDERR-BEGIN"
cat /tmp/rk.err
echo
echo "$MARK:STDERR-END"
rc=$(cat /tmp/rk.rc)
if [ "$rc" != 0 ]; then
  echo "$MARK:DMESG-BEGIN"
  dmesg
  echo "$MARK:DMESG-END"
fi
echo "$MARK:RC=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
sleep 10
"""


def _cpio(busybox: Path, root: Path, out: Path) -> None:
    names = ["."] + sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    with open(out, "wb") as fh:
        proc = subprocess.run(
            [str(busybox), "cpio", "-o", "-H", "newc"],
            cwd=root,
            input="\n".join(names).encode() + b"\n",
            stdout=fh,
            stderr=subprocess.PIPE,
        )
    if proc.returncode != 0:
        raise HarnessUnavailable(f"busybox cpio failed: {proc.stderr.decode(errors='replace')}")


def build_initramfs(
    assets: Assets,
    *,
    modules: Sequence[str] = DEFAULT_MODULES,
    quiet_console: bool = True,
    out_dir: Path | None = None,
) -> Path:
    """Build (or reuse) the base initramfs: busybox, /init, the listed modules (+deps).

    The per-run command is appended later as a second cpio archive (see run_in_guest).
    """
    dep_map = parse_modules_dep((assets.modules_dir / "modules.dep").read_text())
    order = module_load_order(dep_map, modules)
    init = (
        INIT_TEMPLATE.replace("@KVER@", assets.kernel_version)
        .replace("@MARK@", MARK)
        .replace("@PRINTK@", "1 4 1 7" if quiet_console else "7 4 1 7")
    )
    key = hashlib.sha256(
        "\0".join([init, assets.kernel_package, str(assets.busybox.stat().st_size), *order]).encode()
    ).hexdigest()[:16]
    out_dir = out_dir or assets.cache_dir / "initramfs"
    out = out_dir / f"base-{key}.cpio"
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        root = Path(tmp) / "root"
        _stage_initramfs(root, assets, order, init)
        _cpio(assets.busybox, root, Path(tmp) / "out.cpio")
        (Path(tmp) / "out.cpio").rename(out)
    for old in out_dir.glob("base-*.cpio"):
        if old != out and time.time() - old.stat().st_mtime > 3600:  # leave concurrent runs alone
            old.unlink(missing_ok=True)
    return out


def _stage_initramfs(root: Path, assets: Assets, order: Sequence[str], init: str) -> None:
    (root / "bin").mkdir(parents=True)
    shutil.copy2(assets.busybox, root / "bin/busybox")
    (root / "init").write_text(init)
    (root / "init").chmod(0o755)
    loaded: list[str] = []
    for rel in order:
        mod_root = root / "lib/modules" / assets.kernel_version
        dest = _decompress_module(assets.modules_dir / rel, mod_root / rel)
        loaded.append(str(dest.relative_to(mod_root)))
    (root / "etc/rk").mkdir(parents=True)
    (root / "etc/rk/modules").write_text("".join(f"{p}\n" for p in loaded))


def _run_cpio(assets: Assets, run_dir: Path, script: str, hostroot: bool) -> Path:
    root = run_dir / "runroot"
    (root / "rk").mkdir(parents=True)
    (root / "rk/cmd.sh").write_text(script)
    conf = {
        "RK_HOSTROOT": "1" if hostroot else "0",
        "RK_TOOLS": str(assets.tools_root),
        "RK_MODULES": str(assets.modules_dir),
    }
    (root / "rk/run.conf").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in conf.items()))
    out = run_dir / "run.cpio"
    _cpio(assets.busybox, root, out)
    return out


# --------------------------------------------------------------------------- running


def guest_script(command: str, *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    base_env = {
        "PATH": GUEST_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NODEAGENT_IN_GUEST": "1",
    }
    lines = ["#!/bin/sh"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in {**base_env, **(env or {})}.items()]
    if cwd:
        lines.append(f"cd {shlex.quote(cwd)} || exit 125")
    lines.append(command)
    return "\n".join(lines) + "\n"


def _verbose() -> bool:
    """NODEAGENT_RK_VERBOSE=1: full kernel log on the console, also while the command runs."""
    return os.environ.get("NODEAGENT_RK_VERBOSE", "") not in ("", "0")


def rk_accel() -> str:
    return os.environ.get("NODEAGENT_RK_ACCEL", "tcg,thread=multi")


def qemu_command(
    qemu: str | Qemu, assets: Assets, layout: Layout, initrd: Path, console: Path, *, hostroot: bool,
    plugins: Sequence[Path] = (),
) -> list[str]:
    accel = rk_accel()
    append = [
        "console=ttyS0",
        "panic=-1",
        # on a panic, replay the whole kernel log on the console: the quiet console (loglevel 1 after /init)
        # would otherwise show "Kernel panic" without the Oops that caused it
        "panic_print=0x20",
        "rdinit=/init",
        "mitigations=off",
        "random.trust_cpu=on",
        *layout.kernel_args,
    ]
    if not _verbose():
        append += ["quiet", "loglevel=4"]
    emulator = qemu if isinstance(qemu, Qemu) else Qemu(qemu, ())
    cmd = [
        emulator.binary,
        *emulator.args(),
        "-name",
        "nodeagent-realkernel",
        "-machine",
        layout.machine,
        "-accel",
        accel,
        "-cpu",
        layout.cpu,
        "-smp",
        "2",
        "-m",
        layout.memory,
        *layout.qemu_args,
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-monitor",
        "none",
        "-serial",
        f"file:{console}",
        "-kernel",
        str(assets.vmlinuz),
        "-initrd",
        str(initrd),
        "-append",
        " ".join(append),
    ]
    for plugin in plugins:
        cmd += ["-plugin", str(plugin)]
    if hostroot:
        # the 9p device on pcie.0 by name: with a pxb-cxl host bridge QEMU would otherwise try that bus
        cmd += ["-fsdev", "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
                "-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot,bus=pcie.0"]
    return emulator.wrap(cmd)


def _between(text: str, begin: str, end: str) -> str | None:
    start = text.find(begin)
    if start < 0:
        return None
    start += len(begin)
    stop = text.find(end, start)
    return None if stop < 0 else text[start:stop]


#: Boots per run_in_guest: a retry only when the kernel died before /init (see died_before_init) or of
#: TCG's text-patching flake (see died_patching_text).
BOOT_ATTEMPTS = 2


def died_before_init(console: str, exit_code: int | None) -> bool:
    """The guest kernel panicked before the harness's /init started (no READY marker): seen once in about
    a hundred boots under multi-threaded TCG, an int3 Oops in early boot while the kernel patches its own text.
    Nothing of the command ran, so booting again is safe."""
    return exit_code is not None and f"{MARK}:READY" not in console and "Kernel panic" in console


def died_patching_text(console: str, exit_code: int | None) -> bool:
    """The guest kernel panicked of an int3 Oops, whenever it came: the kernel patches its own text through
    int3 breakpoints not only at boot but whenever a static key flips (the numa_balancing sysctl, enabling a
    cgroup controller), and multi-threaded TCG can let the other vCPU run the half-patched bytes. That is QEMU's
    flake, not the command's failure; every run has a fresh guest over a read-only host root, so running it
    again is safe. Any other panic after /init is the command's and is reported (its console then holds the
    whole kernel log: panic_print). A guest that reported its exit code did not die, whatever its output says."""
    return (exit_code is not None and "Kernel panic" in console and re.search(r"Oops: int3\b", console) is not None
            and parse_console(console)[0] is None)


def parse_console(console: str) -> tuple[int | None, str, str, float | None]:
    """(rc, stdout, stderr, guest uptime) from a normalised console log; rc None if absent."""
    stdout = _between(console, f"{MARK}:STDOUT-BEGIN\n", f"\n{MARK}:STDOUT-END\n") or ""
    stderr = _between(console, f"{MARK}:STDERR-BEGIN\n", f"\n{MARK}:STDERR-END\n") or ""
    m = re.search(rf"^{re.escape(MARK)}:RC=(\d+) uptime=([\d.]+)", console, re.M)
    if not m:
        return None, stdout, stderr, None
    return int(m.group(1)), stdout, stderr, float(m.group(2))


def save_console(console: str, label: str, header: str = "") -> Path:
    """Write a guest console log under ARTIFACTS_DIR (gitignored) and return its path."""
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    console = header + console
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", label)[:60].strip("-") or "run"
    path = ARTIFACTS_DIR / f"console-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{safe}.log"
    path.write_text(console)
    return path


def _boot(cmd: list[str], timeout: float, env: Mapping[str, str] | None = None) -> tuple[int | None, str]:
    """Run QEMU with a hard bound; on expiry kill it by its own PID. (exit code or None, qemu stderr)

    QEMU never outlives the call: a SIGTERM to this process (a CI job cancelled, a `kill` of pytest) becomes
    SystemExit while QEMU runs, so that the ``finally`` kills QEMU by its PID; Ctrl-C does the same."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **env} if env else None)
    restore = _sigterm_as_exit()
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, (out + err).decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, (out + err).decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()  # reaps it and closes its pipes
        restore()


def _sigterm_as_exit() -> Callable[[], None]:
    """Until the returned function is called, SIGTERM raises SystemExit (only the main thread can set it)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, previous)


def run_in_guest(
    command: str,
    *,
    timeout: float = 120,
    layout: str = "3node",
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    hostroot: bool = True,
    assets: Assets | None = None,
    label: str | None = None,
) -> GuestResult:
    """Boot a fresh guest, run ``command`` with /bin/sh (chrooted into the host root), power off.

    Returns the command's exit code and output.  Raises GuestTimeout when the hard bound
    expires (QEMU is killed), GuestError when the guest reports no exit code, and
    HarnessUnavailable when QEMU/assets are missing.  The full console is saved under
    ARTIFACTS_DIR whenever rc != 0 or on error; its path is in ``console_path``.
    """
    spec = LAYOUTS[layout]
    if spec.qemu_min > (0, 0):
        qemu = ensure_qemu(spec.qemu_min, assets.cache_dir if assets else None)
    else:
        host = qemu_binary()
        if not host:
            raise HarnessUnavailable("qemu-system-x86_64 not found (install the Debian package qemu-system-x86)")
        qemu = Qemu(host, ())
    assets = assets or ensure_assets()
    plugins = ([build_native(name, assets.cache_dir / "native", shared=True) for name in spec.qemu_plugins]
               if rk_accel().startswith("tcg") else [])
    base = build_initramfs(assets, quiet_console=not _verbose())
    runs = assets.cache_dir / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    label = label or (command.strip().splitlines() or ["run"])[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="run.", dir=runs) as tmp:
        run_dir = Path(tmp)
        initrd = _run_initrd(assets, base, run_dir, guest_script(command, cwd=cwd, env=env), hostroot)
        console_file = run_dir / "console.log"
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            console_file.write_bytes(b"")
            cmd = qemu_command(qemu, assets, spec, initrd, console_file, hostroot=hostroot, plugins=plugins)
            exit_code, qemu_out = _boot(cmd, timeout, qemu.env())
            console = console_file.read_bytes().decode(errors="replace").replace("\r\n", "\n")
            if attempt == BOOT_ATTEMPTS:
                break
            if died_before_init(console, exit_code):
                path = save_console(console, f"boot-panic-{label}")
                print(f"realkernel: the guest kernel panicked before /init ran (a QEMU/TCG boot flake; nothing of "
                      f"the command ran): booting again. console: {path}", file=sys.stderr)
            elif died_patching_text(console, exit_code):
                path = save_console(console, f"int3-panic-{label}")
                print(f"realkernel: the guest kernel died of an int3 Oops while the command ran (QEMU/TCG's "
                      f"text-patching flake): running it again in a fresh guest. console: {path}", file=sys.stderr)
            else:
                break
    wall = time.monotonic() - started
    header = (
        f"# nodeagent realkernel run: wall {wall:.1f}s, qemu exit {exit_code}\n"
        f"# qemu: {shlex.join(cmd)}\n# command:\n" + "".join(f"#   {ln}\n" for ln in command.splitlines())
    )
    full_log = console + (f"\n[qemu exit={exit_code}] {qemu_out}" if qemu_out.strip() else "")
    return _interpret(full_log, console, exit_code, qemu_out, wall, timeout, label, header)


def _run_initrd(assets: Assets, base: Path, run_dir: Path, script: str, hostroot: bool) -> Path:
    """The cached base initramfs with a per-run cpio (command + settings) appended."""
    extra = _run_cpio(assets, run_dir, script, hostroot)
    initrd = run_dir / "initrd.cpio"
    with open(initrd, "wb") as fh:
        for part in (base, extra):
            fh.write(part.read_bytes())
    return initrd


def qemu_exit(code: int) -> str:
    """How QEMU ended, for a message: its exit code, or the signal that killed it (a crash of QEMU itself)."""
    if code >= 0:
        return f"qemu exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"qemu exit {code}: QEMU itself died of {name}"


def _interpret(
    full_log: str,
    console: str,
    exit_code: int | None,
    qemu_out: str,
    wall: float,
    timeout: float,
    label: str,
    header: str,
) -> GuestResult:
    if exit_code is None:
        path = save_console(full_log, f"timeout-{label}", header)
        raise GuestTimeout(f"guest exceeded {timeout:.0f}s and QEMU was killed", path)
    fatal = re.search(rf"^{re.escape(MARK)}:FATAL (.*)$", console, re.M)
    if fatal:
        path = save_console(full_log, f"fatal-{label}", header)
        raise GuestError(f"guest init failed: {fatal.group(1)}", path)
    rc, stdout, stderr, uptime = parse_console(console)
    if rc is None:
        path = save_console(full_log, f"noexit-{label}", header)
        raise GuestError(f"guest reported no exit code ({qemu_exit(exit_code)}): {qemu_out.strip()[-500:]}", path)
    result = GuestResult(rc, stdout, full_log, wall, stderr, None, uptime)
    if rc != 0:
        result.console_path = save_console(full_log, f"rc{rc}-{label}", header)
    return result


@dataclass
class Guest:
    """What the pytest ``guest`` fixture hands out: run_in_guest/run_steps bound to fetched assets."""

    assets: Assets

    def run(
        self,
        command: str,
        *,
        timeout: float = 120,
        layout: str = "3node",
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        hostroot: bool = True,
        label: str | None = None,
    ) -> GuestResult:
        return run_in_guest(
            command,
            timeout=timeout,
            layout=layout,
            cwd=cwd,
            env=env,
            hostroot=hostroot,
            assets=self.assets,
            label=label,
        )

    __call__ = run

    def run_steps(
        self,
        steps: Sequence[Step],
        *,
        timeout: float = 120,
        layout: str = "3node",
        env: Mapping[str, str] | None = None,
        label: str = "steps",
    ) -> StepsResult:
        return run_steps(steps, timeout=timeout, layout=layout, env=env, assets=self.assets, label=label)


# --------------------------------------------------------------------------- batches of steps

STEP_MARK = "@@RK-STEP"


def steps_script(steps: Sequence[Step]) -> str:
    """One shell script running every step (never stopping early), output fenced per step."""
    lines = ["_rk_d=$(mktemp -d)"]
    for step in steps:
        name = shlex.quote(step.name)
        lines += [
            f"echo {STEP_MARK}-BEGIN {name}",
            "read -r _rk_t0 _rk_x </proc/uptime",
            f'( {step.command}\n) 2>"$_rk_d/e" </dev/null; _rk_rc=$?',
            "read -r _rk_t1 _rk_x </proc/uptime",
            "echo",
            f"echo {STEP_MARK}-STDERR {name}",
            '[ -s "$_rk_d/e" ] && cat "$_rk_d/e"; echo',
            '[ -s "$_rk_d/e" ] && rm "$_rk_d/e"',
            f'echo "{STEP_MARK}-END {step.name} rc=$_rk_rc t=$_rk_t0-$_rk_t1"',
        ]
    lines.append("exit 0")
    return "\n".join(lines) + "\n"


def parse_steps(stdout: str, steps: Sequence[Step]) -> dict[str, StepResult]:
    results: dict[str, StepResult] = {}
    for step in steps:
        pattern = (
            rf"^{STEP_MARK}-BEGIN {re.escape(step.name)}\n(.*?)\n{STEP_MARK}-STDERR "
            rf"{re.escape(step.name)}\n(.*?)\n{STEP_MARK}-END {re.escape(step.name)} rc=(\d+)"
            r"(?: t=([\d.]+)-([\d.]+))?$"
        )
        m = re.search(pattern, stdout, re.S | re.M)
        if m:
            secs = float(m.group(5)) - float(m.group(4)) if m.group(4) else None
            results[step.name] = StepResult(
                step.name, step.command, int(m.group(3)), m.group(1), m.group(2), secs
            )
    return results


def run_steps(
    steps: Sequence[Step],
    *,
    timeout: float = 120,
    layout: str = "3node",
    env: Mapping[str, str] | None = None,
    assets: Assets | None = None,
    label: str = "steps",
) -> StepsResult:
    """Run several commands in ONE boot (each boot costs ~6-8 s under TCG), in order, never stopping.

    Each step runs in its own subshell with stdin from /dev/null; a ``cd`` in one step does not
    leak into the next, but sysfs changes naturally do.
    """
    names = [s.name for s in steps]
    if len(set(names)) != len(names) or any(not re.fullmatch(r"[\w.-]+", n) for n in names):
        raise ValueError("step names must be unique and match [\\w.-]+")
    guest = run_in_guest(
        steps_script(steps), timeout=timeout, layout=layout, env=env, assets=assets, label=label
    )
    result = StepsResult(guest, parse_steps(guest.stdout, steps))
    missing = [n for n in names if n not in result.steps]
    if missing:
        path = guest.console_path or save_console(guest.console_log, "steps-incomplete")
        raise GuestError(f"steps without results: {missing}", path)
    return result


# --------------------------------------------------------------------------- topology scenario

NODE = "/sys/devices/system/node"
MEM = "/sys/devices/system/memory"
TIERS = "/sys/devices/virtual/memory_tiering"
AUTO_ONLINE = f"{MEM}/auto_online_blocks"
NODE_STATE = f"cd {NODE} && grep -H '' online possible has_cpu has_memory has_normal_memory | sed 's/:/=/'"
TIER_TREE = f'for d in {TIERS}/memory_tier*; do echo "$(basename $d) nodelist=$(cat $d/nodelist)"; done'


# node<N>/ also holds a memory_failure/ directory (6.12): match memory[0-9]* only
NODE2_BLOCKS = f"cd {NODE}/node2 && grep -H '' memory[0-9]*/state memory[0-9]*/valid_zones | sort -V"
# One kdamond/context/target/region/scheme/filter/goal staged (never turned on), every file dumped.
DAMON_STAGED_TREE = r"""cd /sys/kernel/mm/damon/admin/kdamonds
echo 1 > nr_kdamonds && echo 1 > 0/contexts/nr_contexts
c=0/contexts/0
echo 1 > $c/targets/nr_targets && echo 1 > $c/targets/0/regions/nr_regions
echo 1 > $c/schemes/nr_schemes && echo 1 > $c/schemes/0/filters/nr_filters
echo 1 > $c/schemes/0/quotas/goals/nr_goals
# path=content, one line per file (a multi-line content joined with a literal \n)
grep -r '' . | sort -s -t: -k1,1 | awk '{ i = index($0, ":"); k = substr($0, 1, i - 1); v = substr($0, i + 1)
  if (k == p) { out = out "\\n" v } else { if (NR > 1) print p "=" out; p = k; out = v } }
  END { print p "=" out }'
echo 0 > nr_kdamonds"""


def venv_python() -> Path:
    return REPO_ROOT / ".venv/bin/python"


def topology_steps(include_venv: bool | None = None) -> list[Step]:
    """The one-boot scenario behind test_guest_topology.py and ``harness.py capture``."""
    if include_venv is None:
        include_venv = venv_python().exists()
    steps = [
        Step("uname", "uname -r", "uname-r.txt"),
        Step("nodes-boot", NODE_STATE, "nodes-boot.txt"),
        Step("block-size", f"cat {MEM}/block_size_bytes", "block_size_bytes.txt"),
        Step("auto-online-boot", f"cat {MEM}/auto_online_blocks", "auto_online_blocks-boot.txt"),
        Step("tiers-boot", TIER_TREE, "memory-tiers-boot.txt"),
        Step("iomem-pmem", "grep -i persistent /proc/iomem", "iomem-pmem.txt"),
        Step("ndctl-list-boot", "ndctl list -R -N", "ndctl-list-RN-boot.json"),
        Step(
            "create-namespace",
            "ndctl create-namespace -f -e namespace0.0 -m devdax",
            "ndctl-create-namespace-devdax.json",
        ),
        Step("daxctl-list-devdax", "daxctl list -D", "daxctl-list-D-devdax.json"),
        Step(
            "dax-sysfs",
            "cd /sys/bus/dax/devices/dax0.0 && for f in target_node numa_node size align; "
            'do echo "$f=$(cat $f)"; done',
            "dax0.0-sysfs.txt",
        ),
        Step(
            "reconfigure-refused",
            "daxctl reconfigure-device --mode=system-ram dax0.0",
            "daxctl-reconfigure-refused.txt",
        ),
        Step("auto-online-offline", f"echo offline > {AUTO_ONLINE} && cat {AUTO_ONLINE}"),
        Step(
            "reconfigure",
            "daxctl reconfigure-device --mode=system-ram dax0.0",
            "daxctl-reconfigure-system-ram.json",
        ),
        Step("daxctl-list-system-ram", "daxctl list -DM", "daxctl-list-DM-system-ram.json"),
        Step(
            "nodes-after",
            NODE_STATE + f'; echo "node2_cpulist=$(cat {NODE}/node2/cpulist)"',
            "nodes-after.txt",
        ),
        Step("node2-meminfo", f"cat {NODE}/node2/meminfo", "node2-meminfo.txt"),
        Step("tiers-after", TIER_TREE, "memory-tiers-after.txt"),
        Step("demotion-dmesg", "dmesg | grep -i 'demotion targets'", "dmesg-demotion.txt"),
        Step(
            "numa-knobs",
            "echo numa_balancing=$(cat /proc/sys/kernel/numa_balancing); "
            "echo demotion_enabled=$(cat /sys/kernel/mm/numa/demotion_enabled)",
            "numa-knobs.txt",
        ),
        Step(
            "dax-driver-after",
            "basename $(readlink /sys/bus/dax/devices/dax0.0/driver)",
            "dax0.0-driver-after.txt",
        ),
        Step("node2-memory-blocks", NODE2_BLOCKS, "node2-memory-blocks.txt"),
        Step(
            "damon-admin",
            "cd /sys/kernel/mm/damon/admin && ls -R && echo nr_kdamonds=$(cat kdamonds/nr_kdamonds)",
            "damon-admin.txt",
        ),
        Step("damon-tree-staged", DAMON_STAGED_TREE, "damon-tree-staged.txt"),
    ]
    if include_venv:
        steps.append(Step("venv-python", f"{venv_python()} -c 'import sys; print(sys.version)'"))
    return steps


def capture(
    result: StepsResult, out_dir: Path = CAPTURED_DIR, steps: Sequence[Step] | None = None
) -> list[Path]:
    """Write each captured step's raw output (stdout; stderr too if any) + an index.json."""
    steps = steps if steps is not None else topology_steps()
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    index: dict[str, object] = {"steps": {}}
    for step in steps:
        res = result.steps.get(step.name)
        if res is None or not step.capture_as:
            continue
        path = out_dir / step.capture_as
        text = res.stdout if path.suffix == ".json" or not res.stderr else res.stdout + res.stderr
        path.write_text(text if text.endswith("\n") or not text else text + "\n")
        written.append(path)
        index["steps"][step.capture_as] = {  # type: ignore[index]
            "command": step.command,
            "rc": res.rc,
            "stderr": res.stderr,
        }
    index["kernel"] = result.steps["uname"].stdout.strip() if "uname" in result.steps else None
    index["harness"] = {
        "layout": "3node",
        "qemu": "-accel tcg -cpu max -machine q35 -smp 2 -m 5G",
        "append": "memmap=1G!6G",
    }
    idx = out_dir / "index.json"
    idx.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    return [*written, idx]


# --------------------------------------------------------------------------- CLI


def _cmd_fetch(args: argparse.Namespace) -> int:
    started = time.monotonic()
    assets = ensure_assets(args.cache)
    base = build_initramfs(assets)
    print(
        json.dumps(
            {
                "kernel_version": assets.kernel_version,
                "kernel_package": assets.kernel_package,
                "packages": assets.packages,
                "initramfs": str(base),
                "qemu": qemu_binary(),
                "seconds": round(time.monotonic() - started, 1),
            },
            indent=2,
        )
    )
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    assets = ensure_assets(args.cache)
    res = run_in_guest(
        args.command,
        timeout=args.timeout,
        layout=args.layout,
        cwd=args.cwd,
        hostroot=not args.no_hostroot,
        assets=assets,
    )
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    extra = f", console saved to {res.console_path}" if res.console_path else ""
    print(
        f"[guest rc={res.rc} wall={res.wall_seconds:.1f}s uptime={res.guest_uptime}s{extra}]", file=sys.stderr
    )
    return res.rc


def _cmd_capture(args: argparse.Namespace) -> int:
    assets = ensure_assets(args.cache)
    steps = topology_steps(include_venv=False)
    result = run_steps(steps, timeout=args.timeout, assets=assets, label="capture")
    for path in capture(result, args.out, steps):
        print(path)
    failed = {n: r.rc for n, r in result.steps.items() if r.rc != 0}
    print(
        f"[captured {len(result.steps)} steps in {result.guest.wall_seconds:.1f}s; nonzero rc: {failed}]",
        file=sys.stderr,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", type=Path, default=None, help="asset cache (default: %(default)s)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download/unpack the guest assets").set_defaults(func=_cmd_fetch)
    run = sub.add_parser("run", help="boot the guest and run a shell command in the host-root chroot")
    run.add_argument("command")
    run.add_argument("--timeout", type=float, default=120)
    run.add_argument("--layout", choices=sorted(LAYOUTS), default="3node")
    run.add_argument("--cwd", default=os.getcwd(), help="guest working dir (default: this one)")
    run.add_argument("--no-hostroot", action="store_true", help="run in the busybox initramfs instead")
    run.set_defaults(func=_cmd_run)
    cap = sub.add_parser("capture", help="run the topology scenario and write tests/realkernel/captured/")
    cap.add_argument("--out", type=Path, default=CAPTURED_DIR)
    cap.add_argument("--timeout", type=float, default=180)
    cap.set_defaults(func=_cmd_capture)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except HarnessUnavailable as exc:
        print(f"harness unavailable: {exc}", file=sys.stderr)
        return 2
    except GuestError as exc:
        print(f"guest error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
