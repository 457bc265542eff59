"""Loading a profile: safe YAML with positions, ``extends`` merging, one error format.

YAML is composed into nodes (never constructed by PyYAML, so no tag can build an object) and turned into plain
values while remembering where each was written. Duplicate keys, non-core tags, alias bombs, binary, huge and
empty files are errors. ``extends`` files are loaded the same way and merged under one rule: maps deep-merge,
lists of named items merge by ``name``, anything else is replaced by the extending file. Every value keeps the
``file:line:column`` it came from, so a validation error after the merge still points at the right place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ProfileError

MAX_BYTES = 1024 * 1024
KEY = "<key>"  # marks a key's own position in the locations map: (*path, KEY, key)
MAX_NODES = 100_000  # values after alias expansion: far above any real profile, far below a "billion laughs"
MAX_EXTENDS_DEPTH = 16
_CORE_TAGS = {f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")}


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


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
    if not path.exists():
        raise ProfileError([f"{shown}: no such file"], hint="check the path of the profile")
    if path.is_dir():
        raise ProfileError([f"{shown}: is a directory, not a profile"], hint="give a .yaml file")
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ProfileError([f"{shown}: {size} bytes is too large for a profile (limit {MAX_BYTES})"])
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileError([f"{shown}: cannot read: {exc.strerror}"]) from None
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
        if self.count > MAX_NODES or depth > 200:
            raise ProfileError([f"{self.loc(node)}: the document expands to more than {MAX_NODES} values "
                                "(an alias bomb?)"])
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
                    raise ProfileError([f"{key.loc}: keys must be strings, got {key.value!r}"])
                if key.value in out:
                    first = out[key.value].loc
                    raise ProfileError([f"{key.loc}: duplicate key {key.value!r} (first at line {first.line})"])
                out[key.value] = self.convert(vnode, depth + 1)
                key_locs[key.value] = key.loc
            return LNode(out, self.loc(node), key_locs)
        if isinstance(node, yaml.SequenceNode):
            return LNode([self.convert(v, depth + 1) for v in node.value], self.loc(node))
        value = self.constructor.construct_object(node, deep=True)
        return LNode(value, self.loc(node))


def parse(text: str, shown: str) -> LNode:
    try:
        docs = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
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


def load_tree(path: Path, *, _stack: tuple[Path, ...] = (), _top: Path | None = None) -> LNode:
    """Load ``path`` and everything it ``extends``, merged (positions kept)."""
    path = Path(path)
    real = path.resolve()
    node = parse(read_text(path), _display(path))
    return resolve_extends(node, real, top=_top or real.parent, stack=_stack)


def resolve_extends(node: LNode, real: Path, *, top: Path, stack: tuple[Path, ...] = ()) -> LNode:
    """Merge what ``node`` (the document of file ``real``) extends under it. ``top`` bounds the paths."""
    ext = node.value.pop("extends", None)
    if ext is None:
        return node
    items = ext.value if isinstance(ext.value, list) else [ext]
    merged: LNode | None = None
    for item in items:
        if not isinstance(item.value, str) or not item.value:
            raise ProfileError([f"{item.loc}: extends: expected a file path, got {item.value!r}"])
        target = (real.parent / item.value).resolve()
        if not (target == top or top in target.parents):
            raise ProfileError([f"{item.loc}: extends: {item.value!r} is outside the profile's directory "
                                f"tree ({_display(top)})"], hint="keep base profiles beside or below the profile")
        if target in stack or target == real:
            chain = " -> ".join(_display(p) for p in (*stack, real, target))
            raise ProfileError([f"{item.loc}: extends: cycle: {chain}"])
        if len(stack) >= MAX_EXTENDS_DEPTH:
            raise ProfileError([f"{item.loc}: extends: nested more than {MAX_EXTENDS_DEPTH} deep"])
        if not target.is_file():
            raise ProfileError([f"{item.loc}: extends: {item.value!r}: no such file"])
        base = load_tree(target, _stack=(*stack, real), _top=top)
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
