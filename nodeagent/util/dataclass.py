"""``dataclass``: :func:`dataclasses.dataclass` for the record classes on nodeagent's every-run paths, without
compiling code at import.

On python 3.11, ``@dataclasses.dataclass`` writes the source of each generated method (``__init__``,
``__repr__``, ``__eq__``, and for a frozen class ``__setattr__``, ``__delattr__``, ``__hash__``) and compiles it
with ``exec`` while the module is imported — ~4 M instructions a class, the cost of ~1/70 of a whole ``damo
version``. ``drift --record`` (a systemd timer on every node) imports ~40 such classes: a third of its CPU went to
compiling methods it mostly never calls. Here the class is still made a dataclass by the standard library
(``__dataclass_fields__``, ``dataclasses.fields/replace/asdict/is_dataclass`` all work, defaults and
``default_factory`` are checked as usual), but its methods are shared functions that read the field list: nothing
is compiled. They behave like the generated ones (positional or keyword arguments, defaults and factories,
``__post_init__``, ``repr=False``/``compare=False``/``hash=`` fields, ``FrozenInstanceError``, equality only with
the same class, hash of the compared fields); constructing an instance costs a little more, which no record here
does often.

What the shared methods do not cover (``order``, ``slots``, ``kw_only``, ``unsafe_hash``, ``InitVar``,
``init=False`` fields) is handed to :func:`dataclasses.dataclass` unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from dataclasses import MISSING, FrozenInstanceError, field
from reprlib import recursive_repr
from typing import Any, TypeVar

__all__ = ["asdict", "dataclass", "field"]

T = TypeVar("T")

_PLAIN = {"init", "repr", "eq", "frozen"}


def dataclass(cls: type[T] | None = None, /, **params: Any) -> Any:
    """``@dataclass`` or ``@dataclass(frozen=True, ...)``, as :func:`dataclasses.dataclass`."""
    if cls is None:
        return lambda c: _make(c, params)
    return _make(cls, params)


def _make(cls: type[T], params: dict[str, Any]) -> type[T]:
    own = cls.__dict__
    notes = own.get("__annotations__", {})
    if set(params) - _PLAIN or not params.get("init", True) or _unusual(cls, notes):
        return dataclasses.dataclass(cls, **params)  # the generated methods, as usual
    want_repr, eq, frozen = params.get("repr", True), params.get("eq", True), params.get("frozen", False)
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    if not cls.__doc__:  # what dataclasses would compute with inspect.signature, without it
        cls.__doc__ = f"{cls.__name__}(...)"
    cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    p = cls.__dataclass_params__  # type: ignore[attr-defined]
    p.init, p.repr, p.eq, p.frozen = True, want_repr, eq, frozen
    names = tuple(f.name for f in fields)
    defaults = tuple((f.default, f.default_factory) for f in fields)
    post_init = hasattr(cls, "__post_init__")
    setter = object.__setattr__ if frozen else setattr

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}.__init__() takes {len(names) + 1} positional arguments but "
                            f"{len(args) + 1} were given")
        for name, value in zip(names, args, strict=False):  # more args: refused above
            setter(self, name, value)
        for i in range(len(args), len(names)):
            name = names[i]
            if name in kwargs:
                setter(self, name, kwargs.pop(name))
                continue
            default, factory = defaults[i]
            if default is not MISSING:
                setter(self, name, default)
            elif factory is not MISSING:
                setter(self, name, factory())
            else:
                raise TypeError(f"{type(self).__name__}.__init__() missing required argument: {name!r}")
        if kwargs:
            extra = next(iter(kwargs))
            raise TypeError(f"{type(self).__name__}.__init__() got an unexpected keyword argument {extra!r}"
                            if extra not in names else
                            f"{type(self).__name__}.__init__() got multiple values for argument {extra!r}")
        if post_init:
            self.__post_init__()

    _set(cls, "__init__", __init__)
    if want_repr:
        shown = tuple(f.name for f in fields if f.repr)

        @recursive_repr()
        def __repr__(self: Any) -> str:
            inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
            return f"{self.__class__.__qualname__}({inner})"

        _set(cls, "__repr__", __repr__)
    compared = tuple(f.name for f in fields if f.compare)
    if eq:
        def __eq__(self: Any, other: Any) -> Any:
            if other.__class__ is self.__class__:
                return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)
            return NotImplemented

        _set(cls, "__eq__", __eq__)
    if frozen:
        def __setattr__(self: Any, name: str, value: Any) -> None:
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            super(cls, self).__setattr__(name, value)

        def __delattr__(self: Any, name: str) -> None:
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            super(cls, self).__delattr__(name)

        cls.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]
        cls.__delattr__ = __delattr__  # type: ignore[method-assign,assignment]
    if eq and not explicit_hash:
        if frozen:
            hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))

            def __hash__(self: Any) -> int:
                return hash(tuple(getattr(self, n) for n in hashed))

            cls.__hash__ = __hash__  # type: ignore[method-assign,assignment]
        else:
            cls.__hash__ = None  # type: ignore[assignment]
    return cls


def _unusual(cls: type, notes: dict[str, Any]) -> bool:
    """What the shared methods leave to the standard library: a dataclass base (frozen-ness is checked against
    it), ``InitVar``/``KW_ONLY`` annotations, ``init=False`` or ``kw_only`` fields, a frozen class's own
    ``__setattr__``/``__delattr__`` (refused by the standard library)."""
    if any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:]):
        return True
    if any("InitVar" in str(t) or "KW_ONLY" in str(t) for t in notes.values()):
        return True
    own = cls.__dict__
    if "__setattr__" in own or "__delattr__" in own:
        return True
    return any(isinstance(v, dataclasses.Field) and (not v.init or v.kw_only is True) for v in own.values())


def _set(cls: type, name: str, fn: Any) -> None:
    """Like the generated methods: a method the class body defines itself is kept."""
    if name in cls.__dict__:
        return
    fn.__qualname__ = f"{cls.__qualname__}.{name}"
    setattr(cls, name, fn)


#: The types whose values :func:`copy.deepcopy` returns as they are (python 3.12's ``dataclasses._ATOMIC_TYPES``).
_ATOMIC = frozenset({type(None), bool, int, float, str, complex, bytes, type(Ellipsis), type(NotImplemented),
                     types.CodeType, types.BuiltinFunctionType, types.FunctionType, type, range, property})


def asdict(obj: Any, *, dict_factory: Any = dict) -> Any:
    """:func:`dataclasses.asdict`, as python 3.12 does it: the same result, but a value of an immutable builtin
    type is taken as it is instead of going through :func:`copy.deepcopy` (which returns it unchanged). Facts
    are mostly such values, and on python 3.11 the deep copies of them were most of a facts document's cost."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError("asdict() should be called on dataclass instances")
    return _asdict(obj, dict_factory)


def _asdict(obj: Any, dict_factory: Any) -> Any:
    kind = type(obj)
    if kind in _ATOMIC:
        return obj
    if hasattr(kind, "__dataclass_fields__"):
        return dict_factory([(f.name, _asdict(getattr(obj, f.name), dict_factory)) for f in dataclasses.fields(obj)])
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple: built from positional arguments
        return kind(*[_asdict(v, dict_factory) for v in obj])
    if isinstance(obj, list | tuple):
        return kind(_asdict(v, dict_factory) for v in obj)
    if isinstance(obj, dict):
        return kind((_asdict(k, dict_factory), _asdict(v, dict_factory)) for k, v in obj.items())
    return copy.deepcopy(obj)
