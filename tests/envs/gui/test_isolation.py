"""A task page reaches its own server and nothing else: real servers on other 127.0.0.1
ports (HTTP, WebSocket, UDP) record every connection, and neither a hostile page's scripts
nor an agent's actions may make a single one, or bring their content into an observation.
A page that leaves the task, at load or after an action, ends the episode without showing
where it went."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from envs.gui import BrowserEnv, BrowserError
from envs.gui.oracles import tool_call

from .conftest import write_tasks

pytestmark = pytest.mark.browser

SECRET = "FOREIGN-SECRET"
OWN = "OWN-CONTENT"
TASK = "instruction: Stay.\nreward: '0'\nreference: [done]\n"


class Foreign:
    """Servers a task page must never reach, each recording every connection it gets:
    HTTP (any path answers SECRET, to any origin), WebSocket (sends SECRET), UDP."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Http(ThreadingHTTPServer):
            daemon_threads = True

            def verify_request(self, request: object, client_address: object) -> bool:
                hits.append("http")
                return True

        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                events = self.path.startswith("/events")
                body = (f"data: {SECRET}\n\n" if events else
                        f"<html><body><h1>{SECRET}</h1><button>{SECRET}</button></body></html>").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if events else "text/html")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        class Socket(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                hits.append("websocket")
                key = ""
                while (line := self.rfile.readline().decode().strip()):
                    if line.lower().startswith("sec-websocket-key:"):
                        key = line.split(":", 1)[1].strip()
                accept = base64.b64encode(hashlib.sha1(
                    (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
                self.wfile.write(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                  f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").encode())
                self.wfile.write(bytes([0x81, len(SECRET)]) + SECRET.encode())  # one text frame
                self.rfile.read(1)  # hold the socket open until the page closes it

        self._http = Http(("127.0.0.1", 0), Page)
        self._ws = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Socket)
        self._ws.daemon_threads = True
        self._udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._udp.bind(("127.0.0.1", 0))
        self._udp.settimeout(0.2)
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self._http, self._ws)]
        self._threads.append(threading.Thread(target=self._receive, daemon=True))
        for thread in self._threads:
            thread.start()
        self.http = f"http://127.0.0.1:{self._http.server_address[1]}"
        self.ws = f"ws://127.0.0.1:{self._ws.server_address[1]}"
        self.udp = f"127.0.0.1:{self._udp.getsockname()[1]}"

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                self._udp.recvfrom(2048)
            except OSError:
                continue
            self.hits.append("udp")

    def close(self) -> None:
        self._closed.set()
        for server in (self._http, self._ws):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._udp.close()


PROBE = """<!DOCTYPE html><html><head>
<link rel="prefetch" href="{http}/prefetch"><link rel="preconnect" href="{http}">
<link rel="stylesheet" href="{http}/style.css"></head><body>
<div id="out"></div>
<img src="{http}/img"><iframe src="{http}/frame"></iframe>
<script src="{http}/script.js"></script>
<script>
const out = document.getElementById("out");
const show = text => {{ const p = document.createElement("p"); p.textContent = text; out.appendChild(p); }};
const settle = p => Promise.race([p, new Promise(r => setTimeout(r, 2000))]).catch(() => {{}});
const worker = `fetch("{http}/worker").then(r => r.text()).then(t => postMessage(t), () => postMessage("-"))`;
window.probed = Promise.all([
  settle(fetch("own.txt").then(r => r.text()).then(show)),
  settle(fetch("{http}/fetch").then(r => r.text()).then(show)),
  settle(new Promise(resolve => {{ const x = new XMLHttpRequest(); x.open("GET", "{http}/xhr");
    x.onload = () => {{ show(x.responseText); resolve(); }}; x.onerror = resolve; x.send(); }})),
  settle(new Promise(resolve => {{ const s = new WebSocket("{ws}");
    s.onmessage = e => {{ show(e.data); resolve(); }}; s.onerror = resolve; }})),
  settle(new Promise(resolve => {{ const s = new EventSource("{http}/events");
    s.onmessage = e => {{ show(e.data); s.close(); resolve(); }}; s.onerror = () => {{ s.close(); resolve(); }}; }})),
  settle(new Promise(resolve => {{ const w = new Worker(URL.createObjectURL(new Blob([worker])));
    w.onmessage = e => {{ show(e.data); resolve(); }}; }})),
  // Playwright's service_workers="block" only replaces navigator.serviceWorker.register.
  settle(ServiceWorkerContainer.prototype.register.call(navigator.serviceWorker, "sw.js")
    .then(() => new Promise(r => setTimeout(r, 500)))),
  settle((async () => {{
    const pc = new RTCPeerConnection({{iceServers: [{{urls: "stun:{udp}"}},
      {{urls: "turn:{http_host}?transport=tcp", username: "u", credential: "c"}}]}});
    pc.createDataChannel("d");
    await pc.setLocalDescription(await pc.createOffer());
    await new Promise(r => setTimeout(r, 1500));
    pc.close(); }})()),
  navigator.sendBeacon("{http}/beacon", "x"),
  window.open("{http}/popup"),
]).then(() => "settled");
</script></body></html>"""
PORTAL = """<!DOCTYPE html><html><body>
<label for="url">URL</label> <input id="url">
<button id="open" onclick="location.href = url.value">Open</button>
<button id="fetch" onclick="window.pending = fetch(url.value).then(r => r.text()).then(show, () => show('fetch failed'))">Fetch</button>
<button id="socket" onclick="window.pending = new Promise(done => {{ const s = new WebSocket(url.value);
  s.onmessage = e => {{ show(e.data); done(); }}; s.onerror = () => {{ show('socket failed'); done(); }}; }})">Socket</button>
<button id="frame" onclick="const f = document.createElement('iframe'); f.src = url.value; document.body.appendChild(f)">Frame</button>
<div id="out"></div>
<script>const show = text => {{ const p = document.createElement("p"); p.textContent = text;
  document.getElementById("out").appendChild(p); }};</script>
</body></html>"""


@pytest.fixture(scope="module")
def foreign() -> Iterator[Foreign]:
    servers = Foreign()
    yield servers
    servers.close()


@pytest.fixture(scope="module")
def env(browser_ok: None, foreign: Foreign, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserEnv]:
    ports = {"http": foreign.http, "ws": foreign.ws, "udp": foreign.udp,
             "http_host": foreign.http.split("//", 1)[1]}
    root = write_tasks(tmp_path_factory.mktemp("hostile-tasks"), {
        "probe": (PROBE.format(**ports), TASK),
        "portal": (PORTAL.format(), TASK),
        # Pages that leave as they load: to another task's page, and to a foreign port
        # under the very path the task's page has.
        "hop": ("<p>hop</p><script>location.replace('/user/portal/index.html')</script>", TASK),
        "hop-away": (f"<p>hop</p><script>location.replace('{foreign.http}/user/hop-away/index.html')"
                     "</script>", TASK),
    })
    (root / "probe" / "own.txt").write_text(OWN)
    (root / "probe" / "sw.js").write_text(f"fetch('{foreign.http}/service-worker');")
    made = BrowserEnv(suite="user", tasks_dir=str(root), tasks="all", action_timeout_s=1.0,
                      page_timeout_s=5.0, max_turns=20)
    yield made
    made.close()


def act(env: BrowserEnv, name: str, **arguments: object) -> tuple[list[dict], dict]:
    obs, _, _, _, info = env.step(tool_call(name, arguments, "call_1"))
    return obs, info


def test_a_hostile_page_reaches_its_own_server_and_no_other_port(env, foreign):
    obs, _ = env.reset(seed=0, options={"task_id": "probe"})
    assert env.evaluate("() => window.probed") == "settled"
    later, info = act(env, "scroll", direction="down")  # the page as it is after every attempt
    seen = json.dumps([obs, later, info["next_state"]])
    assert OWN in seen and SECRET not in seen and foreign.hits == []
    assert len(env.session.page.context.pages) == 1  # the pop-up was closed


def test_an_agent_cannot_make_a_page_fetch_or_open_a_socket_to_another_port(env, foreign):
    env.reset(seed=0, options={"task_id": "portal"})
    seen = []
    for url, button, failed in ((f"{foreign.http}/x", "#fetch", "fetch failed"),
                                (foreign.ws, "#socket", "socket failed")):
        seen += act(env, "type", ref=env.ref_of("#url"), text=url)
        seen += act(env, "click", ref=env.ref_of(button))
        env.evaluate("() => window.pending")
        obs, info = act(env, "scroll", direction="down")
        assert failed in obs[-1]["content"] and "stop_reason" not in info
        seen += obs, info["next_state"]
    seen += act(env, "type", ref=env.ref_of("#url"), text=f"{foreign.http}/frame")
    seen += act(env, "click", ref=env.ref_of("#frame"))
    assert SECRET not in json.dumps(seen) and foreign.hits == []


def test_an_agent_cannot_navigate_the_page_to_another_port(env, foreign):
    env.reset(seed=0, options={"task_id": "portal"})
    act(env, "type", ref=env.ref_of("#url"), text=f"{foreign.http}/user/portal/index.html")  # the task's own path
    obs, reward, terminated, truncated, info = env.step(tool_call("click", {"ref": env.ref_of("#open")}, "c"))
    assert (obs, truncated, info["stop_reason"]) == ([], True, "error")
    assert f"navigated away from task portal (to {foreign.http}/user/portal/index.html)" in info["error"]
    assert SECRET not in json.dumps([info, env.transcript]) and foreign.hits == []


@pytest.mark.parametrize("task_id, where", [("hop", "/user/portal/index.html"),
                                            ("hop-away", "{http}/user/hop-away/index.html")])
def test_a_page_that_leaves_as_it_loads_fails_the_reset_unseen(env, foreign, task_id, where):
    with pytest.raises(BrowserError, match="navigated away") as caught:
        env.reset(seed=0, options={"task_id": task_id})
    assert f"(to {where.format(http=foreign.http)})" in str(caught.value)
    assert SECRET not in str(caught.value) and foreign.hits == []
    obs, _ = env.reset(seed=0, options={"task_id": "portal"})  # the env goes on
    assert 'button "Open"' in obs[1]["content"]


def test_the_page_server_answers_for_its_own_origin_only(tmp_path):
    from envs.gui.server import PageServer

    (tmp_path / "page.html").write_text(OWN)
    server = PageServer({"site": tmp_path})
    port = server.origin.rsplit(":", 1)[1]

    def ask(request_line: str) -> str:
        with socket.create_connection(("127.0.0.1", int(port))) as conn:
            conn.sendall(f"{request_line}\r\nHost: x\r\n\r\n".encode())
            return b"".join(iter(lambda: conn.recv(65536), b"")).decode(errors="replace")

    try:
        for line in ("GET /site/page.html HTTP/1.1", f"GET {server.origin}/site/page.html HTTP/1.1"):
            assert ask(line).startswith("HTTP/1.0 200") and ask(line).endswith(OWN)
        for line in (f"GET http://127.0.0.1:{int(port) + 1}/site/page.html HTTP/1.1",
                     f"GET http://localhost:{port}/site/page.html HTTP/1.1",
                     f"CONNECT 127.0.0.1:{port} HTTP/1.1", "CONNECT example.com:443 HTTP/1.1"):
            reply = ask(line)
            assert reply.startswith("HTTP/1.0 403") and OWN not in reply, line
    finally:
        server.close()
