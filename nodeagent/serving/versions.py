"""Which release of each serving engine has which option: what ``render serving --version X`` renders from.

Every row names the release an option first appeared in and where that was read (the engine's own sources, docs,
or the pull request that added it). Where the first release could not be told from the sources read, the row
says so and gives the release it was confirmed in instead. ``PINNED`` are the releases the golden files cover
(tests/data/serving/); the newest is rendered when ``--version`` is not given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..util.errors import UsageError

Version = tuple[int, ...]


def parse(text: str) -> Version:
    """``0.18``, ``0.18.1``, ``v0.5.12``, ``0.5.12.post2`` → ``(0, 18)``… (a suffix after the numbers is dropped)."""
    m = re.fullmatch(r"v?(\d+(?:\.\d+){0,3})(?:[.+-]?[A-Za-z][\w.+-]*)?", text.strip())
    if not m:
        raise ValueError(f"not a release number: {text!r} (expected e.g. 0.18 or 0.18.1)")
    nums = tuple(int(x) for x in m.group(1).split("."))
    while len(nums) > 1 and nums[-1] == 0:
        nums = nums[:-1]
    return nums


def show(v: Version) -> str:
    return ".".join(map(str, v + (0,) * (2 - len(v)) if len(v) < 2 else v))


@dataclass(frozen=True)
class Option:
    engine: str
    name: str
    since: Version | None  # None: in no release yet (an open pull request)
    source: str


def _o(engine: str, name: str, since: str | None, source: str) -> Option:
    return Option(engine, name, parse(since) if since else None, source)


OPTIONS: tuple[Option, ...] = (
    # vLLM -------------------------------------------------------------------------------------------------
    _o("vllm", "--kv-offloading-size", "0.11.1",
       "vllm-project/vllm#27621 (merged 2025-11): --kv-offloading-size GiB for the whole engine and "
       "--kv-offloading-backend native|lmcache; the backend had to be named"),
    _o("vllm", "kv_offloading_backend=native default", "0.14",
       "vllm-project/vllm#32421 (merged 2026-01-15, asked for v0.14): native is the default backend"),
    _o("vllm", "OffloadingConnector cpu_bytes_to_use", "0.14",
       "vllm-project/vllm#24498 (reviewed 2026-01): kv_connector_extra_config.cpu_bytes_to_use replaces "
       "num_cpu_blocks; vllm/v1/kv_offload/cpu/spec.py divides it by page size x tensors x world size, so it is "
       "bytes for the whole engine"),
    _o("vllm", "OffloadingConnector eviction_policy", "0.11.1",
       "vllm-project/vllm#27039 (merged 2025-10): eviction_policy lru (default) | arc in "
       "kv_connector_extra_config (cpu/spec.py)"),
    _o("vllm", "--numa-bind", "0.20",
       "vllm-project/vllm#38635 (opened 2026-03-31, merged after the 0.19 cut; confirmed in 0.27's ParallelConfig): "
       "--numa-bind, --numa-bind-nodes N N ... (one node per visible GPU, space-separated), --numa-bind-cpus; each "
       "worker runs under numactl --cpunodebind=N --membind=N"),
    _o("vllm", "OffloadingConnector secondary_tiers", "0.25",
       "vllm-project/vllm#42285 (TieringOffloadingSpec, in nightlies from 2026-06-30, after 0.24.0 of 2026-07-01): "
       "kv_connector_extra_config.secondary_tiers"),
    # SGLang -----------------------------------------------------------------------------------------------
    _o("sglang", "--hicache-size", "0.4.10",
       "sgl-project/sglang server_args.py (hicache_size, GB per rank; present in #7280, 2025-06)"),
    _o("sglang", "--hicache-write-policy", "0.4.10",
       "sgl-project/sglang#7280 (2025-06) ServerArgs.hicache_write_policy: write_back | write_through | "
       "write_through_selective (default)"),
    _o("sglang", "--hicache-io-backend", "0.4.10",
       "sgl-project/sglang#8161 (2025-07-19, server args clean-up lists it): direct | kernel"),
    _o("sglang", "--hicache-mem-layout", "0.5",
       "sgl-project/sglang#8651 (2025-08, page_first for zero copy): layer_first | page_first "
       "(| page_first_direct, page_head later); docs/advanced_features/hicache_best_practices.md (#11001) "
       "recommends page_first"),
    _o("sglang", "--disable-hicache-numa-detect", "0.5.12",
       "HiCache's NUMA detection came in sgl-project/sglang#11028 (2025-09-28, opt-in) and was made automatic "
       "in #19452 (2026-02-26); the release that first took --disable-hicache-numa-detect is not confirmed "
       "here: 0.5.12's usage lists it"),
    _o("sglang", "SGLANG_AUTO_NUMA_BIND", "0.5.12",
       "sgl-project/sglang#19452 (2026-02-26) runs every scheduler process under numactl --cpunodebind=N "
       "--membind=N of its GPU's node unless --numa-node is given; #30394 (2026-07) restored "
       "SGLANG_AUTO_NUMA_BIND=0 to turn that off, its gate having been lost in the refactor. Neither release is "
       "confirmed here; 0.5.12 is taken to have both"),
    # LMCache ----------------------------------------------------------------------------------------------
    _o("lmcache", "numa_mode", "0.3.6",
       "LMCache/LMCache#1409 (2025-08-21): numa_mode manual|auto, extra_config.gpu_to_numa_mapping"),
    _o("lmcache", "maru_path", "0.4.5",
       "LMCache lmcache/v1/config.py (maru_path, maru_pool_size float, default 4.0) and "
       "storage_backend/maru_backend.py (pool size x 1024^3 per worker); xcena-dev/maru README: needs LMCache at or "
       "after commit 5502419 (2026-04-03); 0.4.5 is the first release seen with it (LMCache#3912, 2026-06), "
       "the first one is not confirmed"),
    _o("lmcache", "--l1-numa-mode", None,
       "LMCache/LMCache#4464 (multiprocess server --l1-numa-mode auto|manual, --l1-numa-mapping): open, in no "
       "release; not in 0.5.6, the newest on PyPI when checked (its lmcache/v1/distributed/config.py gives the "
       "multiprocess L1 --l1-manager, --l1-size-gb, --l1-use-lazy, --l1-init-size-gb, --l1-align-bytes, "
       "--l1-use-hugepages and --l1-devdax-path, no NUMA option)"),
    # Maru's own integrations (beside LMCache's backend) --------------------------------------------------
    _o("vllm", "MaruKVConnector", "0.14",
       "xcena-dev/maru docs/source/integration/vllm.md: MaruKVConnector (package maru_vllm, loaded through "
       "kv_connector_module_path, no vLLM change) implements KVConnectorBase_V1 and asks for vLLM 0.14 or later; "
       "kv_connector_extra_config maru_server_url (tcp://localhost:5555), maru_pool_size ('4G', default 1G)"),
    _o("sglang", "Maru HiCache backend", "0.5.12",
       "xcena-dev/maru docs/source/integration/sglang.md: an L3 HiCache backend, --hicache-storage-backend dynamic "
       "with --hicache-storage-backend-extra-config {backend_name maru, module_path maru_sglang.maru_storage, "
       "class_name MaruStorage, interface_v1 1, maru_server_url, maru_pool_size}, --hicache-mem-layout "
       "page_first_direct, --hicache-write-policy write_through; it asks for SGLang main with sgl-project/sglang"
       "#20560 (079a1fd, write-through events while idle) until a release has it. The first such release is not "
       "confirmed here; 0.5.12 (after #30394 of 2026-07) is taken to have it"),
)

#: The row that says from which release an engine can use Maru directly (``memory.dax`` ``use: maru``).
MARU_OPTION = {"vllm": "MaruKVConnector", "sglang": "Maru HiCache backend", "lmcache": "maru_path"}

#: The releases the golden files pin, oldest first; the last one is the default.
PINNED: dict[str, tuple[str, ...]] = {
    "vllm": ("0.12", "0.18", "0.27"),
    "sglang": ("0.4.10", "0.5.12"),
    "lmcache": ("0.3.6", "0.4.5"),
}

_BY_NAME = {(o.engine, o.name): o for o in OPTIONS}


def option(engine: str, name: str) -> Option:
    return _BY_NAME[(engine, name)]


def has(engine: str, version: Version, name: str) -> bool:
    """Does release ``version`` of ``engine`` take the option ``name`` (a row of :data:`OPTIONS`)?"""
    o = _BY_NAME[(engine, name)]
    return o.since is not None and version >= o.since


def default(engine: str) -> str:
    return PINNED[engine][-1]


def resolve(engine: str, given: str | None) -> Version:
    """The release to render for (``--version``): the newest pinned one when not given. A release older than the
    oldest pinned one is a usage error: its options were not read."""
    text = given or default(engine)
    try:
        v = parse(text)
    except ValueError as exc:
        raise UsageError(f"--version: {exc}") from None
    oldest = parse(PINNED[engine][0])
    if v < oldest:
        raise UsageError(f"--version {text}: render serving knows {engine} from {PINNED[engine][0]} on (the "
                         f"options of older releases were not read); give {PINNED[engine][0]} or later")
    return v


def table(engine: str | None = None) -> list[dict[str, str | None]]:
    """The rows as data (``render serving --format json`` and docs)."""
    return [{"engine": o.engine, "option": o.name, "since": show(o.since) if o.since else None,
             "source": o.source} for o in OPTIONS if engine is None or o.engine == engine]


__all__ = ["MARU_OPTION", "OPTIONS", "PINNED", "Option", "Version", "default", "has", "option", "parse", "resolve",
           "show", "table"]
