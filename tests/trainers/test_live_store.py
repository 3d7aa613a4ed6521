"""The live record's SQLite file: a run dir written before client ids and n>1 choices
opens, gains the new columns, and keeps its sessions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trainers.live.store import Store

OLD_SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL, last_seen REAL NOT NULL,
    closed_at REAL, close_reason TEXT, last_turn_id INTEGER, continuation TEXT);
CREATE TABLE turns (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT UNIQUE NOT NULL,
    session_id TEXT NOT NULL, turn_index INTEGER NOT NULL, turn_type TEXT NOT NULL, created_at REAL NOT NULL,
    messages TEXT NOT NULL, tools TEXT NOT NULL, response TEXT NOT NULL, prompt_ids TEXT NOT NULL,
    completion_ids TEXT NOT NULL, logprobs TEXT NOT NULL, weight_version INTEGER NOT NULL,
    finish_reason TEXT NOT NULL, temperature REAL NOT NULL, next_state TEXT, next_role TEXT, score INTEGER,
    votes TEXT, hint TEXT, scored_at REAL, trained_version INTEGER);
INSERT INTO sessions VALUES ('open-one', 1, 1, NULL, NULL, 1, 'abc');
INSERT INTO sessions VALUES ('done-one', 1, 1, 2, 'done', NULL, NULL);
"""


def _turn(store: Store, session_id: str, client_id: str | None, request_id: str) -> int:
    return store.record_turn(request_id=request_id, session_id=session_id, turn_type="main",
                             messages=[{"role": "user", "content": "hi"}], tools=[],
                             response={"role": "assistant", "content": "hello"}, prompt_ids=[1], completion_ids=[2],
                             logprobs=[-0.5], weight_version=0, finish_reason="stop", temperature=0.6,
                             continuation="d-" + request_id, next_state=None, next_role=None, client_id=client_id)


def test_an_older_record_is_migrated_and_keeps_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "live.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
    store = Store(path)
    try:
        assert store.session_for_client("open-one") == ("open-one", "abc")
        assert store.session_for_client("done-one") == ("done-one~2", None)  # closed: the id starts anew
        assert store.session_for_client("never-seen") == ("never-seen", None)
        _turn(store, "done-one~2", "done-one", "r1")
        assert store.session_for_client("done-one") == ("done-one~2", "d-r1")
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT id, client_id FROM sessions ORDER BY id").fetchall() == [
            ("done-one", "done-one"), ("done-one~2", "done-one"), ("open-one", "open-one")]
        assert {"choice_of", "continuation"} <= {r[1] for r in db.execute("PRAGMA table_info(turns)")}
