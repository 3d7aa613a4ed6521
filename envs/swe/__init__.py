"""SWE: fix a real bug in a real Python repository, graded like SWE-bench.

An episode is one *instance* in SWE-bench's schema (``instance_id, repo, base_commit,
problem_statement, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS, version, created_at``)
plus what clawgym needs to build its environment offline. The agent works in a sandbox
whose ``/workspace`` holds the repository at ``base_commit``; when it submits, the diff
of its work tree is applied with ``test_patch`` to a fresh copy and the FAIL_TO_PASS and
PASS_TO_PASS tests decide the reward.

Modules::

    instances   the record schema, loading and validating JSONL (SWE-bench, SWE-Gym,
                SWE-smith style), splits
    projects    the shipped projects (real PyPI sdists with their test suites, pinned
                by version and sha256) made into git repositories, cached
    mutations   bug injection by AST mutation, token-precise (small, real-looking diffs)
    generate    python -m envs.swe.generate: projects x mutations -> instances
    repos       a repository at base_commit for an instance, cached, copied per episode
    editor      the file editor tool (view/create/str_replace/insert/undo_edit)
    patches     which files of the agent's diff are graded (the source, no test hooks)
    grading     apply patches in a fresh sandbox, run tests, grade with swebench's parser;
                predictions.jsonl for the official harness
    env         clawgym/SWE-v1 (alias swe)
    verify      scripted agents (gold via the editor, idle, vandals) proving an instance
                fair; no project under test in the rootfs
    __main__    python -m envs.swe list|check|bench <file>

Sandboxes run the ``swe`` flavor of clawgym's rootfs (``scripts/build_rootfs.sh --flavor
swe``: the base rootfs plus Debian's python3-pytest, python3-hypothesis and python3-six,
with the python3-dateutil and python3-more-itertools they pull in purged: no copy of a
project under test), so test suites run with no network. :func:`sandbox_config` points a ``SandboxConfig`` at it.
"""

from __future__ import annotations

from typing import Any

from envs.sandbox import SandboxConfig, cache_dir

SWE_IMAGE = "clawgym-swe:current"
"""The docker image of the ``swe`` rootfs flavor."""


def swe_rootfs() -> str:
    """The bwrap rootfs of the ``swe`` flavor (``$CLAWGYM_CACHE/rootfs/swe-current``)."""
    return str(cache_dir() / "rootfs" / "swe-current")


def sandbox_defaults() -> dict[str, Any]:
    """The SandboxConfig fields SWE sandboxes start from: the ``swe`` rootfs/image and room
    for a project's test suite."""
    return {"rootfs": swe_rootfs(), "image": SWE_IMAGE, "memory_mb": 2048, "disk_mb": 1024,
            "default_timeout_s": 180.0}


def sandbox_config(**overrides: Any) -> SandboxConfig:
    """A SandboxConfig on the ``swe`` rootfs/image; ``overrides`` are SandboxConfig fields."""
    return SandboxConfig(**{**sandbox_defaults(), **overrides})
