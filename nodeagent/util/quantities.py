"""Quantities in human units, as profiles write them and reports print them: sizes (``512MiB``, ``2TiB``), durations
(``100ms``, ``2s``), percentages (``94%``).

Each parser accepts a plain number too (bytes, microseconds, percent) and raises ``ValueError`` with a message
that says what was expected; the profile model turns these into pydantic types.
"""

from __future__ import annotations

import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "pib": 1024**5,
}
_DURATION_US = {"us": 1, "µs": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
                "h": 3_600_000_000}
#: far beyond any size or duration (2**64 has 20 digits); a longer number is refused before it is read
_MAX_DIGITS = 64
_NUM_UNIT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Zµ]*)\s*")


def _quantity(value: object, units: dict[str, int], fold_case: bool, what: str, examples: str, more: str,
              whole: str) -> int:
    """An integer count of the base unit from a number with an optional unit of ``units``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected {what} such as {examples}, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected {what} of 0 or more, got {value}")
        return value
    if isinstance(value, str):
        m = _NUM_UNIT.fullmatch(value)
        unit = (m.group(2).lower() if fold_case else m.group(2)) if m else None
        if m and unit in units:
            if len(m.group(1)) > _MAX_DIGITS:  # Python refuses to read longer integers, with advice for programmers
                raise ValueError(f"expected {what} such as {more}, got a number of {len(m.group(1))} characters")
            # Exact decimal arithmetic: a float makes 4.1MB 4099999.9999999995 bytes and rounds long byte counts.
            whole_part, _, fraction = m.group(1).partition(".")
            n, rest = divmod(int(whole_part + fraction) * units[unit], 10 ** len(fraction))
            if rest:
                raise ValueError(f"{value!r} is not a whole number of {whole}")
            return n
    raise ValueError(f"expected {what} such as {more}, got {value!r}")


def parse_size(value: object) -> int:
    """Bytes from ``512MiB``/``2TiB``/``1GB``/an integer. Raises ValueError."""
    return _quantity(value, _SIZE_UNITS, True, "a size", "512MiB or 2TiB", "512MiB, 2TiB or a byte count", "bytes")


def parse_duration_us(value: object) -> int:
    """Microseconds from ``5ms``/``2s``/``1min``/an integer (microseconds). Raises ValueError."""
    return _quantity(value, _DURATION_US, False, "a duration", "100ms or 2s", "100ms, 2s or 1min", "microseconds")


def parse_percent(value: object) -> float:
    """0-100 from ``94%``/``94``/``94.5``. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a percentage such as 90%, got {value!r}")
    if isinstance(value, str):
        m = _PERCENT.fullmatch(value)
        if not m:
            raise ValueError(f"expected a percentage such as 90%, got {value.strip()!r}")
        value = float(m.group(1))
    if isinstance(value, int | float):
        if not 0 <= value <= 100:
            raise ValueError(f"expected a percentage from 0 to 100, got {value:g}")
        return float(value)
    raise ValueError(f"expected a percentage such as 90%, got {value!r}")


_PERCENT = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*%?\s*")


# JSON Schema patterns for the strings the parsers above accept, built from the same tables (``nodeagent
# schema``): an editor or linter using the schema accepts exactly the spellings the loader accepts.
_NUMBER = r"[0-9]+(\.[0-9]+)?"


def _spelling(unit: str, fold_case: bool) -> str:
    if not fold_case:
        return re.escape(unit)
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in unit)


def _unit_pattern(units: dict[str, int], fold_case: bool) -> str:
    names = sorted((u for u in units if u), key=lambda u: (-len(u), u))
    alt = "|".join(_spelling(u, fold_case) for u in names)
    optional = "?" if "" in units else ""
    return rf"^\s*{_NUMBER}\s*({alt}){optional}\s*$"


SIZE_PATTERN = _unit_pattern(_SIZE_UNITS, fold_case=True)
DURATION_PATTERN = _unit_pattern(_DURATION_US, fold_case=False)
#: 0 to 100, ``%`` optional (``percent_sign=True``: required), as :func:`parse_percent` reads a string.
_PCT_NUMBER = r"0*([0-9]{1,2}(\.[0-9]+)?|100(\.0+)?)"


def percent_pattern(percent_sign: bool = False) -> str:
    return rf"^\s*{_PCT_NUMBER}\s*%{'' if percent_sign else '?'}\s*$"


def format_size(n: int) -> str:
    """The largest binary unit that divides ``n`` exactly (``2TiB``), else with two decimals."""
    for unit, mult in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    for unit, mult in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= mult:
            return f"{n / mult:.2f}{unit}"
    return f"{n}B"


def approx_size(n: int) -> str:
    """A measured amount in the largest binary unit it reaches, one decimal (``61.4GiB``, ``812.0MiB``)."""
    for unit, mult in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= mult:
            return f"{n / mult:.1f}{unit}"
    return f"{n}B"


def format_duration_us(us: int) -> str:
    for unit, mult in (("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000), ("ms", 1000)):
        if us >= mult and us % mult == 0:
            return f"{us // mult}{unit}"
    return f"{us}us"
