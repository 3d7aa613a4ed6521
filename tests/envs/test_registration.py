from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest

import envs
from envs import registration


def test_gymnasium_make_with_the_clawgym_namespace():
    env = gym.make("clawgym/GuessNumber-v0")
    assert env.spec.id == "clawgym/GuessNumber-v0"
    assert env.unwrapped.__class__.__name__ == "GuessNumberEnv"


def test_aliases_and_short_ids_resolve():
    assert envs.resolve("guess") == "clawgym/GuessNumber-v0"
    assert envs.resolve("GuessNumber-v0") == "clawgym/GuessNumber-v0"
    assert envs.make("guess", max_turns=3).unwrapped.max_turns == 3


def test_unknown_env_names_the_choices():
    with pytest.raises(KeyError, match="guess"):
        envs.resolve("nope")


def test_entry_points_are_lazy_strings():
    code = ("import sys, envs; assert 'envs.guess' not in sys.modules; "
            "import gymnasium as gym; gym.make('clawgym/GuessNumber-v0'); "
            "assert 'envs.guess' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gymnasium_make_without_importing_envs_first():
    code = "import gymnasium as gym; env = gym.make('envs:clawgym/GuessNumber-v0'); print(env.reset(seed=0)[1]['task_id'])"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.startswith("guess-")


def test_a_module_prefix_imports_the_module_that_registers(tmp_path):
    (tmp_path / "mytasks.py").write_text(textwrap.dedent("""
        import envs
        envs.register("PrefixGuess", "envs.guess:GuessNumberEnv", alias="prefix-guess",
                      description="registered on import", kwargs={"high": 3})
    """))
    code = ("import envs; print(envs.resolve('mytasks:prefix-guess')); "
            "print(envs.make('mytasks:PrefixGuess-v0').unwrapped.high)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.stdout.split() == ["clawgym/PrefixGuess-v0", "3"]
    with pytest.raises(KeyError, match="cannot import 'no_such_module'"):
        envs.resolve("no_such_module:guess")


def test_conflicting_registrations_are_refused():
    with pytest.raises(ValueError, match="bump the version"):
        envs.register("GuessNumber", "somewhere:Else", description="x")
    with pytest.raises(ValueError, match="alias 'guess'"):
        envs.register("Other", "envs.guess:GuessNumberEnv", alias="guess", description="x")


def test_third_party_plugin_registers_through_the_entry_point_group(tmp_path):
    pkg = tmp_path / "myclawplugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import envs
        def register_envs():
            envs.register("PluginGuess", "envs.guess:GuessNumberEnv", alias="plugin-guess",
                          description="A plugin's env", kwargs={"high": 5})
    """))
    dist = tmp_path / "myclawplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myclawplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[clawgym.envs]\nmine = myclawplugin:register_envs\n")
    broken = tmp_path / "brokenplugin-1.0.dist-info"
    broken.mkdir()
    (broken / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplugin\nVersion: 1.0\n")
    (broken / "entry_points.txt").write_text("[clawgym.envs]\nbroken = no_such_module:register\n")
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            import envs, gymnasium as gym
        assert any("brokenplugin" in str(x.message) or "broken" in str(x.message) for x in w), w
        env = gym.make("clawgym/PluginGuess-v0")
        assert env.unwrapped.high == 5
        assert envs.resolve("plugin-guess") == "clawgym/PluginGuess-v0"
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cli_lists_every_env():
    out = subprocess.run([sys.executable, "-m", "envs", "list"], check=True, capture_output=True, text=True)
    for entry in registration.entries():
        assert entry.env_id in out.stdout and entry.description[:20] in out.stdout
    assert "guess" in out.stdout and "env(s)" in out.stdout
