"""``python -m envs.interop list``: every integration, and whether its library is installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envs.interop import INTEGRATIONS, ROOT, Integration, by_name, installed_version


def test_list_prints_every_integration_with_its_installed_state():
    run = subprocess.run([sys.executable, "-m", "envs.interop", "list"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    header, *rows = run.stdout.splitlines()
    assert header.split() == ["integration", "library", "what", "it", "gives"]
    assert [row.split()[0] for row in rows] == [i.name for i in INTEGRATIONS]
    for integration, row in zip(INTEGRATIONS, rows):
        version = installed_version(integration)
        state = (f"{integration.distribution} {version}" if version
                 else f"not installed: {integration.install}")
        assert state in row and integration.what in row, row


def test_openenv_is_installed_here_and_listed_so():
    # the openenv extra is part of setup (scripts/bootstrap.sh), and its round trip runs by default
    assert installed_version(by_name("openenv")) == "0.3.0"


def test_a_library_that_is_nowhere_is_not_installed():
    missing = Integration("nothing", "envs.interop.nothing", "clawgym-no-such-distribution",
                          "pip install nothing", "nothing", venv=".venv-no-such-venv")
    assert installed_version(missing) is None


def test_each_integration_names_its_own_adapter_module_and_an_unknown_one_is_refused():
    assert all(i.module == f"envs.interop.{i.name.replace('-', '_')}" for i in INTEGRATIONS)
    assert len({i.name for i in INTEGRATIONS}) == len(INTEGRATIONS)
    with pytest.raises(ValueError, match="no integration 'gem'; known: openenv, trl"):
        by_name("gem")
