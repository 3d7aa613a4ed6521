"""Each env family maps to its oracle by the package its envs are built from."""

from __future__ import annotations

from envs.oracle import FAMILIES, WITHOUT_ORACLE, family_of


def test_each_env_family_maps_to_its_oracle() -> None:
    assert {name: family_of(name) for name in ("terminal", "swe", "gui", "bfcl", "bfcl-multi", "tau2",
                                               "toolmath", "chat")} == \
           {"terminal": "terminal", "swe": "swe", "gui": "gui", "bfcl": "toolcall", "bfcl-multi": "toolcall",
            "tau2": "toolcall", "toolmath": "toolcall", "chat": "chat"}


def test_a_family_has_an_oracle_or_says_why_not() -> None:
    assert set(FAMILIES) == {"terminal", "swe", "gui", "toolcall"}
    assert not set(FAMILIES) & set(WITHOUT_ORACLE) and "chat" in WITHOUT_ORACLE
    assert FAMILIES["gui"].tasks is not None and "click-test" in FAMILIES["gui"].tasks()  # MiniWoB's scripted subset
