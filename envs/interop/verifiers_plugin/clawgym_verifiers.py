"""The module verifiers imports for the taskset id ``clawgym-verifiers``: it finds a taskset
by importing ``<id with - as _>`` and reading the ``Taskset``, ``Env`` and ``Harness``
subclasses in its ``__all__``. ``make verifiers`` puts this folder on ``.venv-verifiers``'
path; the adapter itself is :mod:`envs.interop.verifiers`."""

from envs.interop import verifiers as _adapter
from envs.interop.verifiers import *  # noqa: F403

__all__ = _adapter.__all__
