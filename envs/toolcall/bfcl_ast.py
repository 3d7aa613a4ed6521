"""BFCL's AST checker: do the agent's calls match a question's possible answers?

A re-implementation of ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` (bfcl-eval
2026.3.23), rule for rule: the wheel's module imports BFCL's whole model registry (every
API client) just to ask one model setting, so it cannot be imported without those
dependencies. That setting is fixed here to what BFCL uses for OpenAI-style function
calling (``underscore_to_dot``: the agent calls ``math_factorial`` for ``math.factorial``,
as :func:`envs.toolcall.bfcl_data.tool_name` offers it). The test suite runs the wheel's
own checker (its source, with that one import replaced) beside this one on every
ground-truth answer and on mutated calls, and requires the same verdict on each.

BFCL's rules, as the leaderboard applies them:

- ``possible_answer`` maps each parameter to a list of acceptable values; ``""`` in the
  list marks the parameter optional. Unknown parameters, missing required ones, and
  missing ones whose list lacks ``""`` fail.
- Types follow the function doc (``integer``, ``float``, ``string``, ``boolean``,
  ``array``, ``tuple``, ``dict``, ``any``); an int is accepted for a ``float`` parameter
  (Python only), a value whose type matches the possible answers' is accepted as a
  "variable". Arrays are checked one level deep.
- Strings compare case-insensitively with spaces and ``,./-_*^`` removed; lists and dicts
  compare element-wise with the same normalisation of their strings.
- ``parallel`` categories match calls to answers in any order, one to one;
  ``multiple`` and ``simple`` categories expect exactly one call.
- Java and JavaScript values arrive as source text and are converted with the wheel's own
  ``java_type_converter`` / ``js_type_converter``.

One deviation: a Java or JavaScript value longer than :data:`MAX_SOURCE_CHARS` fails
(``type_error:java``/``js``) without being converted. BFCL's HashMap converter
backtracks on such text (4,000 characters of unclosed ``put("a",`` took 4.3 s of CPU,
10,000 took 29 s), and scoring runs in the env's own process; the longest acceptable
value in BFCL's Java and JavaScript answers is 160 characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from bfcl_eval.constants.enums import Language
from bfcl_eval.constants.type_mappings import JAVA_TYPE_CONVERSION, JS_TYPE_CONVERSION
from bfcl_eval.eval_checker.ast_eval.type_convertor.java_type_converter import java_type_converter
from bfcl_eval.eval_checker.ast_eval.type_convertor.js_type_converter import js_type_converter

PYTHON_TYPE_MAPPING: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list,
    "tuple": list, "dict": dict, "any": str,
}
_NESTED_PYTHON = ("array", "tuple")
_NESTED_CONVERTED = ("Array", "ArrayList", "array")
MAX_SOURCE_CHARS = 1_000
"""Longest Java/JavaScript source text converted (BFCL's converters backtrack on long text)."""
_STRIP = re.compile(r"[ \,\.\/\-\_\*\^]")

Call = dict[str, dict[str, Any]]
"""One decoded call as BFCL writes it: ``{function_name: {param: value}}``."""


@dataclass(frozen=True)
class Verdict:
    valid: bool
    errors: tuple[str, ...] = ()
    error_type: str = ""

    @property
    def message(self) -> str:
        return "; ".join(self.errors)


_OK = Verdict(True)


def _fail(error_type: str, *errors: str) -> Verdict:
    return Verdict(False, tuple(errors), error_type)


def language_of(category: str) -> Language:
    if "java" in category and "javascript" not in category:
        return Language.JAVA
    if "javascript" in category:
        return Language.JAVASCRIPT
    return Language.PYTHON


def check(functions: list[dict[str, Any]], calls: list[Call], possible_answer: list[Call],
          category: str) -> Verdict:
    """BFCL's ``ast_checker`` for one question: ``functions`` are its (BFCL-format)
    function docs, ``calls`` the agent's decoded calls, ``possible_answer`` its ground truth."""
    language = language_of(category)
    if "parallel" in category:
        return _parallel_no_order(functions, calls, possible_answer, language)
    if "multiple" in category:
        if len(calls) != len(possible_answer):
            return _fail("multiple_function_checker:wrong_count", "Wrong number of functions.")
        expected = next(iter(possible_answer[0]))
        return _simple(_find(functions, expected), calls[0], possible_answer[0], language)
    if len(calls) != 1:
        return _fail("simple_function_checker:wrong_count", "Wrong number of functions.")
    return _simple(functions[0], calls[0], possible_answer[0], language)


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in functions if f["name"] == name), None)


def _parallel_no_order(functions: list[dict[str, Any]], calls: list[Call],
                       possible_answers: list[Call], language: Language) -> Verdict:
    if len(calls) != len(possible_answers):
        return _fail("parallel_function_checker_no_order:wrong_count", "Wrong number of functions.")
    matched: list[int] = []
    for i, answer in enumerate(possible_answers):
        description = _find(functions, next(iter(answer)))
        result = _fail("parallel_function_checker_no_order:cannot_find_match")
        for index, call in enumerate(calls):
            if index in matched:
                continue
            result = _simple(description, call, answer, language)
            if result.valid:
                matched.append(index)
                break
        if not result.valid:
            left = [j for j in range(len(calls)) if j not in matched]
            return _fail("parallel_function_checker_no_order:cannot_find_match",
                         f"Could not find a matching function among index {left} of model "
                         f"output for index {i} of possible answers.")
    return _OK


def _simple(description: dict[str, Any] | None, call: Call, answer: Call,
            language: Language) -> Verdict:
    """BFCL's ``simple_function_checker``."""
    if description is None:  # BFCL indexes None here and raises; the answer names no doc
        return _fail("simple_function_checker:wrong_func_name", "No function doc for the answer.")
    possible = next(iter(answer.values()))
    name = description["name"].replace(".", "_")  # convert_func_name with underscore_to_dot
    details = description["parameters"]["properties"]
    if name not in call:
        return _fail("simple_function_checker:wrong_func_name",
                     f"Function name {name!r} not found in model output.")
    params = call[name]
    for required in description["parameters"]["required"]:
        if required not in params:
            return _fail("simple_function_checker:missing_required",
                         f"Missing required parameter: {required!r}.")
    for param, value in params.items():
        if param not in details or param not in possible:
            return _fail("simple_function_checker:unexpected_param", f"Unexpected parameter: {param!r}.")
        verdict = check_parameter(param, value, details[param], possible[param], language)
        if not verdict.valid:
            return verdict
    for param in possible:
        if param not in params and "" not in possible[param]:
            return _fail("simple_function_checker:missing_optional",
                         f"Optional parameter {param!r} not provided and not marked as optional.")
    return _OK


def check_parameter(param: str, value: Any, detail: dict[str, Any], possible: list[Any],
               language: Language) -> Verdict:
    type_name = detail["type"]
    nested: type | None = None
    if language is Language.PYTHON:
        expected = PYTHON_TYPE_MAPPING[type_name]
        if type_name in _NESTED_PYTHON:
            nested = PYTHON_TYPE_MAPPING[detail["items"]["type"]]
    else:
        table = JAVA_TYPE_CONVERSION if language is Language.JAVA else JS_TYPE_CONVERSION
        convert = java_type_converter if language is Language.JAVA else js_type_converter
        expected = table[type_name]
        tag = "java" if language is Language.JAVA else "js"
        if type(value) != str:
            return _fail(f"type_error:{tag}", f"Incorrect type for parameter {param!r}. Expected type "
                         f"String, got {type(value).__name__}. Parameter value: {value!r}.")
        if len(value) > MAX_SOURCE_CHARS:
            return _fail(f"type_error:{tag}", f"Parameter {param!r} is {len(value):,} characters of "
                         f"source text; clawgym reads at most {MAX_SOURCE_CHARS:,}.")
        if type_name in _NESTED_CONVERTED:
            nested = table[detail["items"]["type"]]
            value = convert(value, type_name, detail["items"]["type"])
        else:
            value = convert(value, type_name)
    if type_name == "tuple" and type(value) == tuple:
        value = list(value)
    if language is Language.PYTHON and type_name == "float" and type(value) == int:
        value = float(value)
    typed = _type_check(param, value, possible, type_name, expected, nested)
    if not typed.valid:
        return typed.verdict
    if not typed.is_variable:
        if expected == dict:
            return _dict(param, value, possible)
        if expected == list and nested == dict:
            return _list_of_dicts(value, possible)
        if expected == str:
            return _string(param, value, possible)
        if expected == list:
            return _list(param, value, possible)
    if value not in possible:
        return _fail("value_error:others", f"Invalid value for parameter {param!r}: {value!r}. "
                     f"Expected one of {possible}.")
    return _OK


@dataclass
class _Typed:
    valid: bool
    is_variable: bool = False
    verdict: Verdict = field(default_factory=lambda: _OK)


def _answer_type(possible: list[Any]) -> type | None:
    return next((type(a) for a in possible if a != ""), None)


def _type_check(param: str, value: Any, possible: list[Any], type_name: str, expected: type,
                nested: type | None) -> _Typed:
    """BFCL's ``type_checker``, including its quirks (one level of nesting; a value typed
    like the possible answers counts as a "variable")."""
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type != expected
    nested_failed = False
    if type(value) == expected:
        if nested is None:
            return _Typed(True, is_variable)
        for item in possible:
            ok = True
            if type(item) == list:
                for element in value:
                    if not _type_check(param, element, item, str(nested), nested, None).valid:
                        ok = False
                        break
            if ok:
                return _Typed(True, is_variable)
        nested_failed = True
    nested_error = (f"Nested type checking failed for parameter {param!r}. Expected outer type "
                    f"{type_name} with inner type {nested}. Parameter value: {value!r}.")
    if answer_type is not None and type(value) == answer_type:
        # BFCL returns its result here as it stands: still failed after a nested failure.
        if nested_failed:
            return _Typed(False, True, _fail("type_error:nested", nested_error))
        return _Typed(True, True)
    errors = [nested_error] if nested_failed else []
    errors.append(f"Incorrect type for parameter {param!r}. Expected type {type_name}, got "
                  f"{type(value).__name__}. Parameter value: {value!r}.")
    return _Typed(False, verdict=_fail("type_error:simple", *errors))


def standardize(text: str) -> str:
    """BFCL's ``standardize_string``: no spaces or ``,./-_*^``, lower case, ``'`` -> ``"``."""
    return _STRIP.sub("", text).lower().replace("'", '"')


def _string(param: str, value: str, possible: list[Any]) -> Verdict:
    if standardize(value) not in [standardize(p) for p in possible if type(p) == str]:
        return _fail("value_error:string", f"Invalid value for parameter {param!r}: {value!r}. "
                     f"Expected one of {possible}. Case insensitive.")
    return _OK


def _norm(item: Any) -> Any:
    return standardize(item) if type(item) == str else item


def _list(param: str, value: list[Any], possible: list[Any]) -> Verdict:
    if [_norm(v) for v in value] not in [[_norm(x) for x in option] for option in possible]:
        return _fail("value_error:list/tuple", f"Invalid value for parameter {param!r}: {value!r}. "
                     f"Expected one of {possible}.")
    return _OK


def _dict(param: str, value: dict[str, Any], possibles: list[Any]) -> Verdict:
    """BFCL's ``dict_checker``: one flat dict against each acceptable dict in turn."""
    result = _fail("dict_checker:unclear")
    for possible in possibles:
        if possible == "":
            continue
        result = _one_dict(value, possible)
        if result.valid:
            return _OK
    return result


def _one_dict(value: dict[str, Any], possible: dict[str, list[Any]]) -> Verdict:
    for key, item in value.items():
        if key not in possible:
            return _fail("value_error:dict_key", f"Unexpected dict key parameter: '{key}'.")
        options = [_norm(o) for o in possible[key]]
        if _norm(item) not in options:
            return _fail("value_error:dict_value", f"Invalid value for parameter {key!r}: {item!r}. "
                         f"Expected one of {options}.")
    for key, options in possible.items():
        if key not in value and "" not in options:
            return _fail("value_error:dict_key", f"Missing dict key parameter: '{key}'.")
    return _OK


def _list_of_dicts(value: list[Any], possibles: list[Any]) -> Verdict:
    """BFCL's ``list_dict_checker``: dicts in order, against each acceptable list in turn."""
    result = _fail("list_dict_checker:unclear")
    for possible in possibles:
        if len(value) != len(possible):
            result = _fail("value_error:list_dict_count", "Wrong number of dictionaries in the list.")
            continue
        for item, option in zip(value, possible):
            result = _dict("", item, [option])
            if not result.valid:
                break
        else:
            return _OK
    return result
