"""The lexical judge reads every correction and every thanks the shipped personas say."""

from __future__ import annotations

import re

import pytest

import envs
from envs.chat.catalog import load_personas
from envs.chat.user import DEFAULT_PRAISE
from trainers.judge import lexical_score

PERSONAS = load_personas()


def _fill(text: str) -> str:
    return re.sub(r"\{[^}]*\}", "this", text)


@pytest.mark.parametrize("persona", sorted(PERSONAS))
def test_every_correction_reads_negative_and_every_praise_positive(persona):
    p = PERSONAS[persona]
    for preference in p.preferences:
        for text in preference.corrections:
            assert lexical_score(_fill(text), "user") == -1, text
    for text in (*p.praise, *DEFAULT_PRAISE):
        assert lexical_score(text, "user") == 1, text


def test_the_off_topic_correction_reads_negative():
    env = envs.make("chat").unwrapped
    env.reset(seed=0)
    *_, info = env.step("ok")
    assert lexical_score(info["next_state"], "user") == -1, info["next_state"]
