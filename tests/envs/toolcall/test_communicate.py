"""tau2's COMMUNICATE check: tau2's substring rule, and clawgym's whole-token rule that a
list of candidates does not pass."""

from __future__ import annotations

import pytest

from envs.toolcall.communicate import communicated, upstream_communicated

ZERO_TO_99 = "It is one of: " + ", ".join(str(n) for n in range(100)) + "."


@pytest.mark.parametrize("values, reply, strict, upstream", [
    # value(s)            reply                                              ours   tau2's
    (["4"], ZERO_TO_99,                                                      False, True),
    (["4"], "0 1 2 3 4 5 6 7 8 9",                                           False, True),
    (["4"], "You can bring 4 suitcases in total: 2 free per passenger.",     True,  True),
    (["4"], "3 or 4 suitcases.",                         True,  True),   # one other value of its shape
    (["4"], "3, 4 or 5 suitcases.",                      False, True),   # two others: a list
    (["4"], "You can bring 14 suitcases.",               False, True),   # "4" only inside "14"
    (["481.50"], "The difference is $481.5.",            True,  False),  # equal values; tau2 reads text
    (["1093.34"], "Refunded 1,093.34 on 2024-05-15 at 10:30 and 11:45.", True, True),  # dates, times aside
    (["54.04", "41.64"], "Refunds: 54.04 and 41.64, total 95.68.", True, True),  # two values: three allowed
    (["camera", "481.50"], "Your new camera costs 481.50 more.", True, True),
    (["camera"], "Your cameras are on their way.",       False, True),   # whole words
    (["IL"], "You live in Illinois.",                    False, True),
    (["20 hours"], "It takes 20 hours.",                 True,  True),
    (["20 hours"], "20 minutes, not hours.",             False, False),
    (["943 Maple Drive", "Suite 356"], "Shipped to 943 Maple Drive, Suite 356.", True, True),
])
def test_each_reply_is_read_by_both_rules(values, reply, strict, upstream):
    assert communicated(values, [reply]) is strict
    assert upstream_communicated(values, [reply]) is upstream


def test_each_value_needs_a_reply_that_is_not_a_list_for_it():
    values = ["4", "polyester"]
    assert communicated(values, ["It is polyester.", "You can bring 4 bags."])
    assert not communicated(values, ["It is polyester.", ZERO_TO_99])
    assert communicated(values, [ZERO_TO_99, "It is polyester; you can bring 4 bags."])
    assert not communicated(["4"], [])
