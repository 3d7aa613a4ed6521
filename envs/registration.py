"""clawgym's envs in Gymnasium's registry, short CLI aliases, and third-party plugins.

Envs register under the ``clawgym`` namespace, so after ``import envs`` the usual
``gymnasium.make("clawgym/GuessNumber-v0")`` works (or, without the import,
``gymnasium.make("envs:clawgym/GuessNumber-v0")``). Entry points are lazy strings: an
env's module is imported only when it is made. The CLI takes aliases (``env=guess``).

Third-party packages register through the ``clawgym.envs`` entry-point group::

    [project.entry-points."clawgym.envs"]
    mypkg = "mypkg.envs:register_envs"    # a function that calls envs.register(...)
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

NAMESPACE = "clawgym"
ENTRY_POINT_GROUP = "clawgym.envs"


@dataclass(frozen=True)
class EnvEntry:
    """What ``python -m envs list`` shows for one env."""

    env_id: str
    alias: str | None
    description: str
    entry_point: str


_ENTRIES: dict[str, EnvEntry] = {}
_ALIASES: dict[str, str] = {}
_plugins_loaded = False


def register(name: str, entry_point: str, *, description: str, version: int = 0,
             alias: str | None = None, kwargs: dict[str, Any] | None = None,
             nondeterministic: bool = False) -> str:
    """Register ``clawgym/<name>-v<version>`` with Gymnasium; return the id.

    ``entry_point`` is a ``"module:Class"`` string, imported only when the env is made.
    Registering the same id again with the same entry point is a no-op.
    """
    env_id = f"{NAMESPACE}/{name}-v{version}"
    known = _ENTRIES.get(env_id)
    if known is not None and known.entry_point != entry_point:
        raise ValueError(f"{env_id} is already registered with entry point {known.entry_point!r}; "
                         f"bump the version to register {entry_point!r}")
    if alias is not None and _ALIASES.get(alias, env_id) != env_id:
        raise ValueError(f"alias {alias!r} already names {_ALIASES[alias]}; pick another alias")
    if env_id not in gym.registry:
        register_with_gymnasium(env_id, entry_point, kwargs=kwargs, nondeterministic=nondeterministic)
    _ENTRIES[env_id] = EnvEntry(env_id, alias, description, entry_point)
    if alias is not None:
        _ALIASES[alias] = env_id
    return env_id


def register_with_gymnasium(env_id: str, entry_point: str, *, kwargs: dict[str, Any] | None = None,
                            nondeterministic: bool = False) -> None:
    """``gymnasium.register`` as every clawgym env needs it; :func:`register` calls it, and
    so can a test that registers an env outside the ``clawgym`` listing.

    ``gymnasium.make`` normally wraps the env in ``PassiveEnvChecker``, and in gymnasium
    1.4.0 that wrapper breaks an env whose first ``reset`` raised (a terminal task whose
    setup failed): ``PassiveEnvChecker.reset`` marks the reset as checked *before* calling
    it, so the reset's ``(obs, info)`` it keeps for its data-reuse check stays ``None``
    forever, and every ``step`` after a later successful reset raises ``TypeError`` from
    unpacking that ``None`` (``env_data_reuse_passive_checker``). clawgym envs therefore
    register with ``disable_env_checker=True``; the test suite runs ``envs.check_env``
    on every registered env instead, which includes Gymnasium's full ``check_env``.
    (``gymnasium.make(..., disable_env_checker=False)`` still brings the bug back.)

    ``order_enforce=False`` too: every clawgym env enforces the order itself and says so
    with :class:`envs.ResetNeeded` (which also is Gymnasium's ``ResetNeeded``), with the
    same message whether the env came from ``gymnasium.make`` or its constructor.
    """
    gym.register(id=env_id, entry_point=entry_point, kwargs=kwargs or {},
                 nondeterministic=nondeterministic, disable_env_checker=True, order_enforce=False)


def load_plugins() -> None:
    """Run every ``clawgym.envs`` entry point once. A broken plugin warns, never breaks us."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
            if callable(target):
                target()
        except Exception as exc:  # a third party's bug must not take the registry down
            warnings.warn(f"clawgym env plugin {ep.name!r} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}", stacklevel=2)


def resolve(name: str) -> str:
    """An alias, ``Name-v0`` or a full ``clawgym/Name-v0`` id -> the full registered id.

    ``module:name`` imports ``module`` first, as ``gymnasium.make("module:id")`` does, so an
    env that a module registers when imported works before its package is installed with an
    entry point: ``python -m trainers.run env=mypkg:mytask``.
    """
    load_plugins()
    if ":" in name:
        module, _, name = name.partition(":")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise KeyError(f"env {module}:{name}: cannot import {module!r} ({exc}); is it on "
                           "the Python path (the current folder is)?") from None
    if name in _ALIASES:
        return _ALIASES[name]
    for candidate in (name, f"{NAMESPACE}/{name}"):
        if candidate in gym.registry:
            return candidate
    known = ", ".join(sorted(_ALIASES)) or "none"
    raise KeyError(f"unknown env {name!r}; aliases: {known}; ids: `python -m envs list`")


def make(name: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` for an alias or id."""
    return gym.make(resolve(name), **kwargs)


def entries() -> list[EnvEntry]:
    """Every registered clawgym env (plugins included), sorted by id."""
    load_plugins()
    return sorted(_ENTRIES.values(), key=lambda e: e.env_id)


def register_builtin() -> None:
    """The envs that ship with clawgym. Each family adds its line here."""
    register("GuessNumber", "envs.guess:GuessNumberEnv", alias="guess",
             description="Guess a secret integer with a `guess` tool; the tiny env for "
                         "tests, tutorials and smoke runs.")
    register("Chat", "envs.chat.env:PersonalChatEnv", alias="chat",
             description="Personal assistant: a simulated user with hidden preferences "
                         "(length, format, wording) thanks or corrects each reply.")
    register("SWE", "envs.swe.env:SWEEnv", alias="swe",
             version=1,
             description="Fix a real bug in a real Python repository (SWE-bench schema); graded "
                         "like SWE-bench: resolved if every FAIL_TO_PASS/PASS_TO_PASS test passes.")
    register("Browser", "envs.gui.env:BrowserEnv", alias="gui",
             version=1,
             description="Web tasks in a real Chromium (MiniWoB++ and task folders): a text "
                         "snapshot with refs and/or a screenshot; the page's own reward.")
    register("Terminal", "envs.terminal.env:TerminalEnv", alias="terminal",
             description="Shell tasks in a docker or bwrap sandbox (files, text, git, sqlite, "
                         "...); the reward is the fraction of the task's tests that pass.")
    register("ToolCall", "envs.toolcall.env:ToolCallEnv", alias="toolcall",
             version=1,
             description="Function calling against OpenAI tool schemas (suite=bfcl, bfcl_multi, "
                         "tau2, toolmath); bad calls are named, good ones run where tools exist.")
    register("BFCL", "envs.toolcall.env:ToolCallEnv", alias="bfcl", kwargs={"suite": "bfcl"},
             description="BFCL v4 single-turn function calling (13 categories), scored by "
                         "BFCL's AST matcher.")
    register("BFCLMultiTurn", "envs.toolcall.env:ToolCallEnv", alias="bfcl-multi",
             kwargs={"suite": "bfcl_multi"},
             version=1,
             description="BFCL v4 multi-turn conversations on its executable backends, scored "
                         "on final state and responses.")
    register("Tau2", "envs.toolcall.env:ToolCallEnv", alias="tau2", kwargs={"suite": "tau2"},
             version=1,
             description="tau2-bench airline and retail customer service with a simulated "
                         "user; scored by tau2's database and communication checks.")
    register("ToolMath", "envs.toolcall.env:ToolMathEnv", alias="toolmath",
             description="Arithmetic and word problems solved with a sandboxed `python` tool; "
                         "generated from a seed, train/heldout.")
