"""The architecture, judged from the source: no import circle crosses a folder, the layers point one way, and
nothing under nodeagent/ knows the simulator (it is a machine plugin behind nodeagent.host.machine)."""

from __future__ import annotations

import re

import pytest

from tests.arch.imports import PACKAGE, cycles, folder, graph


def test_no_flat_module_but_the_entry_points() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"], flat


def test_the_graph_sees_lazy_and_importlib_imports() -> None:
    g = graph()
    assert "nodeagent.engine.core" in g["nodeagent"]  # _LAZY, through importlib.import_module(".engine.core")
    assert "nodeagent.engine.hooks" in g["nodeagent.cli.main"]  # lazy, inside a function


def test_no_import_circle_crosses_a_folder() -> None:
    crossing = [c for c in cycles() if len({folder(m) for m in c}) > 1]
    assert not crossing, "import circles across folders:\n" + "\n".join(" ↔ ".join(c) for c in crossing)


def test_the_state_has_no_import_circle_inside() -> None:
    """The state's modules point one way — the store on the records, each record on the record base and the shape
    checks — so that a record module can be read, and imported, alone (the boot cache asks the store through a
    protocol, not an import)."""
    inside = [c for c in cycles() if {folder(m) for m in c} == {"state"}]
    assert not inside, "import circles inside state/:\n" + "\n".join(" ↔ ".join(c) for c in inside)


def _edges(src: str, allowed: callable) -> list[str]:  # type: ignore[valid-type]
    return [f"{m} → {d} (line {line})" for m, deps in sorted(graph().items()) if folder(m) == src
            for d, line in deps.items() if not allowed(d)]


@pytest.mark.parametrize("src, rule, allowed", [
    ("util", "util imports nothing of ours", lambda d: folder(d) == "util" or d == "nodeagent"),
    ("host", "host imports nothing of ours above util", lambda d: folder(d) in ("host", "util")),
    # The facts read DAMON's tree into the kind's one model (kinds/damon/model.py), which the plan builds and apply
    # writes: of the kinds, a facts module may import such a pure model module and nothing else.
    ("facts", "facts never import checks, state or a kind's apply; of the kinds, only a pure model module",
     lambda d: folder(d) not in ("checks", "state", "engine", "cli") and not d.endswith(".apply")
     and (folder(d) != "kinds" or d.endswith(".model"))),
    ("render", "render imports no collector", lambda d: not d.startswith("nodeagent.metrics.collector")),
    ("kinds", "kinds never import the engine, the CLI, the loops or the renderers",
     lambda d: folder(d) not in ("engine", "cli", "loops", "render")),
    ("state", "the state imports nothing but util, host and the resolved profile",
     lambda d: folder(d) in ("state", "util", "host") or d == "nodeagent.profile.resolved"),
    ("plan", "the plan records import nothing but util", lambda d: folder(d) in ("plan", "util")),
])
def test_layers(src: str, rule: str, allowed: callable) -> None:  # type: ignore[valid-type]
    bad = _edges(src, allowed)
    assert not bad, f"{rule}:\n" + "\n".join(bad)


def test_a_kinds_model_is_pure() -> None:
    """A kind's model module (what the facts read into) imports nothing of ours but util, and its package's
    ``__init__`` imports nothing at all: importing the model must not load the kind (whose plan imports the facts)."""
    g = graph()
    models = [m for m in g if folder(m) == "kinds" and m.endswith(".model")]
    assert models, "no kind model found"
    bad = [f"{m} → {d}" for m in models for d in g[m] if folder(d) != "util"]
    bad += [f"{m.rsplit('.', 1)[0]} → {d}" for m in models for d in g[m.rsplit(".", 1)[0]]]
    assert not bad, "\n".join(bad)


def test_nothing_under_nodeagent_names_the_simulator() -> None:
    pattern = re.compile(r"nodeagent_sim|nodeagent.sim")
    hits = [f"{p.relative_to(PACKAGE.parent)}:{n}: {line.strip()}" for p in sorted(PACKAGE.rglob("*"))
            if p.is_file() and p.suffix in (".py", ".j2", ".yaml", ".json", ".c")
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not hits, "\n".join(hits)


def test_every_kind_passes_the_registry_check() -> None:
    from nodeagent.kinds.base import Kind, check_kind
    from nodeagent.kinds.registry import RESOURCES

    assert all(isinstance(k, Kind) and not check_kind(k) for k in RESOURCES)

    class Half(Kind):
        kind = "half"
        revertible = True

        def plan(self, loaded, facts, ctx):  # type: ignore[no-untyped-def]
            raise AssertionError

    assert check_kind(Half()) == ["half: does not define apply()", "half: revertible, but does not define revert()"]
