"""How the kernel prints things: node/CPU lists, bracketed choices, meminfo. Pure functions, no I/O."""

from __future__ import annotations


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


def parse_list(text: str) -> list[int]:
    """Parse a kernel list (``0-3,8``); empty text is the empty list."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


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
