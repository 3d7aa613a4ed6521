"""Where a ``model=`` value's weights are: the default model's cache, or a local directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.model_cache import MODEL_NAME, default_model_dir, resolve_model_dir


def test_default_is_the_cache_under_clawgym_cache_and_a_built_cache_is_not_rebuilt(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CLAWGYM_CACHE", str(tmp_path))
    cache = tmp_path / "models" / MODEL_NAME
    assert default_model_dir() == cache
    cache.mkdir(parents=True)
    (cache / "model.safetensors").write_bytes(b"")  # built already: nothing is converted
    assert resolve_model_dir("default") == resolve_model_dir("") == cache


def test_a_directory_with_config_json_is_itself_and_one_without_says_what_to_pass(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text("{}")
    assert resolve_model_dir("~/mine") == tmp_path / "mine"
    with pytest.raises(FileNotFoundError, match="pass model=default or a local directory with config.json"):
        resolve_model_dir(str(tmp_path))
    assert not Path(tmp_path / "models").exists()
