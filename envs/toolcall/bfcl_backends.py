"""BFCL's multi-turn backends as the tool process runs them (:mod:`envs.toolcall.worker`).

:class:`BFCLBackends` holds one conversation's live backend instances, made as BFCL's
``execute_multi_turn_func_call`` makes them (the class from ``CLASS_FILE_PATH_MAPPING``,
``_load_scenario`` on a deep copy of the entry's ``initial_config`` unless the class is
stateless). A call is a method call with keyword arguments, never a string evaluated:
the method is looked up on the live instance only when it is a public method of one of
the entry's classes and a function the entry offers (:meth:`BFCLBackends.method`), every
argument name must be an identifier the method declares, and every value a plain JSON
value. Results are written as BFCL writes them (a string as it is, a dict as JSON, else
``str``; an exception as ``Error during execution: ...``).

BFCL's checker (``multi_turn_checker``) replays the executed calls from strings with
``eval``; it has no other way in. :func:`replay_text` writes those strings only from a
validated call (an offered method's name, declared identifiers, ``repr`` of plain JSON
values) and parses the result back to check it is exactly one call of that name with
those literal values before the checker sees it.
"""

from __future__ import annotations

import ast
import copy
import inspect
import itertools
import json
import keyword
import re
from typing import Any

from envs.messages import json_value_problem
from envs.toolcall import bfcl_data
from envs.toolcall.limits import clip

_names = itertools.count()


class RefusedCall(ValueError):
    """A call that may not reach a backend: the message says why."""


class BFCLBackends:
    """One conversation's backends, in the tool process."""

    def __init__(self) -> None:
        self.entry: dict[str, Any] = {}
        self.instances: dict[str, Any] = {}
        self.max_output_chars = 0

    def op_open(self, entry_id: str, max_output_chars: int) -> None:
        from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

        self.entry, self.max_output_chars = bfcl_data.entry(entry_id), max_output_chars
        long_context = "long_context" in bfcl_data.category_of(entry_id)
        self.instances = {}
        for class_name in self.entry["involved_classes"]:
            instance = backend_class(class_name)()
            if class_name not in STATELESS_CLASSES:
                config = copy.deepcopy(self.entry["initial_config"].get(class_name, {}))
                instance._load_scenario(config, long_context=long_context)
            self.instances[class_name] = instance

    def op_call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``{"ran": False, "result": why}`` for a refused call, else ``{"ran": True,
        "result": the backend's answer}``."""
        try:
            method = self.method(name, arguments)
        except RefusedCall as exc:
            return {"ran": False, "result": f"Error: {exc}"}
        try:
            result = method(**arguments)
            text = result if type(result) is str else _json_or_str(result) if type(result) is dict \
                else str(result)
        except Exception as exc:  # noqa: BLE001 - a backend's own error, as BFCL reports it
            text = f"Error during execution: {exc}"
        return {"ran": True, "result": clip(text, self.max_output_chars)}

    def method(self, name: str, arguments: dict[str, Any]) -> Any:
        """The bound method ``name`` of a live instance, after checking the call may run."""
        offered = {f["name"] for f in self.entry["function"]} | {
            f["name"] for added in self.entry.get("missed_function", {}).values() for f in added}
        for instance in self.instances.values():
            if name in offered and _is_public(name) and inspect.ismethod(getattr(instance, name, None)):
                method = getattr(instance, name)
                check_arguments(name, arguments, inspect.signature(method))
                return method
        raise RefusedCall(f"`{name}` is not a function of this conversation")

    def op_check(self, steps: list[list[list[list[Any]]]]) -> dict[str, Any]:
        """BFCL's ``multi_turn_checker`` on the executed calls: per turn, per step,
        ``[name, arguments]``."""
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

        texts = [[[replay_text(name, arguments, inspect.signature(self.method(name, arguments)))
                   for name, arguments in step] for step in turn] for turn in steps]
        name = f"clawgym_check_{next(_names)}"
        try:
            result = multi_turn_checker(texts, self.entry["ground_truth"], self.entry,
                                        bfcl_data.category_of(self.entry["id"]), name)
        finally:
            forget(name)
        return {"valid": bool(result["valid"]), "error_message": str(result.get("error_message", "")),
                "error_type": str(result.get("error_type", ""))}


def backend_class(class_name: str) -> type:
    import importlib

    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


def _is_public(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")


def _json_or_str(result: dict[str, Any]) -> str:
    try:
        return json.dumps(result)
    except (TypeError, ValueError):  # a value JSON cannot hold: BFCL falls back to str
        return str(result)


def check_arguments(name: str, arguments: dict[str, Any], signature: inspect.Signature) -> None:
    """Raise :class:`RefusedCall` unless every argument is a declared keyword parameter of
    ``signature`` holding a plain JSON value."""
    declared = {p.name for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"}
    for key, value in arguments.items():
        if not isinstance(key, str) or not _is_public(key) or key not in declared:
            raise RefusedCall(f"`{name}` has no argument {key!r:.60}; its arguments are: "
                              f"{', '.join(sorted(declared)) or 'none'}")
        problem = json_value_problem(value)
        if problem:
            raise RefusedCall(f"argument {key!r} of `{name}` is not plain JSON: {problem}")


def replay_text(name: str, arguments: dict[str, Any], signature: inspect.Signature) -> str:
    """``name(k=repr(v), ...)`` for BFCL's checker, from a call :func:`check_arguments`
    accepts; raises :class:`RefusedCall` for any other, or if the text does not parse back
    to exactly that call."""
    if not _is_public(name):
        raise RefusedCall(f"{name!r:.60} is not a function name")
    check_arguments(name, arguments, signature)
    text = f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
    call = ast.parse(text, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == name
            and not call.args and [k.arg for k in call.keywords] == list(arguments)
            and all(_same(ast.literal_eval(k.value), arguments[k.arg]) for k in call.keywords)):
        raise RefusedCall(f"the call of `{name}` does not read back as written")
    return text


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # NaN, which equals nothing, is refused before


def forget(name: str) -> None:
    """Delete the backend instances BFCL cached for ``name`` in its module namespace."""
    bfcl_data.bfcl_utils()
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    namespace = vars(multi_turn_utils)
    prefix = re.sub(r"[-./:]", "_", name) + "_"
    for key in [k for k in list(namespace) if k.startswith(prefix)]:
        namespace.pop(key, None)
