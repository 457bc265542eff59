"""Loading a profile: safe YAML with positions, ``extends`` merging, one error format.

YAML is composed into nodes (never constructed by PyYAML, so no tag can build an object) and turned into plain
values while remembering where each was written. Duplicate keys, non-core tags, alias bombs, binary, huge and
empty files are errors. ``extends`` files are loaded the same way and merged under one rule: maps deep-merge,
lists of named items merge by ``name``, anything else is replaced by the extending file. Every value keeps the
``file:line:column`` it came from, so a validation error after the merge still points at the right place.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..host.files import MAX_PROFILE_BYTES, InputFileError, read_regular
from ..util.errors import ProfileError
from . import shipped
from .resolved import Loc  # defined with the plain-form record, which must not load YAML

MAX_BYTES = MAX_PROFILE_BYTES
KEY = "<key>"  # marks a key's own position in the locations map: (*path, KEY, key)
MAX_NODES = 100_000  # values after alias expansion: far above any real profile, far below a "billion laughs"
MAX_EXTENDS_DEPTH = 16
MAX_FILES = 64  # profile files one load reads, counting each extends entry: bounds fan-out, not only depth
MAX_DEPTH = 32  # nesting of maps and lists in one file, checked while composing (a real profile nests ~6 deep)
#: No setting takes a number above 2^64-1 (the widest kernel file, u64): anything longer is refused at load,
#: before a conversion could overflow or run long on it.
MAX_NUMBER = 2**64 - 1
_NUMBERISH = re.compile(r"\s*[+-]?([0-9][0-9_]*)(\.[0-9_]*)?([eE][+-]?[0-9]+)?\s*[a-zA-Zµ%]*\s*")
_CORE_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


@dataclass
class LNode:
    """A YAML value with the place it was written. ``value``: dict[str, LNode] | list[LNode] | scalar."""

    value: Any
    loc: Loc
    key_locs: dict[str, Loc] | None = None  # for mappings: where each key was written


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel if not rel.startswith("../..") else str(path)


def read_text(path: Path) -> str:
    shown = _display(path)
    try:
        data = read_regular(path, MAX_BYTES)
    except InputFileError as exc:
        reason = str(exc)
        if reason.startswith("longer than"):
            reason = f"too large for a profile ({reason})"
        elif reason.startswith("is a directory"):
            reason = "is a directory, not a profile"
        raise ProfileError([f"{shown}: {reason}"], hint=exc.hint if reason != "no such file" else
                           "check the path of the profile") from None
    if b"\0" in data:
        raise ProfileError([f"{shown}: binary file (contains NUL bytes), not a YAML profile"])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError([f"{shown}: not UTF-8 text (byte {exc.start})"]) from None
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise ProfileError([f"{shown}: empty profile"],
                           hint="a profile starts with apiVersion: nodeagent/v1 and kind: NodeProfile")
    return text


def _bare(node: LNode) -> Any:
    """The plain value of an :class:`LNode` tree, positions dropped."""
    if isinstance(node.value, dict):
        return {k: _bare(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_bare(v) for v in node.value]
    return node.value


def _as_written(node: LNode) -> str:
    """A value for a message, in words and in YAML's flow style (``a list [a, b]``, ``null``)."""
    value = _bare(node)
    kind = ("a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else
            "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, int | float) else "")
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip().removesuffix("...").strip()
    return f"{kind} {text}" if kind else text


class _DepthError(Exception):
    def __init__(self, mark: yaml.Mark) -> None:
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, with nesting bounded while composing: the composer recurses once per level, so a
    deep document (``[[[[...]]]]``) is refused at :data:`MAX_DEPTH` instead of exhausting Python's stack."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _DepthError(self.peek_event().start_mark)
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            self._depth -= 1


class _Converter:
    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.count = 0
        self.constructor = yaml.SafeLoader.__new__(yaml.SafeLoader)
        yaml.constructor.SafeConstructor.__init__(self.constructor)

    def loc(self, node: yaml.Node) -> Loc:
        return Loc(self.shown, node.start_mark.line + 1, node.start_mark.column + 1)

    def convert(self, node: yaml.Node, depth: int = 0) -> LNode:
        self.count += 1
        if self.count > MAX_NODES:
            raise ProfileError([f"{self.loc(node)}: the document expands to more than {MAX_NODES} values "
                                "(an alias bomb?)"], hint="write the values out; use extends: to share them")
        if depth > MAX_DEPTH:  # only through aliases (the composer bounds the written nesting)
            raise ProfileError([f"{self.loc(node)}: nested more than {MAX_DEPTH} levels deep through aliases "
                                "(a recursive alias?)"], hint="write the values out; use extends: to share them")
        if node.tag not in _CORE_TAGS:
            raise ProfileError([f"{self.loc(node)}: YAML tag {node.tag!r} is not allowed in a profile"],
                               hint="profiles are plain data: remove the tag")
        if isinstance(node, yaml.MappingNode):
            out: dict[str, LNode] = {}
            key_locs: dict[str, Loc] = {}
            for knode, vnode in node.value:
                if knode.tag == "tag:yaml.org,2002:merge":
                    raise ProfileError([f"{self.loc(knode)}: YAML merge keys (<<) are not supported; "
                                        "use extends:"])
                key = self.convert(knode, depth + 1)
                if not isinstance(key.value, str):
                    raise ProfileError([f"{key.loc}: keys must be strings, got {_as_written(key)}"],
                                       hint="write the key as a name (quote it if it looks like a number: \"1\")")
                if key.value in out:
                    first = out[key.value].loc
                    raise ProfileError([f"{key.loc}: duplicate key {key.value!r} (first at line {first.line})"])
                out[key.value] = self.convert(vnode, depth + 1)
                key_locs[key.value] = key.loc
            return LNode(out, self.loc(node), key_locs)
        if isinstance(node, yaml.SequenceNode):
            return LNode([self.convert(v, depth + 1) for v in node.value], self.loc(node))
        too_long = isinstance(node, yaml.ScalarNode) and _digits(node.value) > len(str(MAX_NUMBER))
        value = None if too_long else self.constructor.construct_object(node, deep=True)
        if too_long or (isinstance(value, int | float) and not isinstance(value, bool)
                        and not abs(value) <= MAX_NUMBER):  # not <=: nan too
            shown = _short(node.value)
            if isinstance(value, float) and math.isnan(value):
                raise ProfileError([f"{self.loc(node)}: {shown} is not a number"],
                                   hint="give a number, or quote it if it is a name")
            raise ProfileError([f"{self.loc(node)}: the number {shown} is too large: no setting takes more than "
                                f"{MAX_NUMBER} (2^64-1)"],
                               hint="give the value in a larger unit (2TiB, 1h), or check for a typo")
        return LNode(value, self.loc(node))


def _digits(text: str) -> int:
    """The length of the integer part of a number, or of a size or duration (``400...000GiB``); 0 for text
    that is not one. Counted before anything converts it (``int()`` of 5,000 digits is itself an error)."""
    m = _NUMBERISH.fullmatch(text)
    if m is None:
        return 0
    exp = m.group(3)
    return len(m.group(1).replace("_", "").lstrip("0")) + (int(exp[1:]) if exp and len(exp) < 6 else len(exp or ""))


def _short(text: str) -> str:
    text = text.strip()
    return repr(text) if len(text) <= 32 else f"{text[:12]!r}... ({len(text)} characters)"


def parse(text: str, shown: str) -> LNode:
    try:
        docs = list(yaml.compose_all(text, Loader=_Loader))
    except _DepthError as exc:
        raise ProfileError([f"{shown}:{exc.mark.line + 1}:{exc.mark.column + 1}: nested more than {MAX_DEPTH} "
                            "levels deep"], hint="a profile nests a few levels of maps and lists: flatten it") \
            from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        raise ProfileError([f"{where}: invalid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise ProfileError([f"{shown}: invalid YAML: {exc}"]) from None
    docs = [d for d in docs if d is not None]
    if len(docs) != 1:
        raise ProfileError([f"{shown}: expected exactly one YAML document, found {len(docs)}"])
    root = _Converter(shown).convert(docs[0])
    if not isinstance(root.value, dict):
        raise ProfileError([f"{root.loc}: a profile is a mapping (apiVersion, kind, metadata, ...), "
                            f"got a {type(root.value).__name__}"])
    return root


def merge(base: LNode, over: LNode) -> LNode:
    """The one merge rule: maps deep-merge, lists of named items merge by name, the rest is replaced."""
    if isinstance(base.value, dict) and isinstance(over.value, dict):
        out = dict(base.value)
        key_locs = {**(base.key_locs or {}), **(over.key_locs or {})}
        for key, val in over.value.items():
            out[key] = merge(out[key], val) if key in out else val
        return LNode(out, over.loc, key_locs)
    if isinstance(base.value, list) and isinstance(over.value, list) and _named(base) and _named(over):
        items = {_name(n): n for n in base.value}
        order = [_name(n) for n in base.value]
        for n in over.value:
            key = _name(n)
            if key in items:
                items[key] = merge(items[key], n)
            else:
                order.append(key)
                items[key] = n
        return LNode([items[k] for k in order], over.loc)
    return over


def _named(node: LNode) -> bool:
    return bool(node.value) and all(isinstance(n.value, dict) and isinstance(n.value.get("name", LNode(None, n.loc))
                                                                             .value, str) for n in node.value)


def _name(node: LNode) -> str:
    return node.value["name"].value


class _Budget:
    """How many more profile files one load may read (see :data:`MAX_FILES`)."""

    def __init__(self) -> None:
        self.left = MAX_FILES


def load_tree(path: Path, *, _stack: tuple[Path, ...] = (), _top: Path | None = None,
              _budget: _Budget | None = None) -> LNode:
    """Load ``path`` and everything it ``extends``, merged (positions kept)."""
    path = Path(path)
    real = path.resolve()
    node = parse(read_text(path), _display(path))
    return resolve_extends(node, real, top=_top or real.parent, stack=_stack, budget=_budget)


def resolve_extends(node: LNode, real: Path, *, top: Path, stack: tuple[Path, ...] = (),
                    budget: _Budget | None = None) -> LNode:
    """Merge what ``node`` (the document of file ``real``) extends under it. ``top`` bounds the paths; the
    budget bounds the files read in all (a file that lists the next one many times, at every level, would
    otherwise be read exponentially often)."""
    budget = budget or _Budget()
    ext = node.value.pop("extends", None)
    if ext is None:
        return node
    items = ext.value if isinstance(ext.value, list) else [ext]
    merged: LNode | None = None
    for item in items:
        if not isinstance(item.value, str) or not item.value:
            raise ProfileError([f"{item.loc}: extends: expected a file path, got {item.value!r}"])
        target = shipped.extends_target(real.parent, item.value)  # beside it, else a shipped profile by name
        base_top = top
        if shipped.is_shipped(target) and not (target == top or top in target.parents):
            base_top = shipped.directory()  # an installed profile, and what it extends among its own
        elif not (target == top or top in target.parents):
            raise ProfileError([f"{item.loc}: extends: {item.value!r} is outside the profile's directory "
                                f"tree ({_display(top)})"], hint="keep base profiles beside or below the profile")
        if target in stack or target == real:
            chain = " -> ".join(_display(p) for p in (*stack, real, target))
            raise ProfileError([f"{item.loc}: extends: cycle: {chain}"])
        if len(stack) >= MAX_EXTENDS_DEPTH:
            raise ProfileError([f"{item.loc}: extends: nested more than {MAX_EXTENDS_DEPTH} deep"])
        if not target.exists():
            raise ProfileError([f"{item.loc}: extends: {item.value!r}: no such file"])
        budget.left -= 1
        if budget.left < 0:
            raise ProfileError([f"{item.loc}: extends: this profile reads more than {MAX_FILES} files in all "
                                "(counting each extends entry of every file)"],
                               hint="extend each base once; a base that several files need is extended by "
                                    "one of them")
        base = load_tree(target, _stack=(*stack, real), _top=base_top, _budget=budget)
        merged = base if merged is None else merge(merged, base)
    return merge(merged, node) if merged is not None else node


def to_plain(node: LNode, path: tuple = (), locs: dict[tuple, Loc] | None = None) -> tuple[Any, dict[tuple, Loc]]:
    """Strip positions: (plain value, {field path: Loc})."""
    locs = {} if locs is None else locs
    locs[path] = node.loc
    for key, loc in (node.key_locs or {}).items():
        locs[(*path, KEY, key)] = loc
    if isinstance(node.value, dict):
        return {k: to_plain(v, (*path, k), locs)[0] for k, v in node.value.items()}, locs
    if isinstance(node.value, list):
        return [to_plain(v, (*path, i), locs)[0] for i, v in enumerate(node.value)], locs
    return node.value, locs
