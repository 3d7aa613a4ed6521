"""The live server's durable record: one SQLite file (WAL) in the run dir.

Every served turn is inserted, and committed, before its reply leaves the server, so a
reply a client has received is on disk even if the process is killed the next instant
(WAL with ``synchronous=NORMAL`` survives a process crash; only a power cut can lose the
last transactions). Scores, hints and the weight version a turn was trained into are
filled in later by the learner.

A turn whose client left before its reply is recorded too, with ``delivered = 0``
(``finish_reason`` ``cancelled`` when its generation was stopped early). Nobody read it,
so it is treated as a side turn whatever its type: it neither gives nor takes a next
state, the session does not move past it, and it is never scored or trained on.

Rejected requests (4xx) are recorded apart, in bounded space, since anyone who can reach
the server can send them: ``rejection_counts`` counts every rejection by status and code
(what ``/metrics`` reports), and ``rejections`` keeps the last ``REJECTIONS_KEPT`` of them
with their messages.

Tables::

    sessions(id, client_id, created_at, last_seen, closed_at, close_reason, last_turn_id, continuation, user_id)
    turns(id, request_id, session_id, turn_index, turn_type, created_at,
          messages, tools, response, prompt_ids, completion_ids, logprobs,
          weight_version, finish_reason, temperature,
          next_state, next_role, score, votes, hint, scored_at, trained_version,
          choice_of, continuation, delivered)
    rejections(id, created_at, status, code, message)
    rejection_counts(status, code, count, last_at)

Lists and messages are stored as JSON text. With ``n > 1`` the first choice is the main
turn and the others are side turns with ``choice_of`` (the first's id) and their own
``continuation``; if the client goes on from one of them, it becomes the main turn.

With per-user adapters (``adapters=per_user``) a session belongs to one user
(``sessions.user_id``): the lookups that place a request in a session take its user and
see only that user's sessions, and :meth:`Store.delete_user` removes a user's sessions
and turns. With shared adapters ``user_id`` stays NULL and nothing filters on it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.messages import Message

REJECTIONS_KEPT = 1000
"""Rejections kept with their message; older ones survive only in ``rejection_counts``."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    client_id TEXT,
    created_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    closed_at REAL,
    close_reason TEXT,
    last_turn_id INTEGER,
    continuation TEXT,
    user_id TEXT
);
CREATE INDEX IF NOT EXISTS sessions_continuation ON sessions(continuation);
CREATE INDEX IF NOT EXISTS sessions_client ON sessions(client_id, created_at);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions(user_id);
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id TEXT UNIQUE NOT NULL,
    session_id TEXT NOT NULL,
    turn_index INTEGER NOT NULL,
    turn_type TEXT NOT NULL CHECK (turn_type IN ('main', 'side')),
    created_at REAL NOT NULL,
    messages TEXT NOT NULL,
    tools TEXT NOT NULL,
    response TEXT NOT NULL,
    prompt_ids TEXT NOT NULL,
    completion_ids TEXT NOT NULL,
    logprobs TEXT NOT NULL,
    weight_version INTEGER NOT NULL,
    finish_reason TEXT NOT NULL,
    temperature REAL NOT NULL,
    next_state TEXT,
    next_role TEXT,
    score INTEGER,
    votes TEXT,
    hint TEXT,
    scored_at REAL,
    trained_version INTEGER,
    choice_of INTEGER,
    continuation TEXT,
    delivered INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS turns_session ON turns(session_id, turn_index);
CREATE INDEX IF NOT EXISTS turns_choice ON turns(continuation) WHERE continuation IS NOT NULL;
CREATE TABLE IF NOT EXISTS rejections (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at REAL NOT NULL,
    status INTEGER NOT NULL,
    code TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rejection_counts (
    status INTEGER NOT NULL,
    code TEXT NOT NULL,
    count INTEGER NOT NULL,
    last_at REAL NOT NULL,
    PRIMARY KEY (status, code)
);
"""


@dataclass
class TurnRecord:
    """One served turn as stored; ``next_state`` is None until the session's next request."""

    id: int
    request_id: str
    session_id: str
    turn_index: int
    turn_type: str
    messages: list[Message]
    tools: list[dict[str, Any]]
    response: Message
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    weight_version: int
    finish_reason: str
    temperature: float
    next_state: list[Message] | None = None
    next_role: str | None = None
    score: int | None = None
    votes: list[int | None] = field(default_factory=list)
    hint: str | None = None
    trained_version: int | None = None
    closed: bool = False
    """True when the session ended with no next request: a last turn."""
    delivered: bool = True
    """False when the client left before the reply: never scored, never trained on."""
    user_id: str | None = None
    """The session's user with per-user adapters; None with a shared adapter."""

    def next_state_text(self) -> str:
        """What the judge reads: every new message of the next request, with its role."""
        if not self.next_state:
            return ""
        if len(self.next_state) == 1:
            return _text(self.next_state[0])
        return "\n".join(f"{m.get('role', '?')}: {_text(m)}" for m in self.next_state)


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


_TURN_COLUMNS = ("id, request_id, session_id, turn_index, turn_type, messages, tools, response, prompt_ids, "
                 "completion_ids, logprobs, weight_version, finish_reason, temperature, next_state, next_role, "
                 "score, votes, hint, trained_version, delivered")


class Store:
    """Thread-safe access to the run's ``live.sqlite`` (one connection, one lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        counted = self._has_table("rejection_counts")
        self._migrate()
        self._db.executescript(SCHEMA)
        if not counted:  # an older record: count the rejections it kept, then bound them
            self._db.execute("INSERT OR IGNORE INTO rejection_counts(status, code, count, last_at) "
                             "SELECT status, code, COUNT(*), MAX(created_at) FROM rejections GROUP BY status, code")
            self._db.execute("DELETE FROM rejections WHERE id <= (SELECT MAX(id) FROM rejections) - ?",
                             (REJECTIONS_KEPT,))

    def _has_table(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (name,)).fetchone() is not None

    def _migrate(self) -> None:
        """Add the columns a run dir written by an older clawgym lacks (its turns were all
        recorded as delivered)."""
        for table, column, kind in (("sessions", "client_id", "TEXT"), ("sessions", "user_id", "TEXT"),
                                    ("turns", "choice_of", "INTEGER"),
                                    ("turns", "continuation", "TEXT"),
                                    ("turns", "delivered", "INTEGER NOT NULL DEFAULT 1")):
            columns = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if columns and column not in columns:
                self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                if column == "client_id":
                    self._db.execute("UPDATE sessions SET client_id = id")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- writes on the request path --------------------------------------------------
    def record_turn(self, *, request_id: str, session_id: str, turn_type: str, messages: list[Message],
                    tools: list[dict[str, Any]], response: Message, prompt_ids: list[int],
                    completion_ids: list[int], logprobs: list[float], weight_version: int,
                    finish_reason: str, temperature: float, continuation: str,
                    next_state: list[Message] | None, next_role: str | None, client_id: str | None = None,
                    chosen: int | None = None, choice_of: int | None = None, delivered: bool = True,
                    user_id: str | None = None) -> int:
        """Insert a served turn and, for a main turn, attach ``next_state`` to the session's
        previous main turn and move the session's pointer to this one, in one transaction.
        A new session is named ``client_id`` by its client (X-Session-Id), if it has one.
        ``chosen``: the client went on from this other choice of the previous request, which
        becomes the main turn in place of the first. ``choice_of``: this side turn is another
        choice of that main turn. ``delivered=False``: the client left before the reply;
        the turn is stored but acts as a side turn (see the module docstring). ``user_id``:
        a new session's user (per-user adapters). Returns the new turn's id."""
        now = time.time()
        if not delivered:
            chosen = choice_of = None
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT last_turn_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
                if row is None:
                    db.execute("INSERT INTO sessions(id, client_id, created_at, last_seen, user_id) "
                               "VALUES (?, ?, ?, ?, ?)", (session_id, client_id or session_id, now, now, user_id))
                    previous = None
                else:
                    previous = row[0]
                index = db.execute("SELECT COUNT(*) FROM turns WHERE session_id = ?", (session_id,)).fetchone()[0]
                main = turn_type == "main" and delivered  # side turns neither give nor take a next state
                if main and previous is not None and chosen is not None:
                    swapped = db.execute("UPDATE turns SET turn_type = 'main' WHERE id = ? AND choice_of = ?",
                                         (chosen, previous)).rowcount
                    if swapped:
                        db.execute("UPDATE turns SET turn_type = 'side' WHERE id = ?", (previous,))
                        previous = chosen
                    else:  # not a choice of the session's last turn (a race): no next state
                        next_state = None
                if main and previous is not None and next_state is not None:
                    db.execute("UPDATE turns SET next_state = ?, next_role = ? WHERE id = ? AND next_state IS NULL",
                               (json.dumps(next_state), next_role, previous))
                cursor = db.execute(
                    "INSERT INTO turns(request_id, session_id, turn_index, turn_type, created_at, messages, tools, "
                    "response, prompt_ids, completion_ids, logprobs, weight_version, finish_reason, temperature, "
                    "choice_of, continuation, delivered) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (request_id, session_id, index, turn_type, now, json.dumps(messages), json.dumps(tools),
                     json.dumps(response), json.dumps(prompt_ids), json.dumps(completion_ids),
                     json.dumps(logprobs), weight_version, finish_reason, temperature, choice_of,
                     continuation if choice_of is not None else None, int(delivered)))
                turn_id = int(cursor.lastrowid or 0)
                if main:
                    db.execute("UPDATE sessions SET last_seen = ?, last_turn_id = ?, continuation = ? WHERE id = ?",
                               (now, turn_id, continuation, session_id))
                else:
                    db.execute("UPDATE sessions SET last_seen = ? WHERE id = ?", (now, session_id))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return turn_id

    def record_rejection(self, status: int, code: str, message: str) -> None:
        """Count a refused request and keep it among the last ``REJECTIONS_KEPT``."""
        now = time.time()
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT INTO rejection_counts(status, code, count, last_at) VALUES (?, ?, 1, ?) "
                           "ON CONFLICT(status, code) DO UPDATE SET count = count + 1, last_at = excluded.last_at",
                           (status, code[:100], now))
                cursor = db.execute("INSERT INTO rejections(created_at, status, code, message) VALUES (?, ?, ?, ?)",
                                    (now, status, code[:100], message[:2000]))
                db.execute("DELETE FROM rejections WHERE id <= ?", (int(cursor.lastrowid or 0) - REJECTIONS_KEPT,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def close_session(self, session_id: str, reason: str) -> None:
        with self._lock:
            self._db.execute("UPDATE sessions SET closed_at = ?, close_reason = ? WHERE id = ? AND closed_at IS NULL",
                             (time.time(), reason, session_id))

    # ---- session lookup ----------------------------------------------------------------
    def session_by_continuation(self, digest: str, user: str | None = None) -> str | None:
        """The open session whose answered prefix is ``digest`` (only ``user``'s, when given)."""
        mine, params = _of_user("", user)
        with self._lock:
            row = self._db.execute("SELECT id FROM sessions WHERE continuation = ? AND closed_at IS NULL "
                                   f"{mine}ORDER BY last_seen DESC LIMIT 1", (digest, *params)).fetchone()
        return row[0] if row else None

    def other_choice(self, digest: str, user: str | None = None) -> tuple[str, int] | None:
        """``(session id, turn id)`` of an open session's other choice (n > 1) whose
        continuation is ``digest``, when it is a choice of the session's last main turn
        (only ``user``'s sessions, when given)."""
        mine, params = _of_user("s.", user)
        with self._lock:
            row = self._db.execute("SELECT t.session_id, t.id FROM turns t JOIN sessions s ON s.id = t.session_id "
                                   "WHERE t.continuation = ? AND t.choice_of = s.last_turn_id AND s.closed_at IS NULL "
                                   f"{mine}ORDER BY t.id DESC LIMIT 1", (digest, *params)).fetchone()
        return (row[0], int(row[1])) if row else None

    def session_for_client(self, client_id: str, user: str | None = None) -> tuple[str, str | None]:
        """The session a client's id names now, and its continuation digest (None: no main
        turn answered yet). Once that session is closed (done or idle), the id names a new
        one: ``<id>~2``, ``<id>~3``, ... (the first unused). With ``user``, only that user's
        sessions are seen and a new one is stored as ``<user>:<id>``: two users' ids never meet."""
        mine, params = _of_user("", user)
        name = client_id if user is None else f"{user}:{client_id}"
        with self._lock:
            row = self._db.execute(f"SELECT id, continuation, closed_at FROM sessions WHERE client_id = ? {mine}"
                                   "ORDER BY created_at DESC, rowid DESC LIMIT 1", (client_id, *params)).fetchone()
            if row is None:
                return name, None
            if row[2] is None:
                return row[0], row[1]
            k = 2
            while self._db.execute("SELECT 1 FROM sessions WHERE id = ?", (f"{name}~{k}",)).fetchone():
                k += 1
            return f"{name}~{k}", None

    def idle_sessions(self, older_than: float) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM sessions WHERE closed_at IS NULL AND last_seen < ?",
                                    (older_than,)).fetchall()
        return [r[0] for r in rows]

    # ---- the learner's side --------------------------------------------------------------
    def turns_to_score(self, limit: int) -> list[TurnRecord]:
        """Main turns whose next state arrived (or whose session closed), not yet scored."""
        return self._select("WHERE t.turn_type = 'main' AND t.delivered = 1 AND t.score IS NULL AND "
                            "(t.next_state IS NOT NULL OR s.closed_at IS NOT NULL AND s.last_turn_id = t.id) "
                            "ORDER BY t.id LIMIT ?", (limit,))

    def turns_to_train(self, limit: int) -> list[TurnRecord]:
        return self._select("WHERE t.turn_type = 'main' AND t.delivered = 1 AND t.score IS NOT NULL "
                            "AND t.trained_version IS NULL "
                            "ORDER BY t.id LIMIT ?", (limit,))

    def save_scores(self, scores: list[tuple[int, int, list[int | None], str | None]]) -> None:
        """(turn id, score, votes, hint) for each scored turn."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("UPDATE turns SET score = ?, votes = ?, hint = ?, scored_at = ? WHERE id = ?",
                                 [(s, json.dumps(v), h, now, i) for i, s, v, h in scores])
            self._db.execute("COMMIT")

    def mark_trained(self, turn_ids: list[int], version: int) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("UPDATE turns SET trained_version = ? WHERE id = ?", [(version, i) for i in turn_ids])
            self._db.execute("COMMIT")

    def drop_turns(self, turn_ids: list[int]) -> None:
        """Turns that can never become samples (cut off, empty, no signal): mark them -1."""
        self.mark_trained(turn_ids, -1)

    def counts(self) -> dict[str, int]:
        with self._lock:
            q = self._db.execute
            return {
                "turns": q("SELECT COUNT(*) FROM turns").fetchone()[0],
                "main_turns": q("SELECT COUNT(*) FROM turns WHERE turn_type = 'main' AND delivered = 1").fetchone()[0],
                "abandoned": q("SELECT COUNT(*) FROM turns WHERE delivered = 0").fetchone()[0],
                "scored": q("SELECT COUNT(*) FROM turns WHERE score IS NOT NULL").fetchone()[0],
                "trained": q("SELECT COUNT(*) FROM turns WHERE trained_version >= 0").fetchone()[0],
                "sessions_open": q("SELECT COUNT(*) FROM sessions WHERE closed_at IS NULL").fetchone()[0],
                "rejections": q("SELECT COALESCE(SUM(count), 0) FROM rejection_counts").fetchone()[0],
            }

    def _select(self, where: str, params: tuple[Any, ...]) -> list[TurnRecord]:
        columns = ", ".join(f"t.{c.strip()}" for c in _TURN_COLUMNS.split(","))
        sql = (f"SELECT {columns}, (s.closed_at IS NOT NULL AND s.last_turn_id = t.id), s.user_id FROM turns t "
               f"JOIN sessions s ON s.id = t.session_id {where}")
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [_record(row) for row in rows]

    # ---- export ----------------------------------------------------------------------------
    def sessions(self, user: str | None = None) -> Iterator[tuple[str, list[TurnRecord]]]:
        """Every session with its turns in order (for export); only ``user``'s, when given."""
        mine, params = _of_user("", user)
        with self._lock:
            ids = [r[0] for r in self._db.execute(f"SELECT id FROM sessions WHERE 1 {mine}ORDER BY created_at",
                                                  params).fetchall()]
        for session_id in ids:
            yield session_id, self._select("WHERE t.session_id = ? ORDER BY t.turn_index", (session_id,))

    def users(self) -> set[str]:
        """The users that have sessions (adapters=per_user; a shared server records none)."""
        with self._lock:
            return {row[0] for row in self._db.execute("SELECT DISTINCT user_id FROM sessions WHERE user_id IS NOT NULL")}

    def delete_user(self, user: str) -> tuple[int, int]:
        """Remove ``user``'s sessions and every turn in them (scores, hints and votes are the
        turns' columns); returns ``(sessions, turns)`` removed."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                turns = db.execute("DELETE FROM turns WHERE session_id IN (SELECT id FROM sessions WHERE user_id = ?)",
                                   (user,)).rowcount
                sessions = db.execute("DELETE FROM sessions WHERE user_id = ?", (user,)).rowcount
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return sessions, turns


def _of_user(prefix: str, user: str | None) -> tuple[str, tuple[str, ...]]:
    """A query's ``AND user_id = ?`` clause and its parameter, or nothing for ``user=None``."""
    return ("", ()) if user is None else (f"AND {prefix}user_id = ? ", (user,))


def _record(row: tuple[Any, ...]) -> TurnRecord:
    (turn_id, request_id, session_id, index, turn_type, messages, tools, response, prompt_ids, completion_ids,
     logprobs, version, finish, temperature, next_state, next_role, score, votes, hint, trained, delivered,
     closed, user_id) = row
    return TurnRecord(
        id=turn_id, request_id=request_id, session_id=session_id, turn_index=index, turn_type=turn_type,
        messages=json.loads(messages), tools=json.loads(tools), response=json.loads(response),
        prompt_ids=json.loads(prompt_ids), completion_ids=json.loads(completion_ids),
        logprobs=json.loads(logprobs), weight_version=version, finish_reason=finish, temperature=temperature,
        next_state=json.loads(next_state) if next_state else None, next_role=next_role, score=score,
        votes=json.loads(votes) if votes else [], hint=hint, trained_version=trained, closed=bool(closed),
        delivered=bool(delivered), user_id=user_id)
