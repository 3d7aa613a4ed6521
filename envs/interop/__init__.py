"""clawgym envs in the trainers people already run: OpenEnv, TRL, verifiers, tinker-cookbook, SkyRL-gym.

Each integration is a thin layer over the env contract (:mod:`envs.core`): nothing in it
knows a family. Each lives in its own module here and imports its library only when used,
so ``import envs.interop`` costs nothing and ``python -m envs.interop list`` works with none
of them installed. A library whose pins clash with clawgym's runs in a venv of its own
(:attr:`Integration.venv`); its adapter module is then imported inside that venv.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Integration:
    """One trainer or protocol clawgym envs plug into."""

    name: str
    """What users call it: ``openenv``, ``trl``, ..."""
    module: str
    """The adapter module (``envs.interop.<name>``)."""
    distribution: str
    """The PyPI distribution the adapter drives (checked with ``importlib.metadata``)."""
    install: str
    """How to install it: a pip extra (``pip install -e '.[openenv]'``) or a make target."""
    what: str
    """One line: what the adapter gives a user of that library."""
    venv: str = ""
    """A venv of its own (relative to the repo root) when its pins clash with clawgym's."""


INTEGRATIONS: tuple[Integration, ...] = (
    Integration("openenv", "envs.interop.openenv", "openenv-core", "pip install -e '.[openenv]'",
                "serve any clawgym env as an OpenEnv server; an OpenEnv env as a clawgym env"),
    Integration("trl", "envs.interop.trl", "trl", "make trl",
                "train on a clawgym env with TRL's GRPOTrainer (through its rollout_func)"),
    Integration("verifiers", "envs.interop.verifiers", "verifiers", "make verifiers",
                "clawgym envs as a verifiers environment (vf-eval clawgym-verifiers, load_environment)",
                venv=".venv-verifiers"),
    Integration("tinker-cookbook", "envs.interop.tinker_cookbook", "tinker-cookbook", "make tinker-cookbook",
                "an rl.Env / EnvGroupBuilder / RLDataset over clawgym envs for tinker-cookbook's RL loop (0.4.1)"),
    Integration("skyrl-gym", "envs.interop.skyrl_gym", "skyrl-gym", "pip install -e '.[skyrl-gym]'",
                "a skyrl_gym BaseTextEnv over clawgym envs, registered with skyrl_gym.register"),
)


def by_name(name: str) -> Integration:
    """The integration called ``name``; a ``ValueError`` listing the known ones otherwise."""
    for integration in INTEGRATIONS:
        if integration.name == name:
            return integration
    known = ", ".join(i.name for i in INTEGRATIONS)
    raise ValueError(f"no integration {name!r}; known: {known}")


def installed_version(integration: Integration) -> str | None:
    """The version of its library this interpreter has, else the one its own venv has, else None."""
    try:
        return importlib.metadata.version(integration.distribution)
    except importlib.metadata.PackageNotFoundError:
        pass
    if integration.venv:
        python = ROOT / integration.venv / "bin" / "python"
        if python.exists():
            probe = subprocess.run(
                [str(python), "-c", "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))",
                 integration.distribution], capture_output=True, text=True, timeout=60)
            if probe.returncode == 0:
                return probe.stdout.strip()
    return None
