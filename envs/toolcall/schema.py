"""Is a tool call's ``arguments`` object what its OpenAI function schema asks for?

:func:`call_problem` answers with one sentence naming the first thing wrong, or None.
It checks the part of JSON Schema that function tools use:

- a **missing required argument**, and an **unknown argument** (a top-level name the
  schema does not list, also when it lists none, unless it allows ``additionalProperties``
  explicitly; nested objects are refused extra keys only when they say
  ``additionalProperties: false``);
- the **type** (``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``,
  ``null`` or a list of them). Integers are numbers; ``true`` is neither. As in JSON
  Schema, ``2.0`` is an integer;
- **enum** and **const** values (``true`` never equals ``1``); an enum of scalars on an
  array (BFCL's docs have these) constrains the array's items;
- ``items``, ``properties``, ``required`` at any depth; ``anyOf``/``oneOf`` (any branch
  fits), ``allOf`` (every branch fits) and local ``$ref`` (``#/$defs/...``).

Bounds, patterns and formats are left to the tool itself: it answers a bad value with
its own error, which the agent sees as the tool's result. A type name outside JSON
Schema (BFCL's raw ``dict``, ``float``, ``tuple`` before conversion) is not checked.
"""

from __future__ import annotations

import json
import math
from typing import Any

JSON_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")
_ARTICLE = {"string": "a string", "integer": "an integer", "number": "a number",
            "boolean": "a boolean", "array": "an array", "object": "an object", "null": "null"}
_MAX_SHOWN = 60


def call_problem(tool: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``tool`` (an OpenAI function-tool schema); None if they do.

    The sentence names the function and the argument (``'passengers[0].dob'`` when
    nested), says what was expected and what came, e.g. ``Error: `get_weather` is
    missing the required argument 'city'.``
    """
    fn = tool["function"]
    name = fn["name"]
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    properties = params.get("properties") or {}
    for required in params.get("required") or []:
        if required not in arguments:
            return f"Error: `{name}` is missing the required argument {required!r}."
    if params.get("additionalProperties") in (None, False):  # a function of no parameters too
        for key in arguments:
            if key not in properties:
                listed = f"its arguments are: {', '.join(properties)}" if properties else "it takes none"
                return f"Error: `{name}` has no argument {_shown(key)}; {listed}."
    for key, value in arguments.items():
        if key in properties:
            problem = _value_problem(properties[key], value, key, params)
            if problem:
                return f"Error: argument {problem} (in a call to `{name}`)."
    return None


def _value_problem(schema: Any, value: Any, path: str, root: dict[str, Any]) -> str | None:
    """``"'path' must be ..., got ..."`` for the first mismatch under ``schema``; else None."""
    if not isinstance(schema, dict):
        return None
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            problems = [_value_problem(branch, value, path, root) for branch in schema[key]]
            if all(problems):
                forms = " or ".join(_describe(_resolve(b, root)) for b in schema[key]
                                    if isinstance(b, dict))
                return f"{path!r} must be {forms}, got {_got(value)}"
    for branch in schema.get("allOf") or []:
        problem = _value_problem(branch, value, path, root)
        if problem:
            return problem
    if "const" in schema and not _json_equal(schema["const"], value):
        return f"{path!r} must be {_shown(schema['const'])}, got {_got(value)}"
    enum = schema.get("enum")
    if isinstance(enum, list) and isinstance(value, list) and _types(schema) == ["array"] \
            and not any(isinstance(option, list) for option in enum):
        # An enum of scalars on an array (BFCL writes these) constrains its items.
        schema = {**{k: v for k, v in schema.items() if k != "enum"},
                  "items": {**(schema.get("items") or {}), "enum": enum}}
    elif isinstance(enum, list) and not any(_json_equal(option, value) for option in enum):
        options = [_shown(o) for o in enum[:20]]
        more = ", ..." if len(enum) > 20 else ""
        return f"{path!r} must be one of [{', '.join(options)}{more}], got {_got(value)}"
    types = _types(schema)
    if types and not any(_is_type(value, t) for t in types):
        wanted = " or ".join(_ARTICLE[t] for t in types)
        return f"{path!r} must be {wanted}, got {_got(value)}"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problem = _value_problem(schema["items"], item, f"{path}[{i}]", root)
            if problem:
                return problem
    if isinstance(value, dict):
        return _object_problem(schema, value, path, root)
    return None


def _object_problem(schema: dict[str, Any], value: dict[str, Any], path: str,
                    root: dict[str, Any]) -> str | None:
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for required in schema.get("required") or []:
        if isinstance(required, str) and required not in value:
            return f"{path!r} is missing its required key {required!r}"
    if schema.get("additionalProperties") is False:
        for key in value:
            if key not in properties:
                return f"{path!r} has no key {_shown(key)}; its keys are: {', '.join(properties) or 'none'}"
    for key, item in value.items():
        if key in properties:
            problem = _value_problem(properties[key], item, f"{path}.{key}", root)
            if problem:
                return problem
    return None


def _resolve(schema: dict[str, Any], root: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/$defs/Name``); an unresolvable one checks nothing."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or depth > 20:
        return schema
    target: Any = root
    if not ref.startswith("#/"):
        return {}
    for part in ref[2:].split("/"):
        if not isinstance(target, dict) or part not in target:
            return {}
        target = target[part]
    if not isinstance(target, dict):
        return {}
    merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return _resolve(merged, root, depth + 1)


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    known = [k for k in kinds if k in JSON_TYPES]
    return known if len(known) == len(kinds) else []  # an unknown type name: not checked


def _is_type(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return value is None


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON means it: ``true != 1``, ``1 == 1.0``, containers element-wise."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if type(a) in (int, float) and type(b) in (int, float):
        return a == b
    return type(a) is type(b) and a == b


def _describe(schema: dict[str, Any]) -> str:
    if "const" in schema:
        return _shown(schema["const"])
    if isinstance(schema.get("enum"), list):
        return "one of [" + ", ".join(_shown(o) for o in schema["enum"][:10]) + "]"
    types = _types(schema)
    return " or ".join(_ARTICLE[t] for t in types) if types else "a value of another form"


def _got(value: Any) -> str:
    kind = ("boolean" if isinstance(value, bool) else "integer" if isinstance(value, int)
            else "number" if isinstance(value, float) else "string" if isinstance(value, str)
            else "array" if isinstance(value, list) else "object" if isinstance(value, dict)
            else "null")
    return f"{kind} {_shown(value)}" if kind != "null" else "null"


def _shown(value: Any) -> str:
    """A JSON rendering of ``value``, cut short: feedback must not echo a megabyte."""
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
