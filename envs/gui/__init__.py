"""The GUI family: web tasks in a real Chromium driven through Playwright.
``clawgym/Browser-v1`` (alias ``gui``)::

    env = envs.make("gui")                               # MiniWoB++'s default subset
    obs, info = env.reset(seed=0)                        # [system, task + page snapshot]
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "click", "arguments": {"ref": "e3"}}</tool_call>')

The page is a text snapshot with stable refs (``envs.gui.snapshot``), optionally a
screenshot; MiniWoB++ comes from the ``miniwob`` wheel (``envs.gui.miniwob``); a folder
with a page and a ``task.yaml`` is a task (``envs.gui.tasks``). ``python -m envs.gui list``
shows the tasks and ``python -m envs.gui check DIR`` proves new ones fair.
"""

from __future__ import annotations

from envs.gui.actions import ActionError
from envs.gui.env import OBS_MODES, REWARD_MODES, SUITES, BrowserEnv
from envs.gui.session import BrowserError, BrowserSession
from envs.gui.tasks import TASKS_DIR, ReferenceAction, TaskError, WebTask, load_tasks

__all__ = ["OBS_MODES", "REWARD_MODES", "SUITES", "TASKS_DIR", "ActionError", "BrowserEnv",
           "BrowserError", "BrowserSession", "ReferenceAction", "TaskError", "WebTask", "load_tasks"]
