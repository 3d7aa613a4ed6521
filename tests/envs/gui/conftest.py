"""Fixtures for the browser env: a real Chromium, task folders written per test module.

Without Chromium or Playwright the tests skip with the reason (fail under ``CI=true``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from envs.browser import browser_unavailable_reason
from envs.gui import BrowserEnv
from tests.helpers import require

WIDGETS = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Widgets</title></head>
<body>
<h1>Widgets</h1>
<p>Pick the <span id="word" style="cursor: pointer">nam</span> link.</p>
<button id="go" onclick="window.log.push('go'); this.textContent = 'Went'">Go</button>
<button id="ghost" style="display: none">Ghost</button>
<button id="later" style="display: none">Later</button>
<button id="show" onclick="document.getElementById('later').style.display = 'inline'">Show</button>
<button id="remove" onclick="document.getElementById('go').remove()">Remove go</button>
<p><label><input type="checkbox" id="agree"> I agree</label></p>
<p><label for="name">Name</label> <input id="name"></p>
<p><label for="colour">Colour</label>
<select id="colour"><option value="r">Red</option><option value="b">Blue</option></select></p>
<div id="box" tabindex="0" style="height: 60px; overflow: auto"><div style="height: 400px">tall</div></div>
<button id="hover" onmouseover="window.hovered = true">Hover me</button>
<div style="height: 1500px"></div>
<script>
window.log = [];
window.hovered = false;
document.getElementById('word').addEventListener('click', function () { window.log.push('word'); });
document.addEventListener('keydown', function (e) { window.log.push('key:' + e.key); });
</script>
</body></html>
"""
TASKS = {
    "widgets": (WIDGETS, """instruction: Press Go.
reward: "window.log.includes('go') ? 1 : 0"
reference:
  - click: {selector: "#go"}
"""),
    "covered": ("""<!DOCTYPE html><html><body>
<button id="under" style="position: absolute; left: 20px; top: 20px"
        onclick="window.clicked = true">Under</button>
<div style="position: absolute; left: 0; top: 0; width: 200px; height: 100px; background: #ddd"></div>
<script>window.clicked = false;</script></body></html>""", """instruction: Click Under.
reward: "window.clicked ? 1 : 0"
reference:
  - click: {selector: "#under"}
"""),
    "hang": ("""<!DOCTYPE html><html><body>
<button id="spin" onclick="while (true) {}">Spin</button></body></html>""", """instruction: Spin.
reward: "0"
reference: [done]
"""),
    "stuck": ("""<!DOCTYPE html><html><body><script>while (true) {}</script></body></html>""",
              """instruction: Wait.
reward: "0"
reference: [done]
"""),
    "large": ("""<!DOCTYPE html><html><body>
<button id="grow" onclick="const list = document.getElementById('list');
  for (let i = 0; i < 5000; i++) list.appendChild(document.createElement('li')).textContent = 'item ' + i;">Grow</button>
<ul id="list"></ul></body></html>""", """instruction: Grow the list.
reward: "document.querySelectorAll('li').length > 0 ? 1 : 0"
reference:
  - click: {selector: "#grow"}
"""),
    "leave": ("""<!DOCTYPE html><html><body>
<a id="away" href="/user/elsewhere.html">Away</a></body></html>""", """instruction: Stay.
reward: "0"
reference: [done]
"""),
}


def write_tasks(root: Path, tasks: dict[str, tuple[str, str]]) -> Path:
    """One folder per task: ``index.html`` and ``task.yaml``."""
    for name, (html, spec) in tasks.items():
        (root / name).mkdir(parents=True)
        (root / name / "index.html").write_text(html)
        (root / name / "task.yaml").write_text(spec)
    return root


@pytest.fixture(scope="module")
def browser_ok() -> None:
    reason = browser_unavailable_reason()
    require(reason is None, str(reason))


@pytest.fixture(scope="module")
def miniwob_ok() -> None:
    from envs.gui.miniwob import MiniWoBUnavailable, html_dir

    try:
        html_dir()
    except MiniWoBUnavailable as exc:
        require(False, str(exc))


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("gui-tasks"), TASKS)


@pytest.fixture
def make_env(browser_ok: None, pages: Path) -> Iterator[Callable[..., BrowserEnv]]:
    """Factory for browser envs on the test pages (``suite="user"``); all closed after."""
    made: list[BrowserEnv] = []

    def make(**kwargs: object) -> BrowserEnv:
        options = {"suite": "user", "tasks_dir": str(pages), "tasks": "all",
                   "action_timeout_s": 1.0, "page_timeout_s": 5.0, **kwargs}
        made.append(BrowserEnv(**options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for env in made:
        env.close()
