"""The live server with an adapter per user (adapters=per_user), on loopback: the real model,
a real uvicorn server, the openai client, a real SQLite file and real adapter files."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.trainers.test_serve import SHORT, _client, _config, _conversation, _rows, _wait
from trainers.live.users import read_keys
from trainers.serve import export, serve_in_thread

KEYS = "key-alice alice\nkey-bob bob  # a comment\n\nkey-root root admin\n"
GREEDY = {"temperature": 0, "max_tokens": 8}


def _users_config(keys: Path | None, **overrides: Any) -> Any:
    base = {"adapters": "per_user", "batch_size": 1, "train_after_s": 0.2, "max_new_tokens": 8, "max_batch": 4}
    if keys is not None:
        base["api_keys"] = str(keys)
    return _config(**{**base, **overrides})


@pytest.fixture(scope="module")
def users(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Path]]:
    root = tmp_path_factory.mktemp("users")
    (root / "keys").write_text(KEYS)
    with serve_in_thread(_users_config(root / "keys"), root / "run") as (url, service):
        yield url, service, root / "run"


def _call(url: str, method: str, path: str, key: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def _ask(client: openai.OpenAI, prompt: str = SHORT[0], **extra: Any) -> tuple[str, str]:
    reply = client.chat.completions.create(model="clawgym", messages=[{"role": "user", "content": prompt}],
                                           **GREEDY, **extra)
    return reply.choices[0].message.content, reply.system_fingerprint


def _adapter_bytes(out: Path, user: str) -> bytes:
    return (out / "adapters" / user / "adapter_model.safetensors").read_bytes()


def test_key_files_in_both_formats_and_their_errors(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_text(KEYS)
    keys = read_keys(tmp_path / "k.txt")
    assert {k: (c.user, c.admin) for k, c in keys.items()} == {
        "key-alice": ("alice", False), "key-bob": ("bob", False), "key-root": ("root", True)}
    (tmp_path / "k.json").write_text(json.dumps({"k1": "alice", "k2": {"user": "root", "admin": True}}))
    assert {k: (c.user, c.admin) for k, c in read_keys(tmp_path / "k.json").items()} == {
        "k1": ("alice", False), "k2": ("root", True)}
    for bad in ("secret-key ../etc\n", "secret-key alice sudo\n", "secret-key alice\nsecret-key bob\n"):
        (tmp_path / "bad").write_text(bad)
        with pytest.raises(ValueError) as error:
            read_keys(tmp_path / "bad")
        assert "secret-key" not in str(error.value)  # an error never quotes a key


def test_an_unknown_or_missing_key_is_a_401(users) -> None:
    url, _, _ = users
    with pytest.raises(openai.AuthenticationError):
        _ask(_client(url, "key-mallory"))
    assert _call(url, "GET", "/models", None)[0] == 401
    assert _call(url, "GET", "/models", "key-alice")[0] == 200


def test_each_user_trains_and_is_served_only_their_own_adapter(users) -> None:
    url, service, out = users
    alice, bob = _client(url, "key-alice"), _client(url, "key-bob")
    # a user's key wins over what the request says about its user
    claimed = bob.chat.completions.create(model="clawgym", messages=[{"role": "user", "content": SHORT[1]}],
                                          **GREEDY, user="alice", extra_headers={"X-User-Id": "alice"})
    assert _rows(out, "SELECT s.user_id FROM turns t JOIN sessions s ON s.id = t.session_id "
                      "WHERE t.request_id = ?", (claimed.id,)) == [("bob",)]
    _conversation(bob, 0)
    _wait(lambda: service.adapters.version("bob") == 1, timeout=120)
    bob_before, bob_adapter = _ask(bob), _adapter_bytes(out, "bob")
    assert bob_before[1] == "clawgym-v1"
    assert not (out / "adapters" / "alice").exists()  # bob's turns trained bob's adapter only
    assert _ask(alice)[1] == "clawgym-v0"  # alice: the base model

    _conversation(alice, 1)
    _wait(lambda: service.adapters.version("alice") == 1, timeout=120)
    assert _ask(alice)[1] == "clawgym-v1"
    assert _ask(bob) == bob_before and _adapter_bytes(out, "bob") == bob_adapter  # untouched by alice's update
    assert _adapter_bytes(out, "alice") != bob_adapter
    trained = _rows(out, "SELECT s.user_id, t.trained_version FROM turns t JOIN sessions s ON s.id = t.session_id "
                         "WHERE t.trained_version > 0")
    assert sorted(trained) == [("alice", 1), ("bob", 1)]

    # rows of different users in one batch each get their own adapter
    alone = {name: _ask(client, SHORT[2]) for name, client in (("alice", alice), ("bob", bob))}
    together: dict[str, tuple[str, str]] = {}
    threads = [threading.Thread(target=lambda n=name, c=client: together.__setitem__(n, _ask(c, SHORT[2])))
               for name, client in (("alice", alice), ("bob", bob)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert together == alone


def test_sessions_never_cross_users(users) -> None:
    url, _, out = users
    alice, bob = _client(url, "key-alice"), _client(url, "key-bob")
    messages = [{"role": "user", "content": SHORT[3]}]
    first = bob.chat.completions.create(model="clawgym", messages=messages, **GREEDY,
                                        extra_headers={"X-Session-Id": "same-name"})
    # alice resends bob's conversation under bob's session name: she joins neither
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "Thanks!"}]
    second = alice.chat.completions.create(model="clawgym", messages=messages, **GREEDY,
                                           extra_headers={"X-Session-Id": "same-name"})
    third = alice.chat.completions.create(model="clawgym", messages=messages, **GREEDY)
    rows = dict(_rows(out, "SELECT t.request_id, s.user_id || '|' || s.id FROM turns t "
                           "JOIN sessions s ON s.id = t.session_id WHERE t.request_id IN (?, ?, ?)",
                      (first.id, second.id, third.id)))
    assert rows[first.id] == "bob|bob:same-name" and rows[second.id] == "alice|alice:same-name"
    assert rows[third.id].startswith("alice|") and rows[third.id] != rows[first.id]
    assert _rows(out, "SELECT next_state FROM turns WHERE request_id = ?", (first.id,)) == [(None,)]


def test_export_and_delete_need_the_right_key(users) -> None:
    url, service, out = users
    carol = "key-root"  # root is an admin, and a user like any other
    _ask(_client(url, carol))
    _ask(_client(url, "key-alice"))
    if service.adapters.version("bob") == 0:  # run alone: bob needs a record and an adapter first
        _conversation(_client(url, "key-bob"), 0)
        _wait(lambda: service.adapters.version("bob") == 1, timeout=120)
    status, mine = _call(url, "GET", "/users/alice/export", "key-alice")
    assert status == 200 and mine["user"] == "alice" and mine["sessions"]
    assert all(t["messages"] for s in mine["sessions"] for t in s["turns"])
    assert _call(url, "GET", "/users/bob/export", "key-alice")[0] == 403  # another user's record
    assert _call(url, "GET", "/users/bob/export", carol)[0] == 200
    status, refused = _call(url, "DELETE", "/users/bob", "key-alice")
    assert status == 403 and refused["error"]["code"] == "permission_denied"
    assert _call(url, "DELETE", "/users/bob", "key-nobody")[0] == 401
    assert (out / "adapters" / "bob").exists()

    bob_turns = _rows(out, "SELECT COUNT(*) FROM turns t JOIN sessions s ON s.id = t.session_id "
                           "WHERE s.user_id = 'bob'")[0][0]
    status, deleted = _call(url, "DELETE", "/users/bob", carol)
    assert status == 200 and deleted["turns"] == bob_turns > 0 and deleted["adapter"] is True
    assert _rows(out, "SELECT COUNT(*) FROM sessions WHERE user_id = 'bob'") == [(0,)]
    assert _rows(out, "SELECT COUNT(*) FROM turns WHERE session_id LIKE 'bob:%' OR request_id IN "
                      "(SELECT request_id FROM turns t JOIN sessions s ON s.id = t.session_id "
                      "WHERE s.user_id = 'bob')") == [(0,)]
    assert not (out / "adapters" / "bob").exists() and "bob" not in service.adapters.store.resident()
    assert _call(url, "GET", "/users/bob/export", carol)[1]["sessions"] == []
    assert _ask(_client(url, "key-bob"))[1] == "clawgym-v0"  # bob starts again from the base
    assert _call(url, "GET", "/users/alice/export", "key-alice")[1]["sessions"]  # nobody else's
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as response:
        values = dict(line.rsplit(" ", 1) for line in response.read().decode().splitlines()
                      if line and not line.startswith("#"))
    store = service.adapters.store
    assert float(values["clawgym_adapters_resident"]) == len(store.resident()) and "bob" not in store.resident()
    assert float(values["clawgym_adapter_loads_total"]) == store.stats.loads


def test_a_restart_keeps_each_users_adapter_version_and_trained_turns(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text(KEYS)
    config, run = _users_config(tmp_path / "keys"), tmp_path / "run"
    with serve_in_thread(config, run) as (url, service):
        alice = _client(url, "key-alice")
        _conversation(alice, 2)
        _wait(lambda: service.adapters.version("alice") == 1, timeout=120)
        before = _ask(alice)
        stream = alice.chat.completions.create(model="clawgym", messages=[{"role": "user", "content": SHORT[0]}],
                                               stream=True, **GREEDY)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == before[0]
    trained = _rows(run, "SELECT id, trained_version FROM turns WHERE trained_version IS NOT NULL")
    assert export(run, tmp_path / "alice.jsonl", user="alice") == 3  # her conversation, her ask, her stream
    assert export(run, tmp_path / "bob.jsonl", user="bob") == 0
    with serve_in_thread(config, run) as (url, service):
        assert _ask(_client(url, "key-alice")) == before == (before[0], "clawgym-v1")
        assert _ask(_client(url, "key-bob"))[1] == "clawgym-v0"
        assert service.learner.version == 1
        assert _rows(run, "SELECT id, trained_version FROM turns WHERE trained_version IS NOT NULL") == trained


def test_without_keys_the_user_is_named_by_the_request(tmp_path: Path) -> None:
    with serve_in_thread(_users_config(None, learn=False), tmp_path / "run") as (url, _):
        client = _client(url)
        with pytest.raises(openai.BadRequestError) as error:
            _ask(client)
        assert "X-User-Id" in str(error.value)
        _ask(client, user="dana")
        _ask(client, extra_headers={"X-User-Id": "erin"})
        with pytest.raises(openai.BadRequestError):
            _ask(client, user="../etc")
        assert sorted(r[0] for r in _rows(tmp_path / "run", "SELECT user_id FROM sessions")) == ["dana", "erin"]
        assert _call(url, "DELETE", "/users/dana", None)[0] == 403  # no admin without a key file


def test_a_new_user_beyond_max_users_is_refused_until_an_admin_deletes_one(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text("key-root root admin\n")
    config = _users_config(None, learn=False, max_users=2)
    with serve_in_thread(config, tmp_path / "run") as (url, _):
        client = _client(url)
        _ask(client, user="dana")
        _ask(client, user="erin")
        with pytest.raises(openai.RateLimitError) as error:
            _ask(client, user="frank")
        assert "max_users=2" in str(error.value) and error.value.status_code == 429
        _ask(client, user="dana")  # known users still come in
    # Restarted on the same run dir, the users on record still count; an admin frees a place.
    config = _users_config(tmp_path / "keys", learn=False, max_users=2)
    with serve_in_thread(config, tmp_path / "run") as (url, _):
        client = _client(url, "key-root")
        with pytest.raises(openai.RateLimitError):
            _ask(client, extra_headers={"X-User-Id": "frank"})  # the admin key's user is root, a new one
        assert _call(url, "DELETE", "/users/erin", "key-root")[0] == 200
        _ask(client)
        assert sorted(r[0] for r in _rows(tmp_path / "run", "SELECT DISTINCT user_id FROM sessions")) == ["dana", "root"]


def test_a_shared_server_has_no_users_route(tmp_path: Path) -> None:
    with serve_in_thread(_config(learn=False), tmp_path / "run") as (url, _):
        assert _call(url, "GET", "/users/alice/export", None)[0] == 403  # no admin, no user's key
        _ask(_client(url), user="alice")
        assert _rows(tmp_path / "run", "SELECT user_id FROM sessions") == [(None,)]
