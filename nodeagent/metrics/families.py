"""Metric families as plain data: what the collector produces and both outputs (textfile, HTTP) consume.

A :class:`Family` is one metric name with its type, help text, label names and samples. Counter families are
named without the ``_total`` suffix; the writers add it, as the text format expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Family:
    name: str
    kind: str  # "gauge" | "counter"
    help: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, value: float, *labelvalues: object) -> Family:
        if len(labelvalues) != len(self.labels):
            raise ValueError(f"{self.name}: {len(labelvalues)} label values for labels {self.labels}")
        self.samples.append((tuple("" if v is None else str(v) for v in labelvalues), float(value)))
        return self

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name


def gauge(name: str, doc: str, *labels: str) -> Family:
    return Family(name, "gauge", doc, labels)


def counter(name: str, doc: str, *labels: str) -> Family:
    return Family(name, "counter", doc, labels)


def one(name: str, doc: str, value: float, **labels: object) -> Family:
    """A gauge with a single sample."""
    return gauge(name, doc, *labels).add(value, *labels.values())
