"""The file editor SWE agents use: ``str_replace_editor`` (Anthropic's and SWE-agent's tool).

Commands, each on an absolute ``path``::

    view         a file with line numbers (cat -n), optionally view_range=[start, end]
                 (1-based, end -1 for the end of the file); a directory lists its files
                 up to 2 levels deep, hidden ones skipped
    create       write file_text to a new file (refuses an existing path)
    str_replace  replace old_str, which must occur exactly once, with new_str
                 (default empty); zero or several matches change nothing and say how many
                 and on which lines
    insert       insert new_str after line insert_line (0: at the top)
    undo_edit    revert the last edit of path (per-file history; undoing a create
                 removes the file)

Every problem is an observation for the agent, starting ``Error:``; nothing here raises
for what an agent sends. Each call first runs one command that resolves the path (links
are followed, so editing a symlinked file edits its target) and reads its type, mode (an
edit keeps an executable executable) and size. Paths holding a control character (a
newline would split that command's answer) are refused. Files can be changed under
``/workspace`` and ``/tmp`` only, the sandbox's writable places; ``view`` reads anywhere.

What reaches the trainer's process is bounded whatever the file: ``view`` cuts the shown
lines out inside the sandbox (``sed``, then ``head -c``: at most ``4 * max_chars`` bytes
come back, whether the file is 1 KB or 1 GB); edits read and write the whole file through
the sandbox's host-side, path-checked ``get_file``/``put_file`` (exact bytes, no shell
quoting), so they refuse files over :data:`MAX_EDIT_BYTES` before reading them; edit
results are clipped like views; the undo history holds at most :data:`MAX_HISTORY_BYTES`
(the oldest edits are forgotten first). Deviation from Anthropic's implementation: tabs
are kept as they are (it expands them, which rewrites Makefiles).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from envs.messages import tool_schema
from envs.sandbox import Sandbox

COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
WRITABLE_ROOTS = ("/workspace", "/tmp")
SNIPPET_LINES = 4
"""Lines of context shown around an edit."""
HISTORY_PER_FILE = 20
MAX_EDIT_BYTES = 2 << 20
"""Largest file ``str_replace``, ``insert`` and ``undo_edit`` read whole (sed or python in
``bash`` edit bigger ones)."""
MAX_HISTORY_BYTES = 32 << 20
MAX_HISTORY_ENTRIES = 1000
"""The undo history of an episode, all files together: past either, the oldest edits go."""
CLIPPED = ("<response clipped><NOTE>To save on context only part of this file has been shown "
           "to you. You should retry this tool after you have searched inside the file with "
           "`grep -n` in order to find the line numbers of what you are looking for.</NOTE>")
EDITED = "Review the changes and make sure they are as expected. Edit the file again if necessary."

TOOL = tool_schema(
    "str_replace_editor",
    "View, create and edit files. `view` shows a file with line numbers (or lists a directory "
    "2 levels deep); `create` makes a new file; `str_replace` replaces `old_str`, which must "
    "match exactly once (whitespace included), with `new_str`; `insert` adds `new_str` after "
    "line `insert_line`; `undo_edit` reverts the last edit of the file. Paths are absolute.",
    {
        "command": {"type": "string", "enum": list(COMMANDS), "description": "the command to run"},
        "path": {"type": "string", "description": "absolute path, e.g. /workspace/pkg/module.py"},
        "file_text": {"type": "string", "description": "`create`: the new file's content"},
        "old_str": {"type": "string", "description": "`str_replace`: the exact text to replace"},
        "new_str": {"type": "string", "description": "`str_replace`: the replacement (default empty); "
                                                     "`insert`: the text to insert"},
        "insert_line": {"type": "integer", "minimum": 0,
                        "description": "`insert`: insert after this line (0 for the top)"},
        "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                       "description": "`view`: [start, end] lines, 1-based; end -1 for the end"},
    },
    required=["command", "path"],
)

# One command: the resolved path (NUL-ended, trailing newlines kept), its kind, mode and
# size, and a directory's listing.
_PROBE = r"""p=$(realpath -m -- {path} && echo .) || exit 3
p=${{p%.}}; p=${{p%$'\n'}}
if [ -d "$p" ]; then k=dir; elif [ -f "$p" ]; then k=file; elif [ -e "$p" ]; then k=other; else k=missing; fi
printf '%s\0%s\0' "$p" "$k"
if [ $k = file ]; then stat -c '%a %s' -- "$p"; else echo 0 0; fi
if [ $k = dir ]; then find "$p" -maxdepth 2 -not -path '*/.*' 2>/dev/null | LC_ALL=C sort | head -c {limit}; fi"""

# One command: the file's line count, then lines first..last (``$``: the end), at most
# ``limit`` bytes of them.
_WINDOW = r"""n=$(wc -l < {path}) || exit 3
if [ -s {path} ] && [ "$(tail -c 1 {path} | wc -l)" = 0 ]; then n=$((n + 1)); fi
echo "$n"
sed -n '{first},{last}p{stop}' < {path} | head -c {limit}"""


@dataclass
class _Target:
    path: str
    """The path after resolving links."""
    kind: str
    """file, dir, other or missing."""
    mode: int
    size: int
    listing: str
    """A directory's listing (2 levels, at most ``4 * max_chars`` bytes)."""


@dataclass
class Editor:
    """The editor's state for one episode: each file's undo history."""

    max_chars: int = 16000
    """Longest output shown; the rest is clipped with a note saying how to narrow it."""
    history: dict[str, list[tuple[int, bytes | None]]] = field(default_factory=dict)
    """Resolved path -> (order, earlier contents), latest last (None: the file did not exist)."""
    edits: int = 0
    """Edits recorded so far (orders the history across files)."""

    def clear(self) -> None:
        self.history.clear()

    def run(self, sandbox: Sandbox, arguments: dict[str, object]) -> tuple[str, bool]:
        """Carry out one call; (the observation, whether a file changed)."""
        problem = argument_problem(arguments)
        if problem:
            return problem, False
        command, path = arguments["command"], str(arguments["path"])
        target = self._probe(sandbox, path)
        if isinstance(target, str):
            return target, False
        if command == "view":
            return self._view(sandbox, path, target, arguments.get("view_range")), False
        if command == "create":
            return self._create(sandbox, path, target, arguments.get("file_text"))
        if target.kind == "dir":
            return (f"Error: the path {path} is a directory and only the `view` command can be "
                    "used on directories.", False)
        if command == "undo_edit":
            return self._undo(sandbox, path, target)
        if target.kind != "file":
            return f"Error: the path {path} does not exist. Please provide a valid path.", False
        text = self._read_text(sandbox, path, target)
        if not isinstance(text, tuple):
            return text, False
        content, raw = text
        if command == "str_replace":
            return self._str_replace(sandbox, path, target, content, raw, arguments)
        return self._insert(sandbox, path, target, content, raw, arguments)

    # ---- commands ----------------------------------------------------------------------
    def _view(self, sandbox: Sandbox, path: str, target: _Target, view_range: object) -> str:
        if target.kind == "dir":
            if view_range is not None:
                return "Error: the `view_range` parameter is not allowed when `path` points to a directory."
            return self._clip(f"Here's the files and directories up to 2 levels deep in {path}, "
                              f"excluding hidden items:\n{target.listing}")
        if target.kind != "file":
            return f"Error: the path {path} does not exist. Please provide a valid path."
        first, last = 1, -1
        if view_range is not None:
            if (not isinstance(view_range, list) or len(view_range) != 2
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in view_range)):
                return "Error: invalid `view_range`. It should be a list of two integers, e.g. [10, 40]."
            first, last = view_range
        # sed takes line numbers up to 2**64; past that nothing is shown either way
        limit = 4 * self.max_chars + 4  # bytes: enough for max_chars characters in any encoding
        result = sandbox.exec(_WINDOW.format(
            path=shlex.quote(target.path), first=min(max(first, 1), 1 << 62),
            last="$" if last == -1 or last >= 1 << 62 else max(last, 1),
            stop="" if last == -1 or last >= 1 << 62 else f";{max(last, 1)}q", limit=limit), timeout=60)
        count, _, window = result.stdout.partition("\n")
        if not result.ok or not count.strip().isdigit():
            return f"Error: cannot read {path}: {(result.stderr or result.stdout).strip()[:200]}"
        if view_range is not None:
            chosen = _view_range(view_range, int(count))
            if isinstance(chosen, str):
                return chosen
        lines = _lines(window)
        return self._clip(f"Here's the result of running `cat -n` on {path}:\n{_numbered(lines, first)}\n")

    def _create(self, sandbox: Sandbox, path: str, target: _Target, file_text: object) -> tuple[str, bool]:
        assert isinstance(file_text, str)  # argument_problem checked it
        if target.kind != "missing":
            return (f"Error: file already exists at: {path}. Cannot overwrite files using command "
                    "`create`; use `str_replace` to change it.", False)
        written = self._write(sandbox, target, file_text.encode(), previous=None)
        return (written or f"File created successfully at: {path}", written is None)

    def _str_replace(self, sandbox: Sandbox, path: str, target: _Target, content: str, raw: bytes,
                     arguments: dict[str, object]) -> tuple[str, bool]:
        old, new = str(arguments["old_str"]), str(arguments.get("new_str") or "")
        starts, total = _occurrences(content, old)
        if not total:
            shown = old if len(old) <= 400 else old[:400] + "..."
            return (f"Error: no replacement was performed, old_str `{shown}` did not appear verbatim in "
                    f"{path}. Check whitespace and indentation with `view`.", False)
        if total > 1:
            where = ", ".join(str(content.count("\n", 0, s) + 1) for s in starts)
            return (f"Error: no replacement was performed: old_str occurs {total} times in "
                    f"{path}, starting at lines {where}. Include more surrounding lines so that it "
                    "matches exactly once.", False)
        if old == new:
            return "Error: old_str and new_str are the same; nothing would change.", False
        start = starts[0]
        updated = content[:start] + new + content[start + len(old):]
        written = self._write(sandbox, target, updated.encode(), previous=raw)
        if written:
            return written, False
        snippet = _snippet(updated, start, len(new))
        return self._clip(f"The file {path} has been edited. Here's the result of running `cat -n` on a "
                          f"snippet of {path}:\n{snippet}\n{EDITED}"), True

    def _insert(self, sandbox: Sandbox, path: str, target: _Target, content: str, raw: bytes,
                arguments: dict[str, object]) -> tuple[str, bool]:
        line, new = arguments["insert_line"], str(arguments["new_str"])
        assert isinstance(line, int)  # argument_problem checked it
        lines = _lines(content)
        if not 0 <= line <= len(lines):
            return (f"Error: invalid `insert_line` parameter: {line}. It should be within the range "
                    f"of lines of the file: [0, {len(lines)}].", False)
        added = _lines(new) or [""]
        before = "".join(f"{text}\n" for text in lines[:line])
        updated = before + "\n".join(added + lines[line:])
        del lines
        if content.endswith("\n") or not content:  # keep the file's last newline (or give one)
            updated += "\n"
        written = self._write(sandbox, target, updated.encode(), previous=raw)
        if written:
            return written, False
        snippet = _snippet(updated, len(before), len("\n".join(added)))
        return self._clip(f"The file {path} has been edited. Here's the result of running `cat -n` on a "
                          f"snippet of the edited file:\n{snippet}\n{EDITED}"), True

    def _undo(self, sandbox: Sandbox, path: str, target: _Target) -> tuple[str, bool]:
        stack = self.history.get(target.path)
        if not stack:
            return f"Error: no edit history found for {path}.", False
        entry = stack.pop()
        previous = entry[1]
        if previous is None:
            result = sandbox.exec(f"rm -f -- {shlex.quote(target.path)}", timeout=30)
            if not result.ok:
                stack.append(entry)
                return f"Error: could not remove {path}: {result.stderr.strip()[:200]}", False
            return f"Last edit to {path} undone successfully: the file it created is removed.", True
        written = self._write(sandbox, target, previous, previous=None, record=False)
        if written:
            stack.append(entry)
            return written, False
        numbered = _numbered(_lines(previous[: 4 * self.max_chars + 4].decode("utf-8", errors="replace")), 1)
        return self._clip(f"Last edit to {path} undone successfully. Here's the result of running "
                          f"`cat -n` on {path}:\n{numbered}\n", more=len(previous) > 4 * self.max_chars + 4), True

    # ---- plumbing ----------------------------------------------------------------------
    def _probe(self, sandbox: Sandbox, path: str) -> _Target | str:
        result = sandbox.exec(_PROBE.format(path=shlex.quote(path), limit=4 * self.max_chars + 4), timeout=30)
        head = result.stdout.split("\0", 2)
        if not result.ok or len(head) < 3:
            return f"Error: cannot inspect {path}: {(result.stderr or result.stdout).strip()[:200]}"
        resolved, kind, rest = head
        if _has_control(resolved):
            return (f"Error: {path} resolves to {resolved!r}, a name with a control character, "
                    "which the editor does not handle; use bash for this file.")
        stat, _, listing = rest.partition("\n")
        try:
            mode, size = (int(stat.split()[0], 8), int(stat.split()[1]))
        except (ValueError, IndexError):
            mode, size = 0o644, 0
        return _Target(resolved, kind, mode, size, listing.rstrip("\n"))

    def _read_text(self, sandbox: Sandbox, path: str, target: _Target) -> tuple[str, bytes] | str:
        if not _writable(target.path):
            return (f"Error: {path} is outside {' and '.join(WRITABLE_ROOTS)}, the only places "
                    "files can be changed.")
        if target.size > MAX_EDIT_BYTES:
            return (f"Error: {path} is {target.size:,} bytes, over the {MAX_EDIT_BYTES >> 20} MiB the "
                    "editor edits; view it in parts with `view_range` and edit it with bash (sed, python).")
        try:
            raw = sandbox.get_file(target.path)
        except (OSError, ValueError) as exc:
            return f"Error: cannot read {path}: {exc}"
        if len(raw) > MAX_EDIT_BYTES:  # grew since the probe (a process of the agent's)
            return f"Error: {path} is over the {MAX_EDIT_BYTES >> 20} MiB the editor edits; edit it with bash."
        try:
            return raw.decode("utf-8"), raw
        except UnicodeDecodeError:
            return f"Error: {path} is not UTF-8 text; the editor edits text files only (use bash)."

    def _write(self, sandbox: Sandbox, target: _Target, data: bytes, *, previous: bytes | None,
               record: bool = True) -> str | None:
        """Write ``data`` keeping the file's mode; None on success, else the error to show."""
        if not _writable(target.path):
            return (f"Error: {target.path} is outside {' and '.join(WRITABLE_ROOTS)}, the only "
                    "places files can be changed.")
        mode = target.mode & 0o7777 if target.kind == "file" and target.mode else 0o644
        try:
            sandbox.put_file(target.path, data, mode=mode)
        except (OSError, ValueError) as exc:
            return f"Error: cannot write {target.path}: {exc}"
        if record:
            stack = self.history.setdefault(target.path, [])
            self.edits += 1
            stack.append((self.edits, previous))
            del stack[:-HISTORY_PER_FILE]
            self._forget_oldest()
        return None

    def _forget_oldest(self) -> None:
        """Drop the oldest edits of any file until the history fits its bounds."""
        def size() -> tuple[int, int]:
            entries = [e for stack in self.history.values() for e in stack]
            return len(entries), sum(len(e[1] or b"") for e in entries)

        count, total = size()
        while count > MAX_HISTORY_ENTRIES or total > MAX_HISTORY_BYTES:
            path = min((p for p, stack in self.history.items() if stack), key=lambda p: self.history[p][0][0])
            _, dropped = self.history[path].pop(0)
            count, total = count - 1, total - len(dropped or b"")
            if not self.history[path]:
                del self.history[path]

    def _clip(self, text: str, *, more: bool = False) -> str:
        if len(text) <= self.max_chars and not more:
            return text
        return text[: self.max_chars] + "\n" + CLIPPED


def argument_problem(arguments: dict[str, object]) -> str | None:
    """Why a call's arguments are malformed (the agent's mistake: an invalid action), else None."""
    command = arguments.get("command")
    if command not in COMMANDS:
        return (f"Error: unrecognized command {command!r}; the str_replace_editor commands are "
                f"{', '.join(COMMANDS)}.")
    problem = _path_problem(arguments.get("path"))
    if problem:
        return problem
    needs: dict[str, tuple[str, ...]] = {"create": ("file_text",), "str_replace": ("old_str",),
                                         "insert": ("insert_line", "new_str")}
    for name in needs.get(str(command), ()):
        if arguments.get(name) is None:
            return f"Error: parameter `{name}` is required for command: {command}."
    for name in ("file_text", "old_str", "new_str"):
        if arguments.get(name) is not None and not isinstance(arguments[name], str):
            return f"Error: `{name}` must be a string, got {type(arguments[name]).__name__}."
    if command == "str_replace" and arguments["old_str"] == "":
        return "Error: `old_str` must not be empty; give the exact text to replace."
    line = arguments.get("insert_line")
    if command == "insert" and (isinstance(line, bool) or not isinstance(line, int)):
        return f"Error: `insert_line` must be an integer, got {line!r}."
    return None


def _path_problem(path: object) -> str | None:
    if not isinstance(path, str) or not path:
        return "Error: parameter `path` (an absolute path) is required."
    if "\0" in path:
        return "Error: `path` holds a NUL byte, which no file name can."
    if _has_control(path):
        return (f"Error: `path` {path!r} holds a control character (such as a newline or a tab), "
                "which the editor does not accept in file names; use bash for such a file.")
    if not path.startswith("/"):
        return (f"Error: the path {path} is not an absolute path, it should start with `/`. "
                f"Maybe you meant /workspace/{path.removeprefix('./')}?")
    return None


def _has_control(text: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def _writable(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in WRITABLE_ROOTS)


def _lines(content: str) -> list[str]:
    if not content:
        return []
    lines = content.split("\n")
    return lines[:-1] if content.endswith("\n") else lines


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=first))


def _snippet(content: str, offset: int, span: int) -> str:
    """Numbered lines around ``content[offset:offset + span]``, SNIPPET_LINES of context each
    side; only that part of ``content`` is split."""
    start = offset
    for _ in range(SNIPPET_LINES + 1):
        start = content.rfind("\n", 0, start)
        if start == -1:
            break
    start += 1  # the first character of the first line shown (0 when the file's first)
    end = offset + span
    for _ in range(SNIPPET_LINES + 1):
        end = content.find("\n", end) + 1
        if end == 0:
            end = len(content)
            break
    return _numbered(_lines(content[start:end]), content.count("\n", 0, start) + 1)


def _occurrences(content: str, old: str, shown: int = 20) -> tuple[list[int], int]:
    """The first ``shown`` start offsets of ``old`` in ``content`` and how many there are,
    overlapping ones included (none of the rest is stored)."""
    starts, total, at = [], 0, content.find(old)
    while at != -1:
        if total < shown:
            starts.append(at)
        total += 1
        at = content.find(old, at + 1)
    return starts, total


def _view_range(value: object, n_lines: int) -> tuple[int, int] | str:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return "Error: invalid `view_range`. It should be a list of two integers, e.g. [10, 40]."
    first, last = value
    if not 1 <= first <= max(n_lines, 1):
        return (f"Error: invalid `view_range`: {value}. Its first element `{first}` should be "
                f"within the range of lines of the file: [1, {n_lines}].")
    if last == -1 or last > n_lines:
        last = n_lines
    if last < first:
        return (f"Error: invalid `view_range`: {value}. Its second element `{last}` should be "
                f"larger or equal than its first `{first}` (or -1 for the end of the file).")
    return first, last
