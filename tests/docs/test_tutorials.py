"""Every tutorial (docs/tutorials/*.md) runs as written, block by block, in page order.

One test per page, in a fresh temporary folder that is the working directory, with this
Python (the repository's .venv) as ``python`` on PATH and the repository on PYTHONPATH:

* a ```` ```python ```` block whose first line is ``# file: <relative path>`` is written to
  that file;
* every other ```` ```python ```` block is executed, all of a page's in one namespace (one
  Python process that lives as long as the page);
* in a ```` ```console ```` block, each line starting with ``$ `` is run with bash and must
  exit 0 (a line ending in ``\\`` continues on the next); the other lines are the output
  shown to the reader and are not checked;
* any other fence (```` ```bash ````, ```` ```toml ````, a MyST directive, ...) is shown,
  not run.

A page has :data:`PAGE_TIMEOUT_S` seconds in all. Whatever a page started (a server put in
the background, a daemon) is killed when it ends: every process it started carries a
marker in its environment, and every process with that marker is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pytest

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = REPO / "docs" / "tutorials"
PAGE_TIMEOUT_S = 180
"""A tutorial should finish in well under a minute on 2 cores; this is the hard stop."""
MARKER = "CLAWGYM_TUTORIAL_RUN"


@dataclass
class Block:
    kind: str  # "file", "python" or "console"
    line: int  # 1-based line of the opening fence
    text: str
    path: str = ""  # kind == "file": where the block is written


def parse_blocks(markdown: str) -> list[Block]:
    """The runnable blocks of a page, in order (the module docstring says which run)."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening.groups()
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1  # the closing fence
        text = "\n".join(body) + "\n"
        if info == "python":
            target = re.match(r"#\s*file:\s*(\S+)\s*$", body[0]) if body else None
            if target:
                blocks.append(Block("file", start + 1, "\n".join(body[1:]) + "\n", target.group(1)))
            else:
                blocks.append(Block("python", start + 1, text))
        elif info == "console":
            blocks.append(Block("console", start + 1, text))
    return blocks


def console_commands(text: str) -> list[str]:
    """The ``$ `` lines of a console block, continuation lines joined."""
    commands: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            command = lines[i][2:]
            while command.endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            commands.append(command)
        i += 1
    return commands


# The page's Python process: reads one JSON-encoded block per line on stdin, runs it in one
# namespace, and answers {"ok", "output"} on the file descriptor named by its argument.
WORKER = textwrap.dedent('''
    import contextlib, io, json, os, sys, traceback
    namespace = {"__name__": "__main__"}
    answers = os.fdopen(int(sys.argv[1]), "w")
    for line in sys.stdin:
        block = json.loads(line)
        buffer = io.StringIO()
        ok = True
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            try:
                exec(compile(block["code"], block["name"], "exec"), namespace)
            except BaseException:
                ok = False
                traceback.print_exc()
        answers.write(json.dumps({"ok": ok, "output": buffer.getvalue()}) + "\\n")
        answers.flush()
''')


class Page:
    """One tutorial's run: its folder, environment, Python process and deadline."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page, self.workdir = page, workdir
        self.deadline = time.monotonic() + PAGE_TIMEOUT_S
        self.token = uuid.uuid4().hex
        # This interpreter's own bin folder first (a symlink to a venv's python elsewhere
        # would not find the venv), so `python` is the one running the tests.
        bin_dir = Path(sys.executable).parent
        self.env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                        **{MARKER: self.token})
        self.worker: subprocess.Popen[str] | None = None
        self.log = workdir.parent / f"{workdir.name}-python.log"
        self.answers: TextIO | None = None

    def left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.1)

    def fail(self, block: Block, what: str, output: str) -> None:
        pytest.fail(f"docs/tutorials/{self.page.name}, the {block.kind} block at line {block.line}: "
                    f"{what}\n{output.rstrip()}", pytrace=False)

    def run(self, block: Block) -> None:
        if block.kind == "file":
            target = self.workdir / block.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
        elif block.kind == "python":
            self.run_python(block)
        else:
            for command in console_commands(block.text):
                self.run_console(block, command)

    def run_console(self, block: Block, command: str) -> None:
        # Output goes to a file, not a pipe: a command put in the background (`server &`)
        # keeps a pipe open, and reading it to its end would wait for the server.
        output = self.workdir.parent / f"{self.workdir.name}-console.log"
        with open(output, "w") as sink:
            try:
                done = subprocess.run(["bash", "-c", command], cwd=self.workdir, env=self.env,
                                      stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      timeout=self.left(), start_new_session=True)
            except subprocess.TimeoutExpired:
                self.fail(block, f"`$ {command}` was still running when the page's {PAGE_TIMEOUT_S} s "
                          "ran out", output.read_text(errors="replace"))
        if done.returncode != 0:
            self.fail(block, f"`$ {command}` exited {done.returncode}", output.read_text(errors="replace"))

    def run_python(self, block: Block) -> None:
        if self.worker is None:
            read_end, write_end = os.pipe()
            with open(self.log, "w") as log:  # what child processes print, outside the blocks' capture
                self.worker = subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(write_end)], cwd=self.workdir, env=self.env,
                    text=True, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(write_end,), start_new_session=True)
            os.close(write_end)
            self.answers = os.fdopen(read_end)
        assert self.worker.stdin is not None and self.answers is not None
        name = f"{self.page.name}:{block.line}"
        self.worker.stdin.write(json.dumps({"code": block.text, "name": name}) + "\n")
        self.worker.stdin.flush()
        answer = _read_line(self.answers, self.left())
        if answer is None:
            self.fail(block, f"still running when the page's {PAGE_TIMEOUT_S} s ran out", self.log.read_text())
        if not answer:
            self.fail(block, "ended the page's Python process", self.log.read_text())
        result = json.loads(answer)
        if not result["ok"]:
            self.fail(block, "raised", result["output"] + self.log.read_text())

    def close(self) -> None:
        """Kill the page's Python process and everything the page started."""
        if self.worker is not None:
            with contextlib.suppress(OSError):
                self.worker.stdin.close()  # type: ignore[union-attr]
            self.worker.kill()
            self.worker.wait()
            self.answers.close()  # type: ignore[union-attr]
        for pid in _processes_marked(self.token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _read_line(stream: TextIO, timeout_s: float) -> str | None:
    """A line of ``stream``, or None if none came within ``timeout_s`` ("" at its end)."""
    ready, _, _ = select.select([stream], [], [], timeout_s)
    return stream.readline() if ready else None


def _processes_marked(token: str) -> list[int]:
    needle = f"{MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


PAGES = sorted(TUTORIALS.glob("*.md"))


@pytest.mark.timeout(PAGE_TIMEOUT_S + 60)
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_tutorial_runs(page: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    run = Page(page, workdir)
    try:
        for block in parse_blocks(page.read_text()):
            run.run(block)
    finally:
        run.close()


def test_parse_blocks_follows_the_convention() -> None:
    page = textwrap.dedent('''
        # A page

        ```python
        # file: pkg/mod.py
        X = 1
        ```

        ```python
        import pkg.mod
        ```

        ```console
        $ python -c "print(1)" \\
            --flag
        1
        $ true
        ```

        ```bash
        make setup
        ```

        ````{note}
        ```python
        inside = "a directive: shown"
        ```
        ````
    ''')
    blocks = parse_blocks(page)
    assert [(b.kind, b.path) for b in blocks] == [("file", "pkg/mod.py"), ("python", ""), ("console", "")]
    assert blocks[0].text == "X = 1\n" and blocks[0].line == 4
    assert console_commands(blocks[2].text) == ['python -c "print(1)"  --flag', "true"]
