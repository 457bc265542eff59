"""How the kernel prints things: node/CPU lists, bracketed choices, meminfo. Pure functions, no I/O; what the kernel
could not have printed is a :class:`~nodeagent.util.errors.KernelFormatError` naming the file."""

from __future__ import annotations

import re

from .errors import KernelFormatError


def format_list(ids: list[int] | range) -> str:
    """Format ids the way the kernel prints node and CPU lists (``0-3,8``)."""
    ids = sorted(set(ids))
    if not ids:
        return ""
    out, start, prev = [], ids[0], ids[0]
    for i in ids[1:]:
        if i == prev + 1:
            prev = i
            continue
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = i
    out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


#: The most NUMA nodes a kernel can have: ``MAX_NUMNODES`` is ``1 << NODES_SHIFT`` (include/linux/numa.h), and
#: ``NODES_SHIFT`` is at most 10 (x86-64 with MAXSMP; arm64, powerpc and others allow less). A node id is below it.
MAX_NUMNODES = 1 << 10
#: The most CPUs a kernel can have: ``NR_CPUS`` is at most 8192 (x86-64 ``NR_CPUS_RANGE_END`` with MAXSMP, the
#: largest any architecture allows). ``nr_cpu_ids``, the bound of every CPU list the kernel prints, is at most this.
MAX_CPUS = 8192

_ITEM = re.compile(r"([0-9]{1,20})(?:-([0-9]{1,20}))?")


def _bad(where: str, what: str, text: str, why: str, hint: str) -> KernelFormatError:
    shown = text.strip()
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return KernelFormatError(f"{where or what} reads {shown!r}: not {what} as the kernel prints it ({why})",
                             path=where or None, hint=hint)


def parse_list(text: str, where: str = "", *, limit: int = MAX_NUMNODES) -> list[int]:
    """Parse a kernel list (``0-3,8``, as ``%*pbl`` prints a bitmap) into its sorted ids; empty text is the empty
    list. Every id is below ``limit`` — :data:`MAX_NUMNODES` for node lists, :data:`MAX_CPUS` for CPU lists —
    as the kernel's own ``bitmap_parselist`` refuses one beyond its bitmap (ERANGE), so the work and the result
    are bounded however long the text. Anything else (``garbage``, ``-5``, ``5-a``, ``7-3``, an id at or past
    the bound) raises :class:`KernelFormatError` naming ``where``, the file it came from."""
    what = "a CPU list" if limit == MAX_CPUS else "a node list"
    hint = (f"the kernel prints {what} as ids and ranges below {limit} (0-3,8); check the file, or that --root is "
            "a node's tree")
    spans: list[tuple[int, int]] = []
    parts = text.strip().split(",")
    if len(parts) > limit:
        raise _bad(where, what, text, f"{len(parts)} items, more than {limit} ids", hint)
    for part in parts:
        part = part.strip()
        if not part:
            continue
        m = _ITEM.fullmatch(part)
        if m is None:
            raise _bad(where, what, text, f"{part!r} is not an id or a range a-b", hint)
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) is not None else a
        if a > b:
            raise _bad(where, what, text, f"the range {part!r} runs backwards", hint)
        if b >= limit:
            raise _bad(where, what, text, f"{b} is beyond the kernel's bound: ids run 0-{limit - 1}", hint)
        spans.append((a, b))
    # merged, the spans cover each id once: the result (at most ``limit`` ids) is the only work that grows
    ids: list[int] = []
    for a, b in sorted(spans):
        if ids and a <= ids[-1]:
            a = ids[-1] + 1
        ids.extend(range(a, b + 1))
    return ids


def parse_hex(text: str, where: str = "") -> int:
    """A number the kernel prints in hex (``block_size_bytes``: ``8000000``, ``%lx``), at most 64 bits;
    :class:`KernelFormatError` naming ``where`` otherwise."""
    t = text.strip()
    if not re.fullmatch(r"(0[xX])?[0-9a-fA-F]{1,16}", t):
        raise _bad(where, "a hexadecimal number", text, "expected up to 16 hex digits",
                   "check the file, or that --root is a node's tree")
    return int(t, 16)


def parse_distances(text: str, where: str = "") -> list[int]:
    """A node's ``distance`` file (``10 21 21``: one decimal per node, ``%d`` of a u8 in the kernel's table);
    :class:`KernelFormatError` naming ``where`` for anything else, or more entries than nodes can exist."""
    words = text.split()
    if len(words) > MAX_NUMNODES or not all(re.fullmatch(r"[0-9]{1,3}", w) and int(w) <= 255 for w in words):
        raise _bad(where, "a NUMA distance row", text, f"expected at most {MAX_NUMNODES} numbers 0-255",
                   "the kernel prints one distance per node (10 21 21); check the file, or that --root is a "
                   "node's tree")
    return [int(w) for w in words]


def bracket_choice(text: str) -> str | None:
    """The selected word of ``always [madvise] never`` (``madvise``); ``None`` when none is bracketed."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def format_bracket(choices: list[str], selected: str) -> str:
    return " ".join(f"[{c}]" if c == selected else c for c in choices)


def parse_meminfo(text: str) -> dict[str, int]:
    """``Node 0 MemTotal: 5335244 kB`` or ``MemTotal: ... kB`` lines → {"MemTotal": 5335244} (kB)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, rest = line.partition(":")
        key = key.split()[-1]
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[key] = int(fields[0])
    return out


def kernel_version(release: str) -> tuple[int, int]:
    """``6.12.95+deb12-amd64`` → (6, 12)."""
    parts = release.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def cmdline_params(cmdline: str) -> dict[str, str]:
    """``key=value`` parameters of a kernel command line (a bare word maps to ``""``); the last one wins."""
    out: dict[str, str] = {}
    for word in cmdline.split():
        key, _, value = word.partition("=")
        out[key] = value
    return out
