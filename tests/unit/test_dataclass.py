"""nodeagent.util.dataclass.dataclass behaves as dataclasses.dataclass: the same class is declared with both and
every observable behaviour is compared (construction, defaults, repr, equality, hash, frozenness, the
dataclasses helpers)."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, ClassVar, NamedTuple

import pytest

from nodeagent.util.dataclass import asdict, dataclass, field


def _pair(**params: Any) -> tuple[type, type]:
    def body() -> dict[str, Any]:
        return {"__annotations__": {"a": "int", "b": "str", "c": "tuple[int, ...]", "d": "list[int]",
                                    "hidden": "int", "k": "ClassVar[int]"},
                "b": "x", "c": (), "d": field(default_factory=list),
                "hidden": field(default=0, repr=False, compare=False), "k": 7,
                "double": lambda self: self.a * 2, "__module__": __name__, "__qualname__": "Rec"}

    return (dataclasses.dataclass(type("Rec", (), body()), **params), dataclass(**params)(type("Rec", (), body())))


SHAPES = [{}, {"frozen": True}, {"eq": False}, {"repr": False}, {"frozen": True, "eq": False}]


@pytest.mark.parametrize("params", SHAPES, ids=str)
def test_the_same_behaviour_as_the_standard_library(params: dict[str, Any]) -> None:
    std, ours = _pair(**params)
    for args, kw in [((1,), {}), ((1, "y"), {"d": [3]}), ((), {"a": 2, "hidden": 5}), ((1, "y", (2,), [1], 9), {})]:
        s, o = std(*args, **kw), ours(*args, **kw)
        assert dataclasses.asdict(s) == dataclasses.asdict(o)
        assert repr(s) == repr(o) or not params.get("repr", True)
        assert (s == std(*args, **kw)) == (o == ours(*args, **kw))
        assert (s == std(5)) == (o == ours(5))
        assert (o == s) is False  # another class: never equal
        assert dataclasses.replace(o, a=9).a == 9 and dataclasses.replace(o, a=9).b == o.b
        assert o.double() == s.double() and ours.k == 7
        if std.__hash__ is None:
            assert ours.__hash__ is None
        elif params.get("frozen") and params.get("eq", True):
            assert hash(dataclasses.replace(o, d=())) == hash(dataclasses.replace(s, d=()))
            with pytest.raises(TypeError):  # a list in a compared field: unhashable, as with the library's
                hash(o)
    assert [f.name for f in dataclasses.fields(std)] == [f.name for f in dataclasses.fields(ours)]
    assert dataclasses.is_dataclass(ours) and ours.__match_args__ == std.__match_args__
    assert ours.__dataclass_params__.frozen == std.__dataclass_params__.frozen
    assert ours(1).d is not ours(1).d  # a fresh default each time
    for args, kw in [((), {}), ((1, "y", (), [], 0, 6), {}), ((1,), {"zz": 1}), ((1,), {"a": 1})]:
        with pytest.raises(TypeError):
            std(*args, **kw)
        with pytest.raises(TypeError):
            ours(*args, **kw)
    o = ours(1)
    if params.get("frozen"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            o.a = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del o.a
    else:
        o.a = 2
        assert o.a == 2


@dataclass(frozen=True)
class Point:
    """A module-level record (picklable)."""

    x: int
    y: int = 0
    tags: tuple[str, ...] = ()
    seen: ClassVar[int] = 0

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x < 0")


def test_post_init_pickle_and_frozen_hash() -> None:
    p = Point(1, tags=("a",))
    assert pickle.loads(pickle.dumps(p)) == p
    assert hash(p) == hash(Point(1, 0, ("a",))) and {p, Point(1, tags=("a",))} == {p}
    with pytest.raises(ValueError):
        Point(-1)
    assert Point.__doc__ == "A module-level record (picklable)."


def test_what_the_shared_methods_do_not_cover_is_left_to_the_standard_library() -> None:
    @dataclass(order=True, frozen=True)
    class Ordered:
        a: int

    @dataclass
    class Late:
        a: int
        b: list[int] = field(init=False, default_factory=list)

    @dataclass(frozen=True)
    class Child(Point):
        z: int = 0

    assert Ordered(1) < Ordered(2)
    assert Late(1).b == []
    assert Child(1, 2, (), 3).z == 3 and dataclasses.replace(Child(1), z=4).z == 4
    with pytest.raises(TypeError):
        Late(1, [2])


class _Point(NamedTuple):
    x: int
    y: float


@dataclasses.dataclass
class _Leaf:
    name: str
    size: int | None
    tags: set[str]  # not an immutable builtin: deep-copied, as the standard library does


@dataclass(frozen=True)
class _Tree:
    leaves: list[_Leaf]
    by_name: dict[str, _Leaf]
    point: _Point
    pair: tuple[int, str]
    flag: bool = False


def test_asdict_matches_the_standard_library() -> None:
    leaf = _Leaf("a", None, {"x"})
    tree = _Tree([leaf, _Leaf("b", 3, set())], {"a": leaf}, _Point(1, 2.5), (4, "z"), True)
    mine, theirs = asdict(tree), dataclasses.asdict(tree)
    assert mine == theirs
    assert type(mine["point"]) is _Point and type(mine["pair"]) is tuple
    assert mine["leaves"][0]["tags"] is not leaf.tags  # copied, like the standard library
    assert asdict(tree, dict_factory=list) == dataclasses.asdict(tree, dict_factory=list)
    for bad in (_Tree, 3):
        with pytest.raises(TypeError):
            asdict(bad)
