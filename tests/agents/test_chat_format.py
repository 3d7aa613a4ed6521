"""Messages -> template-safe text: tool calls as <tool_call> text, parts joined, tools described."""

from __future__ import annotations

import copy
import json

import pytest

from agents.chat_format import TOOL_INSTRUCTIONS, describe_tools, plain_messages, render_prompt, template_handles_tools
from agents.model_cache import resolve_model_dir
from envs.messages import parse_text_action, tool_schema

GUESS = tool_schema("guess", "Guess the secret number.", {"number": {"type": "integer"}})
SEARCH = tool_schema("search", "Search the web.", {"query": {"type": "string"}, "limit": {"type": "integer"}})


def _call(name: str, arguments: str, call_id: str = "call_0") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_tool_calls_become_tool_call_text_after_the_content():
    messages = [{"role": "assistant", "content": "Trying 50.", "tool_calls": [_call("guess", '{"number": 50}')]}]
    out = plain_messages(messages, None)
    assert out == [{"role": "assistant",
                    "content": 'Trying 50.\n<tool_call>{"name": "guess", "arguments": {"number": 50}}</tool_call>'}]


def test_tool_call_text_round_trips_through_the_parser():
    calls = [_call("guess", '{"number": 50}', "call_0"), _call("search", '{"query": "eggs", "limit": 2}', "call_1")]
    out = plain_messages([{"role": "assistant", "content": None, "tool_calls": calls}], None)
    text = out[0]["content"]
    assert text.count("<tool_call>") == 2 and not text.startswith("\n")
    parsed = parse_text_action(text)
    assert [c["function"]["name"] for c in parsed["tool_calls"]] == ["guess", "search"]
    assert [json.loads(c["function"]["arguments"]) for c in parsed["tool_calls"]] == \
        [{"number": 50}, {"query": "eggs", "limit": 2}]


def test_unparseable_arguments_are_kept_as_the_raw_string():
    out = plain_messages([{"role": "assistant", "content": "", "tool_calls": [_call("guess", "{fifty")]}], None)
    assert out[0]["content"] == '<tool_call>{"name": "guess", "arguments": "{fifty"}</tool_call>'


def test_content_parts_are_joined_and_tool_messages_keep_their_role():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Look at "},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                                     {"type": "text", "text": "this screen."}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "higher"},
    ]
    assert plain_messages(messages, None) == [{"role": "user", "content": "Look at this screen."},
                                              {"role": "tool", "content": "higher"}]


def test_tools_are_described_in_the_existing_system_message():
    messages = [{"role": "system", "content": "You play a game."}, {"role": "user", "content": "Go."}]
    out = plain_messages(messages, [GUESS, SEARCH])
    assert len(out) == 2
    system = out[0]["content"]
    assert system.startswith("You play a game.\n\nYou can call these tools.")
    assert "- guess(number: integer): Guess the secret number." in system
    assert "- search(query: string, limit: integer): Search the web." in system
    assert '<tool_call>{"name": "guess", "arguments": {"number": 1}}</tool_call>' in system
    assert out[1] == {"role": "user", "content": "Go."}


def test_the_example_call_is_a_valid_call_of_the_first_tool():
    schema = tool_schema("convert", "Convert units.",
                         {"value": {"type": "number"}, "unit": {"type": "string", "enum": ["km", "mi"]},
                          "precision": {"type": "integer", "default": 2}}, required=["value", "unit"])
    text = describe_tools([schema, GUESS])
    example = text.split("for example\n", 1)[1].split("\n", 1)[0]
    parsed = parse_text_action(example)["tool_calls"]
    assert [c["function"]["name"] for c in parsed] == ["convert"]
    assert json.loads(parsed[0]["function"]["arguments"]) == {"value": 1.5, "unit": "km"}
    assert "<arguments as JSON>" not in text and "<tool name>" not in text


def test_arguments_show_whether_required_their_allowed_values_description_and_default():
    schema = tool_schema("convert", "Convert units.",
                         {"value": {"type": "number", "description": "the amount"},
                          "unit": {"type": "string", "enum": ["km", "mi"]},
                          "tags": {"type": "array", "items": {"type": "string"}},
                          "precision": {"type": "integer", "default": 2}}, required=["value", "unit"])
    lines = describe_tools([schema]).split("Tools:\n", 1)[1].splitlines()
    assert lines == ['- convert(value: number, unit: "km"|"mi", tags?: array of string, precision?: integer): '
                     "Convert units.",
                     "    value: the amount",
                     "    precision: default 2"]


def test_a_system_message_is_added_when_there_is_none():
    out = plain_messages([{"role": "user", "content": "Go."}], [GUESS])
    assert out[0] == {"role": "system", "content": describe_tools([GUESS])}
    assert out[1] == {"role": "user", "content": "Go."}


def test_no_tools_and_native_tools_leave_the_system_prompt_alone():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert plain_messages(messages, None) == messages
    assert plain_messages(messages, []) == messages
    assert plain_messages(messages, [GUESS], native_tools=True) == messages


def test_describe_tools_without_parameters():
    schema = {"type": "function", "function": {"name": "ping"}}
    assert describe_tools([schema]) == TOOL_INSTRUCTIONS.format(
        example='<tool_call>{"name": "ping", "arguments": {}}</tool_call>', tools="- ping():")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_dir("default"))


def test_render_prompt_ends_with_the_assistant_generation_prompt(tokenizer):
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}]
    text = render_prompt(tokenizer, messages, None)
    assert text.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>system\nYou are terse.<|im_end|>" in text
    assert "<|im_start|>user\nHi there<|im_end|>" in text


def test_render_prompt_with_tools_and_a_tool_call_history(tokenizer):
    assert not template_handles_tools(tokenizer)  # SmolLM2's template ignores `tools`
    messages = [{"role": "user", "content": "Find it."},
                {"role": "assistant", "content": None, "tool_calls": [_call("guess", '{"number": 50}')]},
                {"role": "tool", "tool_call_id": "call_0", "content": "lower"}]
    text = render_prompt(tokenizer, messages, [GUESS])
    assert text.startswith("<|im_start|>system\nYou can call these tools.")
    call = '<tool_call>{"name": "guess", "arguments": {"number": 50}}</tool_call>'
    assert f"<|im_start|>assistant\n{call}<|im_end|>" in text
    assert "<|im_start|>tool\nlower<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_a_template_that_handles_tools_gets_them_natively(tokenizer):
    native = copy.deepcopy(tokenizer)
    native.chat_template = ("{% for t in tools %}TOOL:{{ t.function.name }}\n{% endfor %}"
                            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                            "{% if add_generation_prompt %}assistant:{% endif %}")
    assert template_handles_tools(native)
    text = render_prompt(native, [{"role": "user", "content": "Go."}], [GUESS])
    assert text == "TOOL:guess\nuser: Go.\nassistant:"  # no tool description injected as a system message
