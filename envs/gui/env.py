"""Browser: web tasks in a real Chromium, seen as text snapshots and/or screenshots."""

from __future__ import annotations

import base64
import urllib.parse
from typing import Any

from envs.core import ClawEnv, Opening, StopReason, Transition
from envs.gui import miniwob
from envs.gui.actions import ActionError, perform, tools_for
from envs.gui.server import PageServer
from envs.gui.session import BrowserError, BrowserSession
from envs.gui.snapshot import clip, page_changes, take_snapshot
from envs.gui.tasks import TASKS_DIR, WebTask, load_tasks, python_reward
from envs.messages import AssistantTurn, Message, ToolCall
from envs.taskfolders import pool_by_id

SUITES = ("miniwob", "clawgym", "user", "all")
SPLITS = ("train", "heldout", "all")
OBS_MODES = ("text", "screenshot", "both")
REWARD_MODES = ("raw", "success")
DEFAULT_MAX_TURNS = 10

_SYSTEM = {
    "text": ("You are using a web browser to do a task. You see the page as text, one element "
             "per line; every element you can act on has a ref, e.g. `[ref=e3] button \"Submit\"`. "
             "Act with the tools: click(ref), type(ref, text), press(key), select(ref, option), "
             "scroll(direction), hover(ref), click_xy(x, y). Use refs from the latest page you "
             "were shown. Call done() when the task is finished."),
    "screenshot": ("You are using a web browser to do a task. You see a screenshot of the page. "
                   "Act with the tools: click_xy(x, y) clicks a point of the screenshot (pixels "
                   "from its top-left corner), type(text) types into the focused element, "
                   "press(key), scroll(direction). Call done() when the task is finished."),
}
_SYSTEM["both"] = _SYSTEM["text"] + " You also see a screenshot of the page; click_xy(x, y) " \
                                    "clicks a point of it."
NO_TOOL_CALL = ("No tool call found. Act on the page with a tool (click, type, press, select, "
                "scroll, hover, click_xy), and call done() when the task is finished.")
ENDED = "Not run: the episode already ended."


class BrowserEnv(ClawEnv):
    """Do a task on a web page in a real Chromium; the page itself scores the result.

    ## Description
    Each episode opens a task's page in a fresh browser context of a Chromium that the env
    keeps across episodes (one per env, so one per vector member), and asks the agent to do
    what the page wants: click a button, fill a form, pick from a dropdown, find an email.
    Suites: ``miniwob`` (the ``miniwob`` wheel's 134 tasks, 130 MiniWoB++ pages and 4
    FlightWoB sites, served from disk, seeded, rewarded by the page's own JavaScript:
    ``envs.gui.miniwob``, which leaves 19 out and says why, 115 remain), ``clawgym``
    (small shipped folder tasks, ``envs/gui/data/tasks``), ``user`` (folders under
    ``tasks_dir``: ``envs.gui.tasks``; they join every suite) and ``all``. Pages are served on
    loopback by the env's own server, the only thing the browser reaches: every request
    goes through it, and it refuses every other host and port, loopback's included
    (``envs.gui.session``).

    ## Observation
    Reset: a system message (how to act) and a user message with the instruction and the
    page. The page is a text snapshot (``envs.gui.snapshot``: one element per line, each
    actionable one with a stable ref, ``[ref=e12] button "Submit"``); with
    ``obs_mode="screenshot"`` or ``"both"`` a PNG screenshot comes as an ``image_url``
    content part (a ``data:image/png;base64`` URL; MiniWoB's is its 160x210 task area).
    Step: one ``tool`` message per tool call saying what happened (or why it could not),
    then, unless the episode ended, a ``user`` message with the page as it is now.
    ``info["next_state"]`` is the tool results plus what changed on the page (the lines of
    the snapshot that went and came, or the new snapshot when that is shorter), clipped to
    ``max_snapshot_chars`` as the page is.

    ## Action
    An assistant message calling ``click(ref)``, ``type(ref?, text)``, ``press(key)``,
    ``select(ref, option)``, ``scroll(direction, ref?)``, ``hover(ref)``, ``click_xy(x, y)``
    (screenshot pixels) and ``done()``; several calls run in order. ``type`` takes at most
    1,000 characters (``envs.gui.actions.MAX_TEXT``; more is refused), the last 100 typed key
    by key and the rest pasted. A ref no element has
    now, a hidden element, a covered one, an unknown key or option, typing into something
    that is not a text field: the tool message says why and ``invalid_action`` is 1. With
    ``obs_mode="screenshot"``, the ref-only tools (click, select, hover) are not offered.

    ## Reward
    0 until the episode ends. MiniWoB: when the page ends the episode (the task's own
    success or failure), MiniWoB's raw reward in [-1, 1] (``WOB_RAW_REWARD_GLOBAL``, no time
    penalty); 0 if the agent calls ``done()`` first or a budget runs out (MiniWoB's reward
    for an unfinished episode). Folder tasks: the task's ``reward`` expression (or Python
    function), read when its ``done`` expression turns true, on ``done()``, or when a budget
    runs out. ``reward_mode="success"`` gives 1 for a success and 0 otherwise. The last step's
    ``info["metrics"]["solved"]`` is 1 for a success: MiniWoB reward > 0 (the MiniWoB
    papers' success rate), folder reward >= 1. Every step reports ``actions`` (calls run).

    ## Episode End
    Terminated when the page ends the task (``solved`` on a success, else ``failed``) or on
    ``done()`` (``submitted``). Truncated (``max_turns``, ``time_limit``) when a budget runs
    out. Truncated (``error``, with ``info["error"]``) when the browser fails: a page that
    hangs past ``page_timeout_s`` (the browser is killed), a crashed tab, a dead browser, a
    page that navigates off the task (another origin, or another task's page: checked after
    each action and on the document each snapshot comes from, so the place it went is never
    shown); the next reset starts a fresh browser. A page that will not load, or leaves as
    it loads, makes ``reset`` raise ``BrowserError`` (an ``EnvError``).

    ## Arguments
    ``suite``: ``miniwob`` (default), ``clawgym``, ``user`` or ``all``.
    ``tasks``: ``default`` (MiniWoB's :data:`envs.gui.miniwob.DEFAULT_SUBSET` plus every
    folder task of the suite), ``all``, or a list (or comma-separated string) of ids, which
    overrides ``split``; ``task_ids()`` lists the selection, and ``options={"task_id": ...}``
    takes any task of the suite. ``split``: ``train`` (default), ``heldout`` or ``all``.
    MiniWoB tasks are drawn anew from their seed, so they are in every split and the split
    divides the *seeds*: train episodes get even page seeds, heldout ones odd, and a
    held-out evaluation plays instances no training episode saw. Folder tasks go by their
    ``split`` field. ``tasks_dir``: a folder of task folders. ``obs_mode``: ``text`` (default),
    ``screenshot``, ``both``. ``reward_mode``: ``raw`` (default) or ``success``.
    ``max_turns`` (default: the task's, else 10), ``max_snapshot_chars`` (4000),
    ``action_timeout_s`` (3: how long a click waits for its element to be clickable),
    ``page_timeout_s`` (15: a page silent this long is hung), ``page_time_limit_s``
    (MiniWoB's own page clock, off by default), ``data_mode`` (MiniWoB's, ``train``), and
    the :class:`ClawEnv` arguments.

    ## Version History
    v1: pages reach only their own server (every request goes through it as a proxy);
    the stay-on-task check compares the origin, on the URL each snapshot came from;
    ``info["next_state"]`` is clipped to ``max_snapshot_chars``; ``type`` takes up to
    1,000 characters, all but the last 100 pasted; at most ``max_tool_calls`` calls of a
    message run.
    v0: initial version.
    """

    def __init__(self, suite: str = "miniwob", tasks: str | list[str] = "default",
                 split: str = "train", tasks_dir: str | None = None, obs_mode: str = "text",
                 reward_mode: str = "raw",
                 max_turns: int | None = None, max_snapshot_chars: int = 4000,
                 action_timeout_s: float = 3.0, page_timeout_s: float = 15.0,
                 page_time_limit_s: float | None = None, data_mode: str = "train",
                 **kwargs: Any) -> None:
        for name, value, allowed in (("suite", suite, SUITES), ("split", split, SPLITS),
                                     ("obs_mode", obs_mode, OBS_MODES),
                                     ("reward_mode", reward_mode, REWARD_MODES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 (or None for the task's own), got {max_turns}")
        if data_mode not in ("train", "test"):
            raise ValueError(f"data_mode must be 'train' or 'test' (MiniWoB's), got {data_mode!r}")
        if max_snapshot_chars < 200:
            raise ValueError(f"max_snapshot_chars must be >= 200, got {max_snapshot_chars}")
        if not 0 < action_timeout_s < page_timeout_s:
            raise ValueError(f"need 0 < action_timeout_s < page_timeout_s, got {action_timeout_s} "
                             f"and {page_timeout_s}")
        self.tools = tools_for(obs_mode)
        super().__init__(max_turns=max_turns or DEFAULT_MAX_TURNS, **kwargs)
        self.suite, self.split, self.obs_mode, self.reward_mode = suite, split, obs_mode, reward_mode
        self.fixed_max_turns = max_turns
        self.max_snapshot_chars = max_snapshot_chars
        self.action_timeout_s, self.page_timeout_s = action_timeout_s, page_timeout_s
        self.page_time_limit_s, self.data_mode = page_time_limit_s, data_mode
        self._tasks_dir = tasks_dir
        self._tasks = _task_pool(suite, tasks_dir)
        self._ids = _select(self._tasks, tasks, split)
        self._session: BrowserSession | None = None
        self._server: PageServer | None = None
        self._task: WebTask | None = None
        self._snapshot = ""

    # ---- tasks ------------------------------------------------------------------------
    def task_ids(self) -> list[str]:
        return list(self._ids)

    def task(self, task_id: str) -> WebTask:
        """The :class:`WebTask` behind ``task_id`` (any task of the suite)."""
        try:
            return self._tasks[task_id]
        except KeyError:
            raise KeyError(f"unknown task_id {task_id!r} in suite={self.suite!r}; "
                           "env.task_ids() lists the selection") from None

    @property
    def session(self) -> BrowserSession | None:
        """The browser this env drives (None before the first reset and after close)."""
        return self._session

    # ---- episode ----------------------------------------------------------------------
    def _open(self, task_id: str | None, options: dict[str, Any]) -> Opening:
        if task_id is None:
            task_id = self._ids[int(self.np_random.integers(len(self._ids)))]
        if task_id not in self._tasks:
            raise ValueError(f"unknown task_id {task_id!r} in suite={self.suite!r}; "
                             "env.task_ids() lists the selection")
        task = self._tasks[task_id]
        seed = self._page_seed()
        session, server = self._start()
        self._task = None
        page = session.new_page(viewport=task.viewport, seed=seed)
        url = server.url(task.mount, task.page)
        with session.guard(f"loading task {task.id}"):
            if task.suite == "miniwob":
                instruction = miniwob.start_episode(
                    page, url, seed, data_mode=self.data_mode, page_time_limit_s=self.page_time_limit_s,
                    timeout_ms=self.page_timeout_s * 1000)
            else:
                page.goto(url, wait_until="load", timeout=self.page_timeout_s * 1000)
                instruction = task.instruction
        self._task = task
        self.max_turns = self.fixed_max_turns or task.max_turns or DEFAULT_MAX_TURNS
        self._snapshot, image = self._observe()
        intro = f"Task: {instruction}\n\n"
        messages: list[Message] = [{"role": "system", "content": _SYSTEM[self.obs_mode]},
                                   {"role": "user", "content": self._page_content(image, intro)}]
        return Opening(messages, task.id, info={"suite": task.suite, "difficulty": task.difficulty,
                                                "split": task.split, "page_seed": seed,
                                                "instruction": instruction})

    def _page_seed(self) -> int:
        """The page's seed: even in the train split, odd in heldout, so a held-out episode
        of a MiniWoB task is an instance training never drew."""
        if self.split == "all":
            return int(self.np_random.integers(2**31 - 1))
        return 2 * int(self.np_random.integers(2**30 - 1)) + (self.split == "heldout")

    def _start(self) -> tuple[BrowserSession, PageServer]:
        if self._server is None:
            mounts = {task.mount: _mount_dir(task, self._tasks_dir) for task in self._tasks.values()}
            self._server = PageServer(mounts)
        if self._session is None:
            self._session = BrowserSession(page_timeout_s=self.page_timeout_s, origin=self._server.origin)
        return self._session, self._server

    def _act(self, turn: AssistantTurn) -> Transition:
        if not turn.tool_calls:
            return Transition([{"role": "user", "content": NO_TOOL_CALL}], metrics={"actions": 0.0})
        replies: list[Message] = []
        metrics = {"actions": 0.0}
        ending: tuple[float, StopReason, str] | None = None
        for call in turn.tool_calls:
            if ending is not None:
                text = ENDED
            elif call.name == "done":
                reward, success, why = self._score(final=True)
                ending = (reward, StopReason.SUBMITTED, why)
                metrics["solved"] = float(success)
                text = f"Done. {why}"
            else:
                text, ended = self._tool(call, metrics)
                if ended is not None:
                    reward, success, why = ended
                    ending = (reward, StopReason.SOLVED if success else StopReason.FAILED, why)
                    metrics["solved"] = float(success)
                    text += f" {why}"
            replies.append({"role": "tool", "tool_call_id": call.id, "content": text})
        results = "\n".join(m["content"] for m in replies)
        if ending is not None:
            reward, stop, _ = ending
            return Transition(replies, reward=reward, stop=stop, metrics=metrics, next_state=results)
        before = self._snapshot
        self._snapshot, image = self._observe()
        replies.append({"role": "user", "content": self._page_content(image)})
        # Clipped as the page the agent sees is: one click on a large page must not put
        # megabytes into what a judge reads.
        changes = clip(page_changes(before, self._snapshot), self.max_snapshot_chars)
        return Transition(replies, metrics=metrics, next_state=f"{results}\n{changes}")

    def _tool(self, call: ToolCall, metrics: dict[str, float]) -> tuple[str, tuple[float, bool, str] | None]:
        """Run one tool call; (what the agent reads, (reward, success, why) if the page ended)."""
        session, task = self._require()
        with session.guard(f"running {call.name}"):
            try:
                text = perform(session, call, timeout_s=self.action_timeout_s, viewport=task.viewport)
                metrics["actions"] += 1
            except ActionError as exc:
                text = str(exc)
                metrics["invalid_action"] = 1.0
            self._stay_on_task()
        return text, self._score(final=False)

    def _score(self, *, final: bool) -> tuple[float, bool, str] | None:
        """(reward, success, why) once the episode is over, else None. ``final``: the agent
        or a budget ends it now, so read the reward whatever the page says."""
        session, task = self._require()
        page = session.page
        with session.guard("reading the reward"):
            if task.suite == "miniwob":
                outcome = miniwob.read_outcome(page)
                if not outcome.done:
                    return (0.0, False, "The task was not finished: reward 0.") if final else None
                raw, success = outcome.raw_reward, outcome.raw_reward > 0
                why = f"The page ended the task: reward {raw:g}" + \
                      (f" ({outcome.reason})." if outcome.reason else ".")
            else:
                if not final and (task.done is None or not self._task_script(task, "done", task.done)):
                    return None
                raw = self._folder_reward(task)
                success = raw >= 1.0
                why = f"The task is scored: reward {raw:g}."
        reward = float(success) if self.reward_mode == "success" else raw
        return reward, success, why

    def _task_script(self, task: WebTask, field: str, expression: str) -> Any:
        """Evaluate one of the task's JavaScript expressions; a script error is the task's
        bug, reported as such (the browser is fine and stays)."""
        from playwright.sync_api import Error as PlaywrightError

        session, _ = self._require()
        try:
            return session.page.evaluate(f"() => ({expression})")
        except PlaywrightError as exc:
            if session.broken is not None or session.page.is_closed():
                raise
            raise BrowserError(f"task {task.id}: its `{field}` expression failed: "
                               f"{str(exc).splitlines()[0]}; fix it in {task.source}") from None

    def _folder_reward(self, task: WebTask) -> float:
        session, _ = self._require()
        if task.reward_python is not None:
            try:
                value = python_reward(task.reward_python)(session.page)
            except Exception as exc:  # the task's own code: its bug, said as such
                if session.broken is not None:
                    raise
                raise BrowserError(f"task {task.id}: reward_python raised {type(exc).__name__}: "
                                   f"{exc}; fix {task.reward_python}") from exc
        else:
            assert task.reward is not None
            value = self._task_script(task, "reward", task.reward)
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, (int, float)) or not -1.0 <= float(value) <= 1.0:
            raise BrowserError(f"task {task.id}: its reward gave {value!r:.60}, not a number in "
                               f"[-1, 1]; fix `reward` in {task.source}")
        return float(value)

    def _on_truncate(self, reason: StopReason, transition: Transition) -> Transition:
        try:
            reward, success, why = self._score(final=True) or (0.0, False, "")
        except BrowserError as exc:
            transition.info["error"] = f"BrowserError: the reward could not be read: {exc}"
            return transition
        budget = "Time is up" if reason is StopReason.TIME_LIMIT else "The turn budget is used up"
        transition.messages.append({"role": "user", "content": f"{budget}. {why}"})
        transition.reward += reward
        transition.metrics["solved"] = float(success)
        return transition

    # ---- the page -----------------------------------------------------------------------
    def _observe(self) -> tuple[str, str | None]:
        """The snapshot now, and a screenshot data URL when the agent sees one; both
        checked to come from the task's page (it may have navigated since the action)."""
        session, task = self._require()
        with session.guard("reading the page"):
            url, snapshot = take_snapshot(session.page, task.root)
            self._check_on_task(url)
            image = None
            if self.obs_mode != "text":
                region = task.clip or (0, 0, *task.viewport)
                png = session.page.screenshot(type="png", clip=dict(zip(("x", "y", "width", "height"), region)))
                self._check_on_task(session.page.url)
                image = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        return snapshot, image

    def _page_content(self, image: str | None, intro: str = "") -> str | list[dict[str, Any]]:
        if self.obs_mode == "screenshot":
            text = f"{intro}The page (screenshot):"
        else:
            text = f"{intro}The page:\n{clip(self._snapshot, self.max_snapshot_chars) or '(empty)'}"
        if image is None:
            return text
        return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": image}}]

    def _stay_on_task(self) -> None:
        """Close pop-up windows; fail the episode if the page left the task's site."""
        session, _ = self._require()
        for other in session.page.context.pages:
            if other != session.page:
                other.close()
        self._check_on_task(session.page.url)

    def _check_on_task(self, url: str) -> None:
        """Raise BrowserError unless ``url`` is the task's page: the env's server (same
        scheme, host and port) and the task's path (a MiniWoB task's one file, a folder
        task's folder)."""
        _, task = self._require()
        assert self._server is not None
        parts = urllib.parse.urlsplit(url)
        same_origin = f"{parts.scheme}://{parts.netloc}" == self._server.origin
        home = f"/{task.mount}/{task.page}"
        allowed = home if task.suite == "miniwob" else f"/{task.mount}/{task.id}/"
        if same_origin and (parts.path == allowed or (task.suite != "miniwob" and parts.path.startswith(allowed))):
            return
        where = (parts.path if same_origin else url) or url
        where = where if len(where) <= 200 else where[:200] + "..."
        raise BrowserError(f"the page navigated away from task {task.id} (to {where})")

    def evaluate(self, expression: str, arg: Any = None) -> Any:
        """Evaluate JavaScript in the episode's page (for oracles, checks and tests; agents
        act through the tools)."""
        session, _ = self._require()
        with session.guard("evaluating a script"):
            return session.page.evaluate(expression, arg)

    def ref_of(self, selector: str) -> str | None:
        """The ref of the first visible element matching the CSS ``selector`` (searching
        every frame), after a fresh snapshot gave refs to what is on the page."""
        session, task = self._require()
        with session.guard("finding a ref"):
            take_snapshot(session.page, task.root)  # gives refs; what the agent saw stays as it was
            for frame in session.page.frames:
                ref = frame.evaluate("s => { for (const el of document.querySelectorAll(s)) { "
                                     "const r = el.getAttribute('data-clawgym-ref'); if (r) return r; } "
                                     "return null; }", selector)
                if ref:
                    return ref
        return None

    def _require(self) -> tuple[BrowserSession, WebTask]:
        if self._session is None or self._task is None:
            raise BrowserError("no episode is open; call reset() first")
        return self._session, self._task

    # ---- resources --------------------------------------------------------------------
    def _release(self) -> None:
        self._task = None
        if self._session is not None:
            self._session.close_page()

    def _shutdown(self) -> None:
        session, self._session = self._session, None
        server, self._server = self._server, None
        if session is not None:
            session.close()
        if server is not None:
            server.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_session"] = state["_server"] = state["_task"] = None
        return state


def _mount_dir(task: WebTask, tasks_dir: str | None) -> Any:
    if task.suite == "miniwob":
        return miniwob.html_dir()
    if task.suite == "clawgym":
        return TASKS_DIR
    assert tasks_dir is not None
    return tasks_dir


def _task_pool(suite: str, tasks_dir: str | None) -> dict[str, WebTask]:
    found: list[WebTask] = []
    if suite in ("miniwob", "all"):
        found += miniwob.load_miniwob_tasks()
    if suite in ("clawgym", "all"):
        found += load_tasks(TASKS_DIR)
    if tasks_dir is not None:
        found += load_tasks(tasks_dir, suite="user")
    elif suite == "user":
        raise ValueError("suite='user' needs tasks_dir=<a folder of task folders>")
    pool = pool_by_id(found)
    return pool


def _select(pool: dict[str, WebTask], tasks: str | list[str], split: str) -> list[str]:
    if isinstance(tasks, str) and tasks in ("default", "all"):
        in_split = {i: t for i, t in pool.items() if split == "all" or t.split in (split, "all")}
        if tasks == "all":
            ids = sorted(in_split)
        else:
            ids = sorted(i for i, t in in_split.items() if t.suite != "miniwob" or i in miniwob.DEFAULT_SUBSET)
        if not ids:
            raise ValueError(f"no task of the suite is in split={split!r}; use split='all' or "
                             "widen the selection")
        return ids
    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks)
             if isinstance(t, str) and t.strip()]
    if not names or (not isinstance(tasks, str) and not all(isinstance(t, str) for t in tasks)):
        raise ValueError(f"tasks must be 'default', 'all', or a list (or comma-separated string) "
                         f"of task ids; got {tasks!r:.80}")
    missing = [n for n in names if n not in pool]
    if missing:
        excluded = [n for n in missing if n in miniwob.EXCLUDED]
        why = f" ({excluded[0]} is excluded: {miniwob.EXCLUDED[excluded[0]]})" if excluded else ""
        raise ValueError(f"tasks {missing[:5]} are not tasks of the suite{why}; "
                         "`python -m envs.gui list` shows them")
    return names
