"""What the agent's commands look like going in (fenced blocks) and coming out (results).

A command's result is shown to the agent, and to a judge as the step's next state, as::

    exit code 1
    <stdout>
    stderr:
    <stderr>

The literal ``exit code N`` line is what lexical judges read (``exit code 0`` is success).
Long output keeps its head and its tail around a ``[... N characters cut ...]`` marker.
"""

from __future__ import annotations

import re
from typing import Any

from envs.sandbox import ExecResult

# Possessive quantifiers (*+): the two blank runs around an empty language tag could
# otherwise split a long run of spaces every possible way (quadratic time on "```" + spaces).
_FENCE_RE = re.compile(r"```[ \t]*+([\w+-]*+)[ \t]*+\n(.*?)```", re.DOTALL)
_SHELLS = ("bash", "sh", "shell", "zsh")

NUL_REFUSED = ("Error: {what} holds a NUL byte (\\0), which no shell command can carry; it "
               "was not run. Write it as printf '\\0' if you need one.")
NO_COMMAND = ("No command found. Call the `bash` tool (or write the command in a ```bash "
              "block) to act, and call `submit` when the task is done.")


def fenced_commands(text: str) -> str | None:
    """The bash in ``text``'s fenced blocks; None when there is none.

    Blocks labelled bash, sh, shell or zsh are all run, joined by newlines. Without one,
    only the first unlabelled block is: models also fence the output they expect, and
    that must not run as commands. Blocks in another language are never run.
    """
    blocks = [(lang.lower(), body.strip()) for lang, body in _FENCE_RE.findall(text)]
    labelled = [body for lang, body in blocks if lang in _SHELLS and body]
    if labelled:
        return "\n".join(labelled)
    bare = [body for lang, body in blocks if not lang and body]
    return bare[0] if bare else None


def cut_middle(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a marker."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail:]}"


def format_result(result: ExecResult, timeout_s: float, limit: int) -> str:
    """The agent-facing text of one command's result, at most about ``limit`` characters
    after the ``exit code`` line."""
    header = f"exit code {result.exit_code}"
    if result.timed_out:
        header += f" (killed: the command ran past its {timeout_s:g} s timeout)"
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    if result.truncated:
        parts.append("[output past the sandbox's capture limit was dropped]")
    body = "\n".join(parts)
    return header + ("\n" + cut_middle(body, limit) if body else "")


def bash_arguments(arguments: dict[str, Any], default_timeout_s: float,
                   max_timeout_s: float) -> tuple[str, float, str | None]:
    """A ``bash`` tool call's (command, timeout, problem): the problem is the agent-facing
    error when the call cannot run (then the command is empty), else None."""
    command, timeout = arguments.get("command"), arguments.get("timeout", default_timeout_s)
    if not isinstance(command, str) or not command.strip():
        return "", 0.0, "Error: `command` must be a non-empty string of bash."
    if "\0" in command:  # refused here: execve cannot pass it, so no backend can run it
        return "", 0.0, NUL_REFUSED.format(what="`command`")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= max_timeout_s:
        return "", 0.0, (f"Error: `timeout` must be a number of seconds in "
                         f"(0, {max_timeout_s:g}], got {timeout!r}.")
    return command, float(timeout), None
