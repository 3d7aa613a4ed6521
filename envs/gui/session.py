"""One Chromium per env, shared by its episodes; a fresh browser context per episode.

:class:`BrowserSession` owns a Playwright driver and the browser it launched (known by
pid, see ``envs.browser``), opens each episode's page in a new context (no cookies,
storage or cache carried over), and turns every way the browser can fail into a
:class:`BrowserError` (an ``EnvError``: the episode ends with ``info["error"]`` and is not
trained on):

- a page that stops answering (a script that never yields) trips a watchdog, which kills
  the browser so the blocked call returns;
- a renderer that crashes, or a browser that dies, fails the next call;
- a page that navigates off the task is caught after each action.

After any of these the browser is marked broken and the next episode launches a new one.

Given an ``origin``, the browser sends every request it makes to that origin's server
as to an HTTP proxy, loopback included (``confined_to``); ``envs.gui.server.PageServer``
serves its own pages and refuses the rest, so a page reaches no other port of the
machine. Being in the browser's network stack, this covers every way a page (or a
worker) opens a connection: navigations, frames, fetch and XHR, images, WebSockets,
EventSource, beacons, prefetch and preconnect, service workers (Playwright's
``service_workers="block"`` only replaces ``navigator.serviceWorker.register``). WebRTC's
UDP, which no HTTP proxy carries, is turned off.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from envs.browser import alive, find_browser_pid, kill_tree, launch_chromium, process_tree, wait_gone
from envs.errors import EnvError

PAGE_JS = (Path(__file__).parent / "page.js").read_text(encoding="utf-8")
OFFLINE_ARGS = (
    # Every host name but loopback fails to resolve: a page cannot reach the network,
    # and fails fast instead of waiting on DNS.
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    # WebRTC sends STUN over UDP to any address a page names, around any HTTP proxy;
    # this leaves it only what goes through the proxy (which refuses it).
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-extensions", "--mute-audio", "--disable-dev-shm-usage",
)


def confined_to(origin: str) -> tuple[str, ...]:
    """Chromium switches that send every request to ``origin``'s server as to an HTTP
    proxy. Chromium goes direct to loopback whatever the proxy settings unless the bypass
    list says ``<-loopback>``; the list holds nothing else, so nothing goes direct."""
    return (f"--proxy-server={origin}", "--proxy-bypass-list=<-loopback>")


class BrowserError(EnvError):
    """The browser failed the episode (crashed, hung, died, left the task's page)."""


class BrowserSession:
    """A Chromium that lives across episodes. Use from one thread (Playwright's rule).

    Arguments:
        page_timeout_s: how long one guarded operation (an action with its snapshot, a
            page load) may take before the page counts as hung and the browser is killed.
        origin: the server every request goes through (``http://127.0.0.1:<port>``, a
            ``PageServer``, which refuses other origins); None lets pages reach any port
            of loopback (a benchmark's raw browser).
    """

    def __init__(self, page_timeout_s: float = 15.0, origin: str | None = None) -> None:
        self.page_timeout_s = page_timeout_s
        self.origin = origin
        self.launches = 0
        """Browsers launched so far (a recovery after a fault launches one more)."""
        self._playwright: Any = None
        self._browser: Any = None
        self._pid: int | None = None
        self._profile: str | None = None
        self._context: Any = None
        self._page: Any = None
        self._broken: str | None = None  # why the browser cannot be used again

    # ---- lifecycle ----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        """The browser's process id (its renderers and helpers are under it)."""
        return self._pid

    def pids(self) -> list[int]:
        """Every live process of this session's browser."""
        return process_tree(self._pid) if self._pid is not None else []

    def start(self) -> None:
        """Make sure a working browser is up: launch one, or replace a broken or dead one."""
        if self._browser is not None and self.broken is None \
                and (self._pid is None or alive([self._pid])):
            return
        self._stop_browser()
        if self._playwright is None:
            self._playwright = _acquire_driver()
        marker = uuid.uuid4().hex
        try:
            confinement = confined_to(self.origin) if self.origin is not None else ()
            self._browser = launch_chromium(self._playwright, marker=marker,
                                            extra_args=(*OFFLINE_ARGS, *confinement))
        except Exception as exc:
            raise BrowserError(f"Chromium did not start: {type(exc).__name__}: {_first_line(exc)}") from exc
        self._pid = find_browser_pid(marker)
        self._profile = _profile_dir(self._pid)
        self._broken = None
        self.launches += 1

    def new_page(self, *, viewport: tuple[int, int], seed: int) -> Any:
        """A page in a fresh context (the previous episode's is closed first), with the
        episode's seed and clawgym's page helper installed before any page script runs."""
        self.close_page()
        self.start()
        with self.guard("opening a page"):
            context = self._browser.new_context(
                viewport={"width": viewport[0], "height": viewport[1]}, timezone_id="UTC",
                locale="en-US", service_workers="block", accept_downloads=False)
            self._context = context
            context.add_init_script(f"window.__clawgymSeed = {int(seed) & 0xFFFFFFFF};\n{PAGE_JS}")
            self._page = context.new_page()
            self._page.on("crash", self._on_crash)
        return self._page

    @property
    def page(self) -> Any:
        if self._page is None:
            raise BrowserError("no page is open; reset() the env first")
        return self._page

    def close_page(self) -> None:
        """Close the episode's context; a browser that will not close it is killed."""
        context, self._context, self._page = self._context, None, None
        if context is None or self._broken is not None:
            return
        try:
            with self.guard("closing the page", timeout=min(self.page_timeout_s, 5.0)):
                context.close()
        except BrowserError:
            pass  # the browser was killed and marked broken; the next start replaces it

    def close(self) -> None:
        """Close the browser and the driver; kill whatever of the browser is left."""
        self.close_page()
        self._stop_browser()
        if self._playwright is not None:
            self._playwright = None
            _release_driver()

    def _stop_browser(self) -> None:
        browser, self._browser = self._browser, None
        pids = self.pids()
        if browser is not None and self._broken is None:
            with contextlib.suppress(Exception), self.guard("closing the browser", timeout=10.0):
                browser.close()
        kill_tree(alive(pids))
        wait_gone(pids)
        if self._profile is not None:  # a killed browser leaves its profile behind
            shutil.rmtree(self._profile, ignore_errors=True)
        self._pid = self._profile = None
        self._context = self._page = None

    # ---- failures -----------------------------------------------------------------------
    def kill(self, why: str) -> None:
        """Kill the browser now (any thread may call this): blocked calls fail at once."""
        if self._broken is None:
            self._broken = why
        pids = self.pids()
        kill_tree(pids)
        wait_gone(pids)

    @property
    def broken(self) -> str | None:
        """Why the browser cannot be used any more (None while it can)."""
        if self._broken is None and self._browser is not None and not self._browser.is_connected():
            self._broken = "the browser process exited"
        return self._broken

    def _on_crash(self, _page: Any) -> None:
        if self._broken is None:
            self._broken = "the page's renderer crashed"

    @contextlib.contextmanager
    def guard(self, what: str, timeout: float | None = None) -> Iterator[None]:
        """Run Playwright calls under the watchdog; any browser failure inside becomes a
        :class:`BrowserError` saying what was being done and why it failed."""
        from playwright.sync_api import Error as PlaywrightError

        seconds = self.page_timeout_s if timeout is None else timeout
        timer = threading.Timer(seconds, self.kill, args=(f"the page did not answer for {seconds:g} s "
                                                          f"while {what} (hung)",))
        timer.daemon = True
        timer.start()
        try:
            yield
        except PlaywrightError as exc:
            raise BrowserError(self.failure(what, exc)) from exc
        finally:
            timer.cancel()
            timer.join()

    def failure(self, what: str, exc: BaseException) -> str:
        """One sentence for ``info["error"]``: what failed and why, marking the browser broken."""
        why = self.broken
        if why is None:
            text = str(exc)
            if "crash" in text.lower():
                why = "the page's renderer crashed"
            elif "closed" in text.lower():
                why = "the browser or page was closed"
            else:
                why = _first_line(exc)
            self._broken = why
        return f"{why} (while {what}); the next reset starts a fresh browser"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a BrowserSession holds a live browser and cannot be pickled")


# Playwright's sync API runs one driver per thread (a second one in the same thread fails
# with "using Playwright Sync API inside the asyncio loop"), so sessions on one thread
# share it, counted, and the last to close stops it.
_thread_driver = threading.local()


def _acquire_driver() -> Any:
    entry = getattr(_thread_driver, "entry", None)
    if entry is None:
        from playwright.sync_api import sync_playwright

        entry = _thread_driver.entry = [sync_playwright().start(), 0]
    entry[1] += 1
    return entry[0]


def _release_driver() -> None:
    entry = getattr(_thread_driver, "entry", None)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        _thread_driver.entry = None
        with contextlib.suppress(Exception):
            entry[0].stop()


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip() and not line.startswith("=")]
    return lines[0].strip() if lines else type(exc).__name__


def _profile_dir(pid: int | None) -> str | None:
    """The temporary profile Playwright made for the browser (from its command line)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return None
    for arg in args:
        if arg.startswith("--user-data-dir="):
            return arg.split("=", 1)[1]
    return None
