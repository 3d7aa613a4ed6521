"""Each way a call can break its schema is named, with the argument and what came."""

from __future__ import annotations

import pytest

from envs.messages import tool_schema
from envs.toolcall.schema import call_problem

WEATHER = tool_schema("get_weather", "Weather for a city.", {
    "city": {"type": "string"},
    "days": {"type": "integer"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "tags": {"type": "array", "items": {"type": "string"}},
    "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
              "required": ["lat"]},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
}, required=["city"])


@pytest.mark.parametrize("arguments, expected", [
    ({}, "Error: `get_weather` is missing the required argument 'city'."),
    ({"city": "Oslo", "town": "x"},
     "Error: `get_weather` has no argument 'town'; its arguments are: city, days, unit, tags, where, note."),
    ({"city": 7}, "Error: argument 'city' must be a string, got integer 7 (in a call to `get_weather`)."),
    ({"city": "Oslo", "days": "3"},
     "Error: argument 'days' must be an integer, got string '3' (in a call to `get_weather`)."),
    ({"city": "Oslo", "days": True},
     "Error: argument 'days' must be an integer, got boolean true (in a call to `get_weather`)."),
    ({"city": "Oslo", "days": 2.5},
     "Error: argument 'days' must be an integer, got number 2.5 (in a call to `get_weather`)."),
    ({"city": "Oslo", "unit": "kelvin"},
     "Error: argument 'unit' must be one of ['celsius', 'fahrenheit'], got string 'kelvin' "
     "(in a call to `get_weather`)."),
    ({"city": "Oslo", "tags": ["a", 1]},
     "Error: argument 'tags[1]' must be a string, got integer 1 (in a call to `get_weather`)."),
    ({"city": "Oslo", "where": {"lon": 3}},
     "Error: argument 'where' is missing its required key 'lat' (in a call to `get_weather`)."),
    ({"city": "Oslo", "where": {"lat": "north"}},
     "Error: argument 'where.lat' must be a number, got string 'north' (in a call to `get_weather`)."),
    ({"city": "Oslo", "note": 5},
     "Error: argument 'note' must be a string or null, got integer 5 (in a call to `get_weather`)."),
])
def test_each_problem_is_named(arguments, expected):
    assert call_problem(WEATHER, arguments) == expected


@pytest.mark.parametrize("arguments", [
    {"city": "Oslo"},
    {"city": "Oslo", "days": 3, "unit": "celsius", "tags": [], "note": None},
    {"city": "Oslo", "days": 2.0},           # JSON Schema: 2.0 is an integer
    {"city": "Oslo", "where": {"lat": 1, "lon": 2.5, "alt": 9}},  # nested extras allowed
])
def test_valid_calls_pass(arguments):
    assert call_problem(WEATHER, arguments) is None


def test_refs_defs_and_closed_objects():
    tool = {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "required": ["passengers"],
        "properties": {"passengers": {"type": "array", "items": {"$ref": "#/$defs/Passenger"}}},
        "$defs": {"Passenger": {"type": "object", "required": ["name"], "additionalProperties": False,
                                "properties": {"name": {"type": "string"}}}}}}}
    assert call_problem(tool, {"passengers": [{"name": "Ann"}]}) is None
    assert call_problem(tool, {"passengers": [{"name": 1}]}) == (
        "Error: argument 'passengers[0].name' must be a string, got integer 1 (in a call to `book`).")
    assert call_problem(tool, {"passengers": [{"name": "Ann", "age": 3}]}) == (
        "Error: argument 'passengers[0]' has no key 'age'; its keys are: name (in a call to `book`).")


def test_an_enum_of_scalars_on_an_array_constrains_its_items():
    tool = tool_schema("pick", "", {"colors": {"type": "array", "enum": ["red", "blue"],
                                               "items": {"type": "string"}}})
    assert call_problem(tool, {"colors": ["red", "blue"]}) is None
    assert "must be one of ['red', 'blue'], got string 'green'" in call_problem(tool, {"colors": ["green"]})


def test_true_is_not_one_and_long_values_are_cut():
    tool = tool_schema("f", "", {"n": {"enum": [1, 2]}, "s": {"type": "integer"}})
    assert "got boolean true" in call_problem(tool, {"n": True, "s": 1})
    shown = call_problem(tool, {"n": 1, "s": "x" * 10_000})
    assert len(shown) < 200 and shown.count("x") <= 60


def test_unknown_type_names_are_not_checked():
    tool = tool_schema("f", "", {"x": {"type": "dict"}})  # BFCL's raw type, before conversion
    assert call_problem(tool, {"x": 3}) is None


def test_a_function_without_parameters_takes_no_arguments():
    # The name is the issue's attack: BFCL's backends ran it through eval() while
    # unknown names were let through for functions of no parameters.
    attack = "__import__('os').system('id > /tmp/marker')) #"
    for parameters in ({"type": "object", "properties": {}}, None):
        tool = {"type": "function", "function": {"name": "pwd", "parameters": parameters}}
        assert call_problem(tool, {}) is None
        assert call_problem(tool, {attack: 1}) == (
            "Error: `pwd` has no argument \"__import__('os').system('id > /tmp/marker')) #\"; "
            "it takes none.")
    open_ended = tool_schema("log", "", {})
    open_ended["function"]["parameters"]["additionalProperties"] = True
    assert call_problem(open_ended, {"anything": 1}) is None
