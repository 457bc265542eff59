"""Loading a profile: YAML + extends, with positions → validate (pydantic) → :class:`LoadedProfile`.

Every validation error is one line ``file:line:column: field.path: what was expected, got what``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from ..util.errors import ProfileError
from .load import KEY, MAX_BYTES, LNode, Loc, load_tree, parse, resolve_extends, to_plain
from .model import NodeProfile

__all__ = ["LoadedProfile", "load_profile", "load_profile_text", "NodeProfile", "schema"]


@dataclass(frozen=True)
class LoadedProfile:
    profile: NodeProfile
    path: str
    data: dict[str, Any]  # the merged document as plain data
    locs: dict[tuple, Loc]

    @property
    def name(self) -> str:
        return self.profile.metadata.name

    @property
    def digest(self) -> str:
        """sha256 of the merged profile: what the last-applied record pins."""
        blob = json.dumps(self.data, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def where(self, *path: str | int) -> str:
        """``file:line:col`` of the value at ``path`` (or of its nearest written parent)."""
        return str(_nearest(self.locs, tuple(path)))


def _nearest(locs: dict[tuple, Loc], path: tuple) -> Loc:
    for i in range(len(path), -1, -1):
        if path[:i] in locs:
            return locs[path[:i]]
    return locs[()]


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(profile)"


def _model_at(path: tuple) -> type[BaseModel] | None:
    """The model class that validates the mapping at ``path`` (to list the keys it allows)."""
    cls: Any = NodeProfile
    for part in path:
        if isinstance(part, int):
            continue
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return None
        field = next((f for n, f in cls.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        cls = _unwrap(field.annotation)
    return cls if isinstance(cls, type) and issubclass(cls, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    for arg in (tp, *get_args(tp)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
        for inner in get_args(arg):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return tp


_TYPE_MESSAGES = {
    "int_type": "expected an integer", "int_parsing": "expected an integer", "int_from_float": "expected an integer",
    "bool_type": "expected true or false", "bool_parsing": "expected true or false",
    "string_type": "expected a string", "dict_type": "expected a mapping", "model_type": "expected a mapping",
    "list_type": "expected a list", "float_type": "expected a number", "float_parsing": "expected a number",
}


def _message(err: dict, path: tuple) -> str:
    kind = err["type"]
    got = err.get("input")
    if kind == "extra_forbidden":
        model = _model_at(path[:-1])
        allowed = sorted((f.alias or n) for n, f in model.model_fields.items()) if model else []
        if not path[:-1]:
            allowed = sorted([*allowed, "extends"])
        return "unknown key" + _did_you_mean(str(path[-1]), allowed) + \
            (f"; allowed here: {', '.join(allowed)}" if allowed else "")
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error":
        return f"expected {err['ctx']['expected']}, got {got!r}"
    if kind == "string_pattern_mismatch":
        return f"expected lowercase letters, digits and '-', starting with a letter or digit, got {got!r}"
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]}, got {got!r}"
    return err["msg"].removeprefix("Value error, ")


def _did_you_mean(key: str, allowed: list[str]) -> str:
    """`` (did you mean 'numa_balancing'?)`` for a misspelt key (as click does for a misspelt option)."""
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6) or \
        difflib.get_close_matches(key.lower().replace("-", "_"), allowed, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def validate(data: dict[str, Any], locs: dict[tuple, Loc], path_shown: str) -> NodeProfile:
    try:
        return NodeProfile.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            path = tuple(err["loc"])
            if err["type"] == "missing":
                where = _nearest(locs, path[:-1])
            elif err["type"] == "extra_forbidden" and (*path[:-1], KEY, path[-1]) in locs:
                where = locs[(*path[:-1], KEY, path[-1])]
            else:
                where = _nearest(locs, path)
            lines.append(f"{where}: {_dotted(path)}: {_message(err, path)}")
        raise ProfileError(lines, hint="see `nodeagent schema` or docs/profile-reference.md") from None


def load_profile(path: str | Path) -> LoadedProfile:
    tree = load_tree(Path(path))
    data, locs = to_plain(tree)
    profile = validate(data, locs, str(path))
    return LoadedProfile(profile, str(path), data, locs)


def load_profile_text(text: str, shown: str = "<inline>", base_dir: Path | None = None) -> LoadedProfile:
    """A profile given as text (Ansible's inline profile). ``extends`` resolves against ``base_dir``; without
    one it is refused."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_BYTES:
        raise ProfileError([f"{shown}: too large for a profile ({size} bytes, the limit is {MAX_BYTES}, as for a "
                            "profile file)"], hint="check that this is the right profile")
    node: LNode = parse(text, shown)
    if "extends" in node.value:
        if base_dir is None:
            raise ProfileError([f"{node.value['extends'].loc}: extends: an inline profile has no directory to "
                                "resolve it against"], hint="give profile_dir, or use a profile file")
        top = Path(base_dir).resolve()
        node = resolve_extends(node, top / shown, top=top)
    data, locs = to_plain(node)
    return LoadedProfile(validate(data, locs, shown), shown, data, locs)


def schema() -> dict[str, Any]:
    """The JSON Schema of a profile file as written (see :mod:`nodeagent.profile.json_schema`)."""
    from .json_schema import profile_schema

    return profile_schema()
