"""The Prometheus text exposition format (0.0.4), written directly: the textfile needs nothing more.

node_exporter's textfile collector and ``promtool check metrics`` read it; so does Prometheus when the HTTP
exporter serves the same families through ``prometheus_client``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from .families import Family


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 2**63:
        return str(int(v))
    return repr(v)


def render(families: Iterable[Family]) -> str:
    """The exposition text of ``families`` (HELP and TYPE lines, then the samples; families without samples
    are left out, as prometheus_client does)."""
    out: list[str] = []
    for f in families:
        if not f.samples:
            continue
        name = f.sample_name
        out.append(f"# HELP {name} {_help(f.help)}")
        out.append(f"# TYPE {name} {f.kind}")
        for values, v in f.samples:
            labels = ",".join(f'{k}="{_label(x)}"' for k, x in zip(f.labels, values, strict=True))
            out.append(f"{name}{{{labels}}} {_value(v)}" if labels else f"{name} {_value(v)}")
    return "\n".join(out) + "\n" if out else ""
