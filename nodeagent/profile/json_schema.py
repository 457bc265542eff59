"""The profile's JSON Schema (``nodeagent schema``), generated from the pydantic model.

The model's fields validate with small functions (``BeforeValidator``) that accept human units (``25%``,
``30s``, ``200GiB``, ``70B``) and names (``numa_balancing: memory-tiering``). Pydantic alone would describe
such a field by the type the function returns (an integer), so a linter would reject what the loader accepts.
Here each validator function is described by what it *accepts*, from the same tables and parameters it uses,
so every profile the loader accepts validates and what the schema rejects the loader rejects too. What the
schema cannot say (rules across fields: ``zone`` required with ``mode: system-ram``, ``sample <= aggregate``,
unique names, ...) the loader checks alone; docs/profile-reference.md lists those rules.

A validator function the table below does not know fails the generation (and the test suite) instead of
quietly becoming an integer: a new field's accepted spellings must be described here.

A file that ``extends`` others is validated as written (before the merge), so in it no key is required: the
``extends`` branch of the root schema is the same schema with every ``required`` dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from ..util import quantities
from ..util.vocab import NUMA_BALANCING

DIALECT = "https://json-schema.org/draft/2020-12/schema"

Describe = Callable[[dict[str, Any]], JsonSchemaValue]


def _int(lo: int | None = None, hi: int | None = None, exclusive_lo: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer"}
    if lo is not None:
        out["exclusiveMinimum" if exclusive_lo else "minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def _enum(choices: Any) -> dict[str, Any]:
    return {"type": "string", "enum": list(choices)}


def _size(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_int(0), {"type": "string", "pattern": quantities.SIZE_PATTERN}],
            "description": "bytes, or a size such as 512MiB, 2TiB or 10GB"}


def _duration(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_int(0), {"type": "string", "pattern": quantities.DURATION_PATTERN}],
            "description": "microseconds, or a duration such as 10ms, 30s or 1min"}


def _percent(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [{"type": "number", "minimum": 0, "maximum": 100},
                      {"type": "string", "pattern": quantities.percent_pattern()}],
            "description": "a percentage: 25% or 25"}


def _unit(cv: dict[str, Any]) -> JsonSchemaValue:
    parse = cv["parse"]
    if parse is quantities.parse_size:
        return _size(cv)
    if parse is quantities.parse_duration_us:
        return _duration(cv)
    raise LookupError(f"no JSON Schema for the unit parser {parse.__qualname__}")


def _ratio(cv: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_int(0, cv["scale"]),
                      {"type": "string", "pattern": quantities.percent_pattern(percent_sign=True)}],
            "description": f"{cv['what']} (0-{cv['scale']}) or a percentage such as 40%"}


def _numa_balancing(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_enum(NUMA_BALANCING.values()), {"type": "integer", "enum": sorted(NUMA_BALANCING)}]}


def _param_count(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_int(1),
                      {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?(e[0-9]+)?\s*[kmbgtKMBGT]?\s*$"}],
            "description": "a parameter count such as 70B, 7.6B or 8e9"}


def _damon_count(_: dict[str, Any]) -> JsonSchemaValue:
    return {"anyOf": [_int(0, 2**32 - 1), {"type": "string", "pattern": quantities.percent_pattern(percent_sign=True)}],
            "description": "accesses per aggregation interval, or a percentage of the most a region can get"}


def _dtype(_: dict[str, Any]) -> JsonSchemaValue:
    from .checks import DTYPE_BYTES

    alt = "|".join(quantities._spelling(d, fold_case=True) for d in DTYPE_BYTES)
    return {"type": "string", "pattern": f"^({alt})$", "description": f"one of {', '.join(DTYPE_BYTES)}"}


#: Validator functions by (module, qualified name) → what they accept. Closures get their closure's variables.
_DESCRIBE: dict[tuple[str, str], Describe] = {
    ("nodeagent.profile.model", "_numa_balancing"): _numa_balancing,
    ("nodeagent.profile.model", "_enum.<locals>.check"): lambda cv: _enum(cv["choices"]),
    ("nodeagent.profile.model", "_strict_bool"): lambda _: {"type": "boolean"},
    ("nodeagent.profile.model", "_int_range.<locals>.check"): lambda cv: _int(cv["lo"], cv["hi"]),
    ("nodeagent.profile.model", "_lru_gen_enabled"): lambda _: {"anyOf": [{"type": "boolean"}, _int(0, 7)]},
    ("nodeagent.profile.model", "_interleave_node"): lambda _: {"type": "string",
                                                               "pattern": "^node(0|[1-9][0-9]{0,3})$"},
    ("nodeagent.profile.model", "_dax_name"): lambda _: {"type": "string", "pattern": r"^dax[0-9]+\.[0-9]+$"},
    ("nodeagent.profile.model", "_size"): _size,
    ("nodeagent.profile.model", "_serial"): lambda _: {
        "anyOf": [_int(1, 2**64 - 1), {"type": "string", "pattern": r"^\s*(0[xX][0-9a-fA-F]*[1-9a-fA-F][0-9a-fA-F]*"
                                                                     r"|[0-9]*[1-9][0-9]*)\s*$"}],
        "description": "a memdev serial number (not 0), such as 0x4c454f0001"},
    ("nodeagent.profile.model", "_host_bridge"): lambda _: {"type": "string",
                                                           "pattern": r"^pci[0-9a-f]{4}:[0-9a-f]{2}$"},
    ("nodeagent.profile.model", "_ways"): lambda _: {"type": "integer", "enum": [1, 2, 3, 4, 6, 8, 12, 16]},
    ("nodeagent.profile.model", "_granularity"): lambda _: {
        "anyOf": [{"type": "integer", "enum": [256 << i for i in range(7)]},
                  {"type": "string", "pattern": quantities.SIZE_PATTERN}],
        "description": "bytes (a power of two from 256 to 16384), or a size such as 4KiB"},
    ("nodeagent.profile.checks", "_size"): _size,
    ("nodeagent.profile.checks", "_percent"): _percent,
    ("nodeagent.profile.checks", "_count"): _param_count,
    ("nodeagent.profile.checks", "_dtype"): _dtype,
    ("nodeagent.profile.checks", "_flag"): lambda _: {"type": "string", "pattern": "^[a-z0-9_]+$"},
    ("nodeagent.profile.checks", "_path"): lambda _: {"type": "string", "pattern": "^/[^\u0000]*$"},
    ("nodeagent.profile.checks", "_int_range.<locals>.check"): lambda cv: _int(cv["lo"], cv["hi"]),
    ("nodeagent.profile.checks", "_positive_int"): lambda _: _int(0, exclusive_lo=True),
    ("nodeagent.profile.checks", "_non_negative_int"): lambda _: _int(0),
    ("nodeagent.profile.checks", "_positive_number"): lambda _: {"type": "number", "exclusiveMinimum": 0},
    ("nodeagent.profile.checks", "_strict_bool"): lambda _: {"type": "boolean"},
    ("nodeagent.profile.damon", "_strict_bool"): lambda _: {"type": "boolean"},
    ("nodeagent.profile.damon", "_unit.<locals>.check"): _unit,
    ("nodeagent.profile.damon", "_paddr_only"): lambda _: _enum(("paddr",)),
    ("nodeagent.profile.damon", "_node"): lambda _: {"anyOf": [_enum(("fast", "slow")), _int(0, 1023)]},
    ("nodeagent.profile.damon", "_ratio.<locals>.check"): _ratio,
    ("nodeagent.profile.damon", "_count"): _damon_count,
    ("nodeagent.profile.damon", "_uint.<locals>.check"): lambda cv: _int(0, cv["limit"]),
    ("nodeagent.profile.damon", "_choice.<locals>.check"): lambda cv: _enum(cv["choices"]),
    ("nodeagent.profile.damon", "_release"): lambda _: {"type": "string", "pattern": r"^\s*\d+\.\d+\s*$",
                                                        "description": "a kernel release such as \"6.16\""},
}


def _goal_target(inner: JsonSchemaValue) -> JsonSchemaValue:
    """``Goal.target``'s unit depends on ``metric``: a ratio for ``*_bp``, a duration for PSI, else a number."""
    from .damon import GOAL_METRICS

    bp = [m for m in GOAL_METRICS if m.endswith("_bp")]
    props = inner.get("properties", {})
    props["target"] = {"anyOf": [_int(0), {"type": "string"}],
                       "description": "by metric: *_bp a percentage (30%) or basis points; some_mem_psi_us a "
                                      "duration; user_input a number"}
    inner.setdefault("allOf", []).extend([
        {"if": {"properties": {"metric": {"enum": bp}}, "required": ["metric"]},
         "then": {"properties": {"target": _ratio({"scale": 10000, "what": "basis points"})}}},
        {"if": {"properties": {"metric": {"const": "some_mem_psi_us"}}, "required": ["metric"]},
         "then": {"properties": {"target": _duration({})}}},
        {"if": {"properties": {"metric": {"not": {"enum": [*bp, "some_mem_psi_us"]}}}, "required": ["metric"]},
         "then": {"properties": {"target": _int(0, 2**63 - 1)}}},
    ])
    return inner


def _nonempty_map(inner: JsonSchemaValue) -> JsonSchemaValue:
    for branch in inner.get("anyOf", [inner]):
        if branch.get("type") == "object":
            branch["minProperties"] = 1
    return inner


def _nonempty(inner: JsonSchemaValue) -> JsonSchemaValue:
    for branch in inner.get("anyOf", [inner]):
        if branch.get("type") == "array":
            branch["minItems"] = 1
    return inner


#: Validators that pass the value on to the field's own type (after a check or a conversion): they change what
#: the inner schema accepts.
_WRAPPING: dict[tuple[str, str], Callable[[JsonSchemaValue], JsonSchemaValue]] = {
    ("nodeagent.profile.damon", "Goal._target_units"): _goal_target,
    ("nodeagent.profile.model", "_nonempty.<locals>.check"): _nonempty,
    ("nodeagent.profile.model", "_nonempty_map.<locals>.check"): _nonempty_map,
    ("nodeagent.profile.model", "_unique_serials"): lambda inner: inner,  # uniqueness: the loader alone
    ("nodeagent.profile.checks", "_not_bool"): lambda inner: inner,  # JSON Schema never takes true for 1
}


def _closure(fn: Any) -> dict[str, Any]:
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return {}
    return {name: cell.cell_contents for name, cell in zip(code.co_freevars, fn.__closure__, strict=True)}


def _default_text(value: Any, inner: dict[str, Any]) -> Any:
    """A default as a profile would write it: ``30s`` rather than 30000000 (microseconds)."""
    if inner.get("type") != "function-before":
        return value
    fn = inner["function"]["function"]
    parse = _closure(fn).get("parse")
    if parse is quantities.parse_duration_us and isinstance(value, int):
        return quantities.format_duration_us(value)
    if (parse is quantities.parse_size or fn.__qualname__ == "_size") and isinstance(value, int) and value:
        return quantities.format_size(value)
    if fn.__qualname__ == "_percent" and isinstance(value, float):
        return f"{value:g}%"
    return value


class _ProfileSchema(GenerateJsonSchema):
    def function_before_schema(self, schema: Any) -> JsonSchemaValue:
        fn = schema["function"]["function"]
        key = (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn)))
        if key in _WRAPPING:
            return _WRAPPING[key](self.generate_inner(schema["schema"]))
        if key not in _DESCRIBE:
            raise LookupError(f"nodeagent.profile.json_schema has no JSON Schema for the validator {key[0]}.{key[1]}: "
                              "describe the values it accepts in _DESCRIBE")
        return copy.deepcopy(_DESCRIBE[key](_closure(fn)))

    def default_schema(self, schema: Any) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if "default" in out:
            out["default"] = _default_text(out["default"], schema["schema"])
        return out


def _drop_required(node: Any) -> Any:
    """``node`` without ``required`` (but an ``if`` still tests what it tests)."""
    if isinstance(node, dict):
        return {k: v if k == "if" else _drop_required(v) for k, v in node.items() if k != "required"}
    if isinstance(node, list):
        return [_drop_required(v) for v in node]
    return node


def _as_fragment(defs: dict[str, Any], root: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copies of ``root`` and its definitions in which nothing is required (definitions renamed ``*Part``)."""
    def rename(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: rename(v) for k, v in node.items()}
            ref = out.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                out["$ref"] = f"{ref}Part"
            return out
        if isinstance(node, list):
            return [rename(v) for v in node]
        return node

    part_defs = {f"{name}Part": _drop_required(rename(d)) for name, d in defs.items()}
    return part_defs, _drop_required(rename(root))


EXTENDS = {
    "description": "Profiles this one is merged onto (paths relative to this file, inside its directory tree): "
                   "maps deep-merge, lists of named items merge by name, anything else is replaced.",
    "anyOf": [{"type": "string", "minLength": 1},
              {"type": "array", "items": {"type": "string", "minLength": 1}}],
}


def profile_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a profile file as written, ``extends`` included."""
    from .model import NodeProfile

    generated = NodeProfile.model_json_schema(by_alias=True, schema_generator=_ProfileSchema)
    defs = generated.pop("$defs", {})
    generated["properties"]["extends"] = EXTENDS
    part_defs, part = _as_fragment(defs, generated)
    full = {k: v for k, v in generated.items() if k not in ("title", "description")}
    part = {k: v for k, v in part.items() if k not in ("title", "description")}
    return {
        "$schema": DIALECT,
        "title": "nodeagent NodeProfile",
        "description": generated.get("description", ""),
        # A file that extends others may leave out anything the files it extends give.
        "if": {"type": "object", "required": ["extends"]},
        "then": part,
        "else": full,
        "$defs": {**defs, **part_defs},
    }
