"""The personal-chat env: preference checkers, the simulated users, data files, the contract."""

from __future__ import annotations

import json
import pickle
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import envs
from envs.chat import PREFERENCE_KINDS, CatalogError, PersonalChatEnv, build_preference
from envs.chat.catalog import PERSONAS_DIR, Persona, Request, load_personas, load_requests
from envs.chat.preferences import OnTopic, PreferenceSpecError
from envs.chat.text import sentences, words
from envs.chat.user import DEFAULT_PRAISE
from tests.helpers import chat_completions_server, cpu_growth

# ---- preference checkers ----------------------------------------------------------------
CASES = [
    # kind, params, response, met
    ("max_sentences", {"n": 2}, "Boil it for six minutes. Then cool it.", True),
    ("max_sentences", {"n": 2}, "One. Two. Three.", False),
    ("max_sentences", {"n": 2}, "Water boils at 100.5 degrees. Done!", True),  # "100.5" stays
    ("max_sentences", {"n": 2}, "Really?! Yes... it is. Fine", False),  # ?! and ... end sentences
    ("max_sentences", {"n": 2}, "First line\nSecond line\nThird line", False),  # line breaks split
    ("max_sentences", {"n": 1}, "-\n\nShort answer here.\n---", True),  # bare markers ignored
    ("max_sentences", {"n": 1}, "", True),
    ("max_words", {"n": 5}, "- one two three four five", True),  # the bullet is not a word
    ("max_words", {"n": 5}, "one two three four five six", False),
    ("no_emoji", {}, "Have a great day 😊", False),
    ("no_emoji", {}, "Sunny ☀️ all week", False),
    ("no_emoji", {}, "Done ✅", False),
    ("no_emoji", {}, "Flags 🇫🇷 too", False),
    ("no_emoji", {}, "Glad to help :)", False),
    ("no_emoji", {}, "Love it <3", False),
    ("no_emoji", {}, "Go left → then right. © 2024. x<3 and f(x) = y", True),
    ("no_emoji", {}, "Note: (see below) and 3:30 pm", True),
    ("no_exclamation", {}, "Calm answer.", True),
    ("no_exclamation", {}, "Great question!", False),
    ("no_apology", {}, "Here is the answer.", True),
    ("no_apology", {}, "Sorry, I can't.", False),
    ("no_apology", {}, "I apologise for the delay.", False),
    ("no_apology", {}, "My Apologies.", False),
    ("formal", {}, "It is ready. Do not worry. Sam's car is fine.", True),  # possessive passes
    ("formal", {}, "Don't worry about it.", False),
    ("formal", {}, "It's ready.", False),
    ("formal", {}, "You’re right.", False),  # curly apostrophe
    ("formal", {}, "I'll check and we'd know.", False),
    ("formal", {}, "Let's go.", False),
    ("formal", {}, "O'Malley's pub opens at ten o'clock.", True),
    ("no_filler", {}, "Boil it for six minutes.", True),
    ("no_filler", {}, "Boil it. I hope this helps!", False),
    ("no_filler", {}, "Let me know if you need more.", False),
    ("no_filler", {"phrases": ["as an ai"]}, "As an AI, I think so.", False),
    ("lowercase_only", {}, "sure, boil it for six minutes.", True),
    ("lowercase_only", {}, "Sure, boil it.", False),
    ("call_me", {"name": "Sam"}, "Sure, Sam. Boil it.", True),
    ("call_me", {"name": "Sam"}, "Hi Sam! Boil it.", True),
    ("call_me", {"name": "Sam"}, "Sam's egg is ready.", True),
    ("call_me", {"name": "Sam"}, "Hi Samantha, boil it.", False),
    ("call_me", {"name": "Sam"}, "hi sam, boil it.", False),  # the name is case-sensitive
    ("call_me", {"name": "Sam", "within": 3}, "Boil the egg for six minutes, Sam.", False),
    ("call_me", {"name": "Dr. Lee"}, "Good morning, Dr. Lee. Here you go.", True),
    ("starts_with", {"phrase": "Sure"}, "  Sure, here it is.", True),
    ("starts_with", {"phrase": "Sure"}, "sure! here it is.", True),
    ("starts_with", {"phrase": "Sure"}, "Surely this works.", False),
    ("starts_with", {"phrase": "Sure"}, "Okay, sure.", False),
    ("ends_with_question", {}, "Boil it. Want a recipe?", True),
    ("ends_with_question", {}, "Boil it. **Want a recipe?**\n", True),
    ("ends_with_question", {}, "Want a recipe? Boil it.", False),
    ("sign_off", {"name": "Ava"}, "Boil it.\n\n— Ava", True),
    ("sign_off", {"name": "Ava"}, "Boil it.\nBest, Ava.", True),
    ("sign_off", {"name": "Ava"}, "Boil it. Ava", True),
    ("sign_off", {"name": "Ava"}, "Boil it.\n— Java", False),
    ("sign_off", {"name": "Ava"}, "— Ava\nBoil it.", False),
    ("bullet_points", {}, "Pack:\n- boots\n- jacket", True),
    ("bullet_points", {}, "Pack:\n* boots\n• jacket", True),
    ("bullet_points", {}, "Pack:\n- boots", False),
    ("bullet_points", {}, "**Boots** and\n**jacket**", False),  # bold is not a bullet
    ("numbered_steps", {}, "1. Boil water.\n2. Add the egg.\n3) Wait.", True),
    ("numbered_steps", {}, "1. Boil water.", False),
    ("numbered_steps", {}, "1. Boil water.\n3. Add the egg.", False),  # must count 1, 2, ...
    ("numbered_steps", {}, "2. Boil water.\n3. Add the egg.", False),
    ("no_lists", {}, "Boil the water, then add the egg.", True),
    ("no_lists", {}, "Steps:\n1. Boil water.", False),
    ("no_lists", {}, "Pack:\n- boots", False),
    ("no_lists", {}, "It costs -5 dollars? No: 5 - 3 = 2.", True),  # a dash mid-line is no list
    ("no_markdown", {}, "Plain answer, 2 * 3 = 6.", True),
    ("no_markdown", {}, "**Bold** answer.", False),
    ("no_markdown", {}, "## Heading\nText", False),
    ("no_markdown", {}, "Run `ls`.", False),
    ("no_markdown", {}, "Tag it #1 on the list.", True),  # a hash mid-line is no heading
    ("include_tldr", {}, "Long answer.\n\nTL;DR: boil it six minutes.", True),
    ("include_tldr", {}, "**TLDR** - boil it.", True),
    ("include_tldr", {}, "tl;dr: boil it.", True),
    ("include_tldr", {}, "No summary here. TL;DR", False),
    ("metric_units", {}, "It is 5 km and 20 °C; pack 2 kg and 1.5 litres.", True),
    ("metric_units", {}, "No units at all.", True),
    ("metric_units", {}, "It is 3 miles away.", False),
    ("metric_units", {}, "Bake at 350°F.", False),
    ("metric_units", {}, "Bake at 350F.", False),
    ("metric_units", {}, "About 6 feet tall.", False),
    ("metric_units", {}, "A 10-pound bag.", False),
    ("metric_units", {}, "Add 8 oz of milk.", False),
    ("metric_units", {}, "Stand on your feet and lift with your legs.", True),  # body part
    ("metric_units", {}, "A milestone in your yard.", True),
    ("metric_units", {}, "Cut it .5 ft shorter.", False),  # a number may start with its point
    ("metric_units", {}, "Buy eggs,3 pounds of flour.", False),  # ...or right after a comma
    ("metric_units", {}, "Version 1.2.3 is out.", True),
    ("include_tldr", {}, "\n\n  \n  TL;DR: boil it.", True),  # blank lines before it
    ("include_tldr", {}, "TL;DR:\n\nboil it.", True),  # the summary may start below
]


@pytest.mark.parametrize("kind, params, response, met", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_preference_checker(kind: str, params: dict[str, Any], response: str, met: bool) -> None:
    assert build_preference(kind, params).check(response) is met


@pytest.mark.parametrize("make", [lambda n: "\n" * n, lambda n: " \n" * (n // 2), lambda n: "1." * (n // 2),
                                  lambda n: "1," * (n // 2), lambda n: "```" + " " * n],
                         ids=["newlines", "blank-lines", "dotted-digits", "comma-digits", "fence"])
def test_every_check_is_linear_in_the_reply(make: Callable[[int], str]) -> None:
    # At 100,000 characters each of these took minutes with the checks' first regexes (quadratic backtracking).
    checks = [build_preference(kind) for kind in PREFERENCE_KINDS]
    checks.append(OnTopic(keywords=("boil",), topic="eggs"))
    assert cpu_growth(lambda reply: [check.check(reply) for check in checks], make, 1_000) < 4 * 16


def test_every_kind_has_cases_and_corrections() -> None:
    assert len(PREFERENCE_KINDS) >= 12
    assert {c[0] for c in CASES} == set(PREFERENCE_KINDS)
    for kind in PREFERENCE_KINDS:
        pref = build_preference(kind)
        assert len(set(pref.corrections)) >= 2 and pref.describe()
        assert {c[3] for c in CASES if c[0] == kind} == {True, False}, kind


def test_sentence_and_word_counting() -> None:
    assert sentences("Hi there. How are you? Fine!") == ["Hi there.", "How are you?", "Fine!"]
    assert sentences('He said "stop." Then left.') == ['He said "stop.', "Then left."]
    assert sentences("  \n\n ") == []
    assert words("- a -- b — c 3") == ["a", "b", "c", "3"]


def test_on_topic_needs_words_and_a_keyword() -> None:
    check = OnTopic(keywords=("egg", "boil"), topic="eggs").check
    assert check("Eggs need six minutes.") and check("Boiling takes time.")
    assert not check("Leggings are comfy.")  # a keyword must start a word
    assert not check("") and not check("  ...  ")
    assert OnTopic().check("anything at all") and not OnTopic().check("")


@pytest.mark.parametrize("kind, params, fragment", [
    ("nope", {}, "kind 'nope' is unknown; known:"),
    ("max_sentences", {"n": 0}, "params.n must be a positive integer"),
    ("max_sentences", {"n": "2"}, "params.n must be a positive integer"),
    ("max_sentences", {"m": 2}, "params.m is not a parameter of 'max_sentences'"),
    ("call_me", {"name": ""}, "params.name must be a non-empty string"),
])
def test_bad_preference_spec_names_the_field(kind: str, params: dict[str, Any],
                                             fragment: str) -> None:
    with pytest.raises(PreferenceSpecError, match=fragment.replace("(", r"\(")):
        build_preference(kind, params)


# ---- data files ---------------------------------------------------------------------------
def test_shipped_data_loads() -> None:
    personas = load_personas()
    assert len(personas) >= 6 and {"student", "teacher"} <= set(personas)
    assert {p.stem for p in PERSONAS_DIR.glob("*.yaml")} == set(personas)
    for persona in personas.values():
        assert persona.preferences and persona.description
    requests = load_requests()
    assert len(requests) >= 120
    assert all(r.keywords and r.topic for r in requests)
    assert any("units" in r.tags for r in requests)


def test_splits_are_disjoint_and_about_a_quarter_heldout() -> None:
    train = set(PersonalChatEnv(split="train").task_ids())
    heldout = set(PersonalChatEnv(split="heldout").task_ids())
    every = set(PersonalChatEnv(split="all").task_ids())
    assert train and heldout and not train & heldout and train | heldout == every
    assert 0.2 <= len(heldout) / len(every) <= 0.3


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, fragment", [
    ("description: x\npreferences:\n  - kind: no_emoji\n  - kind: foo\n",
     "preferences[1].kind 'foo' is unknown; known: "),
    ("description: x\npreferences:\n  - kind: max_words\n    params: {n: -3}\n",
     "preferences[0].params.n must be a positive integer"),
    ("description: x\npreferences:\n  - kind: no_emoji\n    prams: {}\n",
     "preferences[0].prams is not a known field"),
    ("description: x\npreferences:\n  - kind: no_emoji\n  - kind: no_emoji\n",
     "preferences[1].kind 'no_emoji' appears twice"),
    ("preferences:\n  - kind: no_emoji\n", "description must be a non-empty string"),
    ("description: x\npreferences: []\n", "preferences must be a non-empty list"),
    ("description: x\npreferences: [{kind: no_emoji}]\npraise: hello\n", "praise must be a list"),
    ("description: x\npreferences: [{kind: no_emoji}]\ncolour: red\n",
     "colour is not a known field"),
    ("description: [unclosed\n", "is not valid YAML"),
])
def test_bad_persona_file_names_file_and_field(tmp_path: Path, body: str, fragment: str) -> None:
    path = _write(tmp_path / "personas", "broken", body)
    with pytest.raises(CatalogError) as caught:
        load_personas(tmp_path / "personas")
    assert str(caught.value).startswith(f"{path}: ")
    assert fragment in str(caught.value)


def test_bad_request_file_names_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "requests.yaml"
    path.write_text("requests:\n  - {id: a, split: train, text: hi}\n"
                    "  - {id: b, split: test, text: hi}\n")
    with pytest.raises(CatalogError,
                       match=r"requests\.yaml: requests\[1\]\.split 'test' must be one of"):
        load_requests(path)


def test_unknown_persona_and_bad_arguments_are_refused() -> None:
    with pytest.raises(CatalogError, match="unknown persona 'nobody'; known: .*student"):
        PersonalChatEnv(persona="nobody")
    with pytest.raises(ValueError, match="split must be"):
        PersonalChatEnv(split="test")
    with pytest.raises(ValueError, match="user_endpoint"):
        PersonalChatEnv(user="llm")


def test_user_added_persona(tmp_path: Path) -> None:
    _write(tmp_path, "pirate", """
description: A sailor who wants every answer to start with "Ahoy" and end with a question.
preferences:
  - kind: starts_with
    params: {phrase: Ahoy}
    corrections: ["Arr, start with Ahoy, matey."]
  - kind: ends_with_question
praise: ["Aye, fine answer."]
request_tags: [travel]
""")
    env = PersonalChatEnv(persona="pirate", personas_dir=str(tmp_path), patience=2)
    assert all(t.startswith("pirate/travel-") for t in env.task_ids())
    _, info = env.reset(seed=0)
    obs, reward, *_ = env.step("Pack light.")
    assert obs[0]["content"] == "Arr, start with Ahoy, matey." and reward == -1.0
    obs, reward, terminated, _, _ = env.step("Ahoy. Pack a light bag for the trip. Where to?")
    assert (obs[0]["content"], reward, terminated) == ("Aye, fine answer.", 1.0, True)
    assert "student" in PersonalChatEnv(personas_dir=str(tmp_path)).personas  # shipped stay


# ---- episodes with scripted agents ----------------------------------------------------------
def compliant_reply(persona: Persona, request: Request) -> str:
    """What an agent that knows the hidden preferences writes (shipped kinds only)."""
    p = {pref.kind: pref for pref in persona.preferences}
    head = f"{p['call_me'].name}, " if "call_me" in p else ""  # type: ignore[attr-defined]
    lines = [f"{head}here is the answer about {request.keywords[0]}."]
    if "numbered_steps" in p:
        lines += ["1. Start with the basics.", "2. Keep going."]
    if "bullet_points" in p:
        lines += ["- Start with the basics.", "- Keep going."]
    if "include_tldr" in p:
        lines.append("TL;DR: do the basics.")
    if "ends_with_question" in p:
        lines.append("Shall I say more?")
    if "sign_off" in p:
        lines.append(f"— {p['sign_off'].name}")  # type: ignore[attr-defined]
    return "\n".join(lines)


@pytest.mark.parametrize("name", sorted(load_personas()))
def test_compliant_agent_is_praised(name: str) -> None:
    env = PersonalChatEnv(persona=name)
    _, info = env.reset(seed=3)
    persona = env.personas[name]
    reply = compliant_reply(persona, env.request)
    assert all(env.preferences_met(reply).values()), env.preferences_met(reply)
    obs, reward, terminated, truncated, info = env.step(reply)
    assert obs[0]["content"] in (persona.praise or DEFAULT_PRAISE)
    assert (reward, terminated, truncated, info["stop_reason"]) == (1.0, True, False, "user_left")
    assert info["next_state"] == obs[0]["content"]
    metrics = info["metrics"]
    assert metrics["preference_met"] == metrics["preference_fraction"] == 1.0
    assert metrics["first_response"] == 1.0
    assert {k for k in metrics if k.startswith("pref/")} == \
        {"pref/on_topic"} | {f"pref/{p.kind}" for p in persona.preferences}


LONG_REPLY = ("**Eggs** are great. Boil water first. Then add the egg. Wait six minutes. "
              "Cool it in cold water. I hope this helps!")


def test_ignoring_agent_is_corrected_then_fixes_it() -> None:
    env = PersonalChatEnv(persona="student", patience=3)
    env.reset(seed=0, options={"task_id": "student/cook-01"})
    max_sentences = env.personas["student"].preferences[0]
    obs, reward, terminated, truncated, info = env.step(LONG_REPLY)
    assert obs[0]["content"] in max_sentences.corrections  # the first unmet one is named
    assert (reward, terminated, truncated) == (-1.0, False, False)
    m = info["metrics"]
    assert (m["preference_met"], m["first_response"], m["pref/max_sentences"],
            m["pref/no_markdown"], m["pref/no_filler"], m["pref/on_topic"]) == (0, 1, 0, 0, 0, 1)
    assert m["preference_fraction"] == 0.25

    obs, reward, terminated, truncated, info = env.step("Eggs take six minutes. Then cool them.")
    assert obs[0]["content"] in env.personas["student"].praise
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["metrics"]["first_response"] == 0.0 and info["metrics"]["preference_met"] == 1.0


def test_off_topic_and_empty_replies_are_not_answers() -> None:
    env = PersonalChatEnv(persona="student", patience=3)
    env.reset(seed=0, options={"task_id": "student/cook-01"})
    obs, reward, *_ = env.step("Sure.")
    assert "boiling eggs" in obs[0]["content"] and reward == -1.0
    obs, reward, *_ = env.step("")
    assert "boiling eggs" in obs[0]["content"] and reward == -1.0


def test_budget_runs_out_after_max_turns() -> None:
    env = PersonalChatEnv(persona="student", patience=3, max_turns=2)
    env.reset(seed=0)
    assert env.step(LONG_REPLY)[2:4] == (False, False)
    *_, terminated, truncated, info = env.step(LONG_REPLY)
    assert (terminated, truncated, info["stop_reason"]) == (False, True, "max_turns")


@pytest.mark.parametrize("patience", [1, 2])
def test_user_corrects_then_leaves_when_patience_runs_out(patience: int) -> None:
    env = PersonalChatEnv(persona="student", patience=patience)
    env.reset(seed=0, options={"task_id": "student/cook-01"})
    for _ in range(patience - 1):
        assert env.step(LONG_REPLY)[2:4] == (False, False)
    obs, reward, terminated, truncated, info = env.step(LONG_REPLY)
    # The last correction is still said: it is the next state a judge learns from.
    assert obs[0]["content"] in env.personas["student"].preferences[0].corrections
    assert info["next_state"] == obs[0]["content"]
    assert (reward, terminated, truncated, info["stop_reason"]) == (-1.0, True, False, "user_left")


def test_invalid_reply_uses_up_patience_too() -> None:
    env = PersonalChatEnv(persona="student")
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step('<tool_call>{"name": "x"}</tool_call>')
    assert (reward, terminated, truncated) == (-1.0, True, False)
    assert info["metrics"]["invalid_action"] == 1 and info["metrics"]["preference_met"] == 0


def test_patience_must_be_positive() -> None:
    with pytest.raises(ValueError, match="patience must be >= 1"):
        PersonalChatEnv(patience=0)


def _correction(seed: int) -> str:
    env = PersonalChatEnv(persona="student")
    env.reset(seed=seed, options={"task_id": "student/cook-01"})
    return env.step(LONG_REPLY)[0][0]["content"]


def test_correction_phrasing_varies_by_seed_and_repeats_per_seed() -> None:
    assert _correction(7) == _correction(7)
    assert len({_correction(seed) for seed in range(12)}) >= 2


def test_task_id_option_and_unknown_task() -> None:
    env = PersonalChatEnv(persona="all")
    obs, info = env.reset(seed=0, options={"task_id": "teacher/tech-02"})
    assert info["task_id"] == "teacher/tech-02" and env.persona.name == "teacher"
    # several users: the system message says which one is asking (name_user defaults on)
    assert obs == [{"role": "system", "content": "You are a helpful personal assistant. The user is 'teacher'."},
                   {"role": "user", "content": env.request.text}]
    with pytest.raises(ValueError, match="not in the 'train' split"):
        env.reset(options={"task_id": "teacher/cook-04"})  # a heldout request
    with pytest.raises(ValueError, match="persona 'nobody'"):
        env.reset(options={"task_id": "nobody/cook-01"})
    drawn = {PersonalChatEnv(persona="all").reset(seed=s)[1]["task_id"].split("/")[0]
             for s in range(30)}
    assert len(drawn) >= 3  # "all" draws personas too


@pytest.mark.parametrize("persona, name_user, system", [
    ("student", None, "You are a helpful personal assistant."),
    ("student", True, "You are a helpful personal assistant. The user is 'student'."),
    ("all", False, "You are a helpful personal assistant.")])
def test_the_user_is_named_only_when_asked_or_when_there_are_several(persona, name_user, system) -> None:
    obs, _ = PersonalChatEnv(persona=persona, name_user=name_user).reset(seed=3, options={"task_id": "student/cook-01"})
    assert obs[0] == {"role": "system", "content": system}


def test_preferences_hidden_from_the_agent() -> None:
    env = PersonalChatEnv(persona="teacher")
    obs, info = env.reset(seed=0)
    text = json.dumps(obs) + json.dumps(info)
    assert "formal" not in text and "contraction" not in text and "exclamation" not in text


def test_preferences_met_for_any_task() -> None:
    env = PersonalChatEnv(persona="student")
    assert env.preferences_met("Eggs: six minutes.", "student/cook-01") == {
        "on_topic": True, "max_sentences": True, "no_markdown": True, "no_filler": True}
    assert env.preferences_met(LONG_REPLY, "student/cook-01")["max_sentences"] is False


def test_partial_credit_and_invalid_actions() -> None:
    env = PersonalChatEnv(persona="student", partial_credit=True)
    env.reset(seed=0, options={"task_id": "student/cook-01"})
    assert env.step(LONG_REPLY)[1] == pytest.approx(-0.5)  # 1 of 4 met
    env.reset(seed=0)
    obs, reward, _, _, info = env.step('<tool_call>{"name": "search", "arguments": {}}</tool_call>')
    assert reward == -1.0 and info["metrics"]["invalid_action"] == 1.0
    assert info["metrics"]["preference_met"] == 0.0 and info["metrics"]["first_response"] == 1.0


def test_env_pickles_and_registers() -> None:
    env = PersonalChatEnv(persona="traveler")
    clone = pickle.loads(pickle.dumps(env))
    assert clone.task_ids() == env.task_ids()
    assert envs.resolve("chat") == "clawgym/Chat-v0"


@pytest.mark.parametrize("kwargs", [{}, {"persona": "all", "split": "heldout", "patience": 3}])
def test_check_env(kwargs: dict[str, Any]) -> None:
    envs.check_env(gym.make("clawgym/Chat-v0", **kwargs))


# ---- the LLM-played user, over real HTTP -----------------------------------------------------
@pytest.fixture
def user_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with chat_completions_server(lambda body: [" Shorter, please, mate. "]) as server:
        yield server


def test_llm_user_round_trip(user_server: tuple[str, list[dict[str, Any]]]) -> None:
    url, received = user_server
    env = PersonalChatEnv(persona="student", user="llm", user_endpoint=url,
                          user_model="tiny-user", patience=2)
    env.reset(seed=0, options={"task_id": "student/cook-01"})
    obs, reward, terminated, truncated, info = env.step(LONG_REPLY)
    assert obs == [{"role": "user", "content": "Shorter, please, mate."}]
    assert info["next_state"] == "Shorter, please, mate."
    assert (reward, terminated, truncated) == (-1.0, False, False)  # the checker still decides
    assert info["metrics"]["pref/max_sentences"] == 0.0
    sent = received[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["body"]["model"] == "tiny-user"
    system, user = sent["body"]["messages"]
    assert env.personas["student"].description in system["content"]
    assert "at most three sentences" in user["content"]  # the unmet preference, described
    assert "Boil water first." in user["content"]  # the conversation itself
    *_, terminated, _, info = env.step("Eggs take six minutes. Then cool them.")
    assert terminated
    assert "met all your preferences" in received[-1]["body"]["messages"][1]["content"]


def test_only_the_scripted_user_asks_trainers_to_gate_opd_by_replay() -> None:
    """opd_gate=auto replays episodes to check OPD's teacher; the scripted user answers a
    replayed reply exactly as before, so it asks for the gate, and an LLM-played user (whose
    answers are sampled, and cost a request) does not."""
    assert PersonalChatEnv().opd_gate == "replay"
    env = PersonalChatEnv(persona="student", patience=3)
    seen = []
    for _ in range(2):
        env.reset(seed=7, options={"task_id": "student/cook-01"})
        seen.append([env.step(reply)[0] for reply in (LONG_REPLY, "Boil them.")])
    assert seen[0] == seen[1]
    assert PersonalChatEnv(user="llm", user_endpoint="http://127.0.0.1:9/v1", user_model="m").opd_gate == "none"


def test_unreachable_llm_user_is_an_infrastructure_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = PersonalChatEnv(user="llm", user_endpoint=f"http://127.0.0.1:{port}/v1",
                          user_model="m", user_timeout_s=5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Eggs take six minutes.")
    assert (terminated, truncated, info["stop_reason"]) == (False, True, "error")
    assert "did not answer" in info["error"] and "user_endpoint" in info["error"]
