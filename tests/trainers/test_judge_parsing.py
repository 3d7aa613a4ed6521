from __future__ import annotations

import copy

import pytest

from trainers.judge_parsing import (
    HINT_HEADER,
    append_hint,
    majority_vote,
    parse_boxed,
    parse_hint,
    select_hint,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The user moved on. \boxed{1}", 1),
        (r"\boxed{-1}", -1),
        (r"\boxed{0}", 0),
        (r"\boxed{+1}", 1),
        (r"\boxed{ -1 }", -1),
        ("\\boxed{\n1\t}", 1),
        # the last box counts, even when an earlier one differs
        (r"Format: \boxed{1} or \boxed{-1}. Verdict: \boxed{0}", 0),
        (r"\boxed{-1} ... on reflection \boxed{1}", 1),
        # an unclosed last box is not a box: the last complete one counts
        (r"\boxed{-1} and then \boxed{1", -1),
        # out of range or not a score
        (r"\boxed{2}", None),
        (r"\boxed{-2}", None),
        (r"\boxed{10}", None),
        (r"\boxed{1.0}", None),
        (r"\boxed{yes}", None),
        (r"\boxed{}", None),
        (r"\boxed{- 1}", None),
        (r"\boxed{\text{1}}", None),
        # a valid earlier box does not rescue an invalid last one
        (r"\boxed{1} then \boxed{2}", None),
        ("no box at all: 1", None),
        ("", None),
        (r"\boxed 1", None),
    ],
)
def test_parse_boxed(text, expected):
    assert parse_boxed(text) == expected


@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([1, 1, -1], 1),
        ([-1, -1, 0, 1], -1),
        ([0, 0, 1], 0),
        ([1, None, None], 1),  # failed parses are ignored, not counted as 0
        ([None, -1, None, 1, -1], -1),
        ([1, -1], 0),  # tie for the top
        ([1, 1, -1, -1, 0], 0),  # tie for the top, even with a third score
        ([None, None, None], 0),  # no valid vote
        ([], 0),
        ([2, 2, 1], 1),  # values outside {1, 0, -1} are ignored
    ],
)
def test_majority_vote(votes, expected):
    assert majority_vote(votes) == expected


def test_parse_hint():
    text = (
        "The user had to repeat that they wanted metric units.\n"
        "[HINT_START]\n  Use metric units; the user lives in Berlin.  \n[HINT_END]\n\\boxed{1}"
    )
    assert parse_hint(text) == (1, "Use metric units; the user lives in Berlin.")


def test_parse_hint_absent_or_empty():
    assert parse_hint(r"Nothing to learn. \boxed{-1}") == (-1, None)
    assert parse_hint(r"[HINT_START]   [HINT_END] \boxed{1}") == (1, None)
    assert parse_hint("[HINT_START] unclosed hint") == (None, None)
    assert parse_hint("") == (None, None)


def test_parse_hint_takes_the_last_span():
    text = (
        "Answer as [HINT_START]...[HINT_END]. [HINT_START] Ask before deleting files. "
        r"[HINT_END] \boxed{1}"
    )
    assert parse_hint(text) == (1, "Ask before deleting files.")
    # an earlier unclosed marker does not swallow the real hint
    assert parse_hint("[HINT_START] oops [HINT_START] real hint [HINT_END]") == (None, "real hint")


def test_select_hint_longest_among_positive_votes():
    outputs = [
        (1, "Prefer short replies."),  # 21 chars
        (-1, "This negative vote has by far the longest hint of them all."),  # ignored
        (1, "Prefer short replies, in French."),  # 32 chars: kept
        (None, "A failed parse's hint is ignored as well, however long it is."),
        (0, "An ambiguous vote's hint is ignored as well, however long it is."),
        (1, None),
    ]
    assert select_hint(outputs) == "Prefer short replies, in French."


def test_select_hint_min_length():
    # "Use tabs." is 9 chars, "Use tabs!!" is 10: neither is longer than 10
    assert select_hint([(1, "Use tabs."), (1, "Use tabs!!")]) is None
    # "Use spaces." is 11 chars: kept
    assert select_hint([(1, "Use tabs."), (1, "Use spaces.")]) == "Use spaces."
    assert select_hint([(1, "Use tabs.")], min_chars=5) == "Use tabs."


def test_select_hint_none_when_no_positive_hint():
    assert select_hint([]) is None
    assert select_hint([(-1, "A long hint under a negative vote.")]) is None
    assert select_hint([(1, None), (1, None)]) is None


def test_select_hint_tie_goes_to_earliest():
    assert select_hint([(1, "first, 17 chars.."), (1, "other, 17 chars..")]) == "first, 17 chars.."


HINT = "Use metric units."


def test_append_hint_to_last_user_message_without_mutating():
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "How far is it?"},
        {"role": "assistant", "content": "About 3 miles."},
        {"role": "user", "content": "And the next town?"},
        {"role": "assistant", "content": "5 miles."},
    ]
    before = copy.deepcopy(messages)
    out = append_hint(messages, HINT)
    assert messages == before
    expected = "And the next town?\n\n[user's hint / instruction]\nUse metric units."
    assert out[3]["content"] == expected
    assert out[3]["content"] == "And the next town?" + HINT_HEADER + HINT
    assert out[:3] == before[:3] and out[4] == before[4]
    assert len(out) == len(messages)


def test_append_hint_to_list_content():
    messages = [{"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                             {"type": "image_url", "image_url": {"url": "x"}}]}]
    before = copy.deepcopy(messages)
    out = append_hint(messages, HINT)
    assert messages == before  # the inner list was not appended to either
    assert out[0]["content"][:2] == before[0]["content"]
    assert out[0]["content"][2] == {"type": "text", "text": HINT_HEADER + HINT}


def test_append_hint_without_user_message():
    messages = [{"role": "system", "content": "Be terse."}]
    out = append_hint(messages, HINT)
    assert messages == [{"role": "system", "content": "Be terse."}]
    assert out == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "[user's hint / instruction]\nUse metric units."},
    ]
    only_hint = {"role": "user", "content": "[user's hint / instruction]\n" + HINT}
    assert append_hint([], HINT) == [only_hint]
