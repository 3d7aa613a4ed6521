"""The str_replace_editor tool on a real sandbox: each command, and each error as an observation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envs.sandbox import Sandbox, make_sandbox
from envs.swe import sandbox_config
from envs.swe.editor import CLIPPED, Editor, argument_problem

FILE = "/workspace/pkg/mod.py"
TEXT = "def f(x):\n    return x\n\n\ndef g(x):\n    return x\n"


@pytest.fixture(scope="module")
def module_sandbox(backend: str) -> Iterator[Sandbox]:
    sandbox = make_sandbox(backend, sandbox_config())
    yield sandbox
    sandbox.close()


@pytest.fixture
def sandbox(module_sandbox: Sandbox) -> Sandbox:
    module_sandbox.reset()
    module_sandbox.put_file(FILE, TEXT)
    return module_sandbox


def run(sandbox: Sandbox, editor: Editor | None = None, **arguments: object) -> str:
    return (editor or Editor()).run(sandbox, arguments)[0]


def read(sandbox: Sandbox, path: str = FILE) -> str:
    return sandbox.get_file(path).decode()


# ---- view ---------------------------------------------------------------------------------
def test_view_numbers_lines_like_cat_n(sandbox):
    assert run(sandbox, command="view", path=FILE) == (
        f"Here's the result of running `cat -n` on {FILE}:\n"
        "     1\tdef f(x):\n     2\t    return x\n     3\t\n     4\t\n     5\tdef g(x):\n     6\t    return x\n")


def test_view_range_shows_a_slice_and_minus_one_means_the_end(sandbox):
    assert run(sandbox, command="view", path=FILE, view_range=[5, 6]).endswith(
        "     5\tdef g(x):\n     6\t    return x\n")
    assert run(sandbox, command="view", path=FILE, view_range=[6, -1]).endswith("     6\t    return x\n")
    assert run(sandbox, command="view", path=FILE, view_range=[0, 2]).startswith(
        "Error: invalid `view_range`: [0, 2]. Its first element `0` should be within the range of "
        "lines of the file: [1, 6].")
    assert run(sandbox, command="view", path=FILE, view_range=[4, 2]).startswith(
        "Error: invalid `view_range`: [4, 2]. Its second element `2` should be larger or equal")
    assert run(sandbox, command="view", path=FILE, view_range=[1]).startswith(
        "Error: invalid `view_range`. It should be a list of two integers")


def test_view_of_a_directory_lists_two_levels_without_hidden_files(sandbox):
    for path in ("/workspace/pkg/sub/deep/x.py", "/workspace/.git/HEAD", "/workspace/pkg/.hidden"):
        sandbox.put_file(path, "")
    assert run(sandbox, command="view", path="/workspace") == (
        "Here's the files and directories up to 2 levels deep in /workspace, excluding hidden items:\n"
        "/workspace\n/workspace/pkg\n/workspace/pkg/mod.py\n/workspace/pkg/sub")
    assert run(sandbox, command="view", path="/workspace", view_range=[1, 2]).startswith(
        "Error: the `view_range` parameter is not allowed when `path` points to a directory")


def test_view_reads_outside_the_workspace_but_long_output_is_clipped(sandbox):
    assert run(sandbox, command="view", path="/etc/hostname").endswith("     1\tclawgym-sandbox\n")
    sandbox.put_file("/workspace/big.txt", "x" * 500 + "\n")
    text = run(sandbox, Editor(max_chars=200), command="view", path="/workspace/big.txt")
    assert len(text) == 200 + 1 + len(CLIPPED) and text.endswith(CLIPPED)


def test_bad_paths_are_observations(sandbox):
    assert run(sandbox, command="view", path="pkg/mod.py") == (
        "Error: the path pkg/mod.py is not an absolute path, it should start with `/`. Maybe you "
        "meant /workspace/pkg/mod.py?")
    assert run(sandbox, command="view", path="/workspace/nope.py") == (
        "Error: the path /workspace/nope.py does not exist. Please provide a valid path.")
    assert run(sandbox, command="str_replace", path="/workspace/pkg", old_str="x", new_str="y") == (
        "Error: the path /workspace/pkg is a directory and only the `view` command can be used on "
        "directories.")
    assert run(sandbox, command="insert", path="/etc/hostname", insert_line=0, new_str="x").startswith(
        "Error: /etc/hostname is outside /workspace and /tmp, the only places files can be changed.")


# ---- create -------------------------------------------------------------------------------
def test_create_makes_a_new_file_and_its_folders_but_refuses_an_existing_one(sandbox):
    new = "/workspace/pkg/new/thing.py"
    assert run(sandbox, command="create", path=new, file_text="X = 1\n") == \
        f"File created successfully at: {new}"
    assert read(sandbox, new) == "X = 1\n"
    assert run(sandbox, command="create", path=FILE, file_text="") == (
        f"Error: file already exists at: {FILE}. Cannot overwrite files using command `create`; "
        "use `str_replace` to change it.")
    assert read(sandbox) == TEXT


# ---- str_replace --------------------------------------------------------------------------
def test_str_replace_edits_a_unique_match_and_shows_a_snippet(sandbox):
    editor = Editor()
    text, changed = editor.run(sandbox, {"command": "str_replace", "path": FILE,
                                         "old_str": "def g(x):\n    return x", "new_str": "def g(x):\n    return -x"})
    assert changed and read(sandbox) == "def f(x):\n    return x\n\n\ndef g(x):\n    return -x\n"
    assert text == (f"The file {FILE} has been edited. Here's the result of running `cat -n` on a snippet "
                    f"of {FILE}:\n     1\tdef f(x):\n     2\t    return x\n     3\t\n     4\t\n     5\tdef g(x):\n"
                    "     6\t    return -x\nReview the changes and make sure they are as expected. Edit the "
                    "file again if necessary.")


def test_str_replace_refuses_zero_or_several_matches_saying_how_many_and_where(sandbox):
    assert run(sandbox, command="str_replace", path=FILE, old_str="return y", new_str="z") == (
        f"Error: no replacement was performed, old_str `return y` did not appear verbatim in {FILE}. "
        "Check whitespace and indentation with `view`.")
    assert run(sandbox, command="str_replace", path=FILE, old_str="    return x", new_str="pass") == (
        f"Error: no replacement was performed: old_str occurs 2 times in {FILE}, starting at lines 2, 6. "
        "Include more surrounding lines so that it matches exactly once.")
    assert read(sandbox) == TEXT


def test_str_replace_with_no_new_str_deletes_and_keeps_the_file_mode(sandbox):
    sandbox.put_file("/workspace/run.sh", "#!/bin/sh\necho hi\necho bye\n", mode=0o755)
    run(sandbox, command="str_replace", path="/workspace/run.sh", old_str="echo bye\n")
    assert read(sandbox, "/workspace/run.sh") == "#!/bin/sh\necho hi\n"
    assert sandbox.exec("stat -c %a run.sh").stdout.strip() == "755"


def test_str_replace_edits_through_a_symlink_and_refuses_binary_files(sandbox):
    sandbox.exec("ln -s pkg/mod.py /workspace/link.py")
    run(sandbox, command="str_replace", path="/workspace/link.py", old_str="def f", new_str="def h")
    assert read(sandbox).startswith("def h(x):") and sandbox.exec("test -L link.py").ok
    sandbox.put_file("/workspace/blob.bin", b"\xff\xfe\x00")
    assert run(sandbox, command="str_replace", path="/workspace/blob.bin", old_str="a", new_str="b") == (
        "Error: /workspace/blob.bin is not UTF-8 text; the editor edits text files only (use bash).")


# ---- insert -------------------------------------------------------------------------------
@pytest.mark.parametrize("line, expected", [
    (0, "# top\ndef f(x):\n"),
    (2, "    return x\n# top\n\n"),
    (6, "    return x\n# top\n"),
])
def test_insert_puts_text_after_a_line(sandbox, line, expected):
    text = run(sandbox, command="insert", path=FILE, insert_line=line, new_str="# top")
    assert text.startswith(f"The file {FILE} has been edited.")
    assert expected in read(sandbox) and read(sandbox).count("# top") == 1


def test_insert_refuses_a_line_outside_the_file(sandbox):
    assert run(sandbox, command="insert", path=FILE, insert_line=7, new_str="x") == (
        "Error: invalid `insert_line` parameter: 7. It should be within the range of lines of the "
        "file: [0, 6].")


def test_insert_into_an_empty_file_and_one_without_a_last_newline(sandbox):
    sandbox.put_file("/workspace/empty.py", "")
    run(sandbox, command="insert", path="/workspace/empty.py", insert_line=0, new_str="a = 1")
    assert read(sandbox, "/workspace/empty.py") == "a = 1\n"
    sandbox.put_file("/workspace/tail.py", "a\nb")
    run(sandbox, command="insert", path="/workspace/tail.py", insert_line=2, new_str="c")
    assert read(sandbox, "/workspace/tail.py") == "a\nb\nc"


# ---- undo_edit ----------------------------------------------------------------------------
def test_undo_edit_reverts_edits_one_by_one_and_removes_a_created_file(sandbox):
    editor = Editor()
    run(sandbox, editor, command="str_replace", path=FILE, old_str="def f", new_str="def f1")
    run(sandbox, editor, command="insert", path=FILE, insert_line=0, new_str="import os")
    assert run(sandbox, editor, command="undo_edit", path=FILE).startswith(
        f"Last edit to {FILE} undone successfully. Here's the result of running `cat -n` on {FILE}:\n"
        "     1\tdef f1(x):")
    run(sandbox, editor, command="undo_edit", path=FILE)
    assert read(sandbox) == TEXT
    assert run(sandbox, editor, command="undo_edit", path=FILE) == f"Error: no edit history found for {FILE}."
    run(sandbox, editor, command="create", path="/workspace/n.py", file_text="x")
    assert run(sandbox, editor, command="undo_edit", path="/workspace/n.py") == \
        "Last edit to /workspace/n.py undone successfully: the file it created is removed."
    assert not sandbox.exec("test -e /workspace/n.py").ok


# ---- malformed calls ----------------------------------------------------------------------
@pytest.mark.parametrize("arguments, message", [
    ({"command": "delete", "path": FILE}, "Error: unrecognized command 'delete'; the str_replace_editor "
                                          "commands are view, create, str_replace, insert, undo_edit."),
    ({"command": "view"}, "Error: parameter `path` (an absolute path) is required."),
    ({"command": "create", "path": FILE}, "Error: parameter `file_text` is required for command: create."),
    ({"command": "str_replace", "path": FILE, "old_str": ""},
     "Error: `old_str` must not be empty; give the exact text to replace."),
    ({"command": "str_replace", "path": FILE, "old_str": "x", "new_str": 3},
     "Error: `new_str` must be a string, got int."),
    ({"command": "insert", "path": FILE, "new_str": "x", "insert_line": "2"},
     "Error: `insert_line` must be an integer, got '2'."),
    ({"command": "view", "path": "/workspace/a\0b"}, "Error: `path` holds a NUL byte, which no file name can."),
])
def test_malformed_calls_are_refused_before_touching_the_sandbox(arguments, message):
    assert argument_problem(arguments) == message


# ---- hostile inputs: what reaches the trainer's process is bounded -------------------------------
def _peak_rss_after(action) -> int:
    """How far ``action`` raised this process's peak resident memory, in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current RSS

    def hwm() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    before = hwm()
    action()
    return hwm() - before


def test_view_of_a_huge_file_reads_only_the_shown_window(sandbox):
    # issue 45: a file of newlines cost ~70x its size in the trainer (8 MB -> +560 MB RSS)
    assert sandbox.exec("head -c 32M /dev/zero | tr '\\0' '\\n' > /workspace/big.log && "
                        "printf 'last line\\n' >> /workspace/big.log").ok
    lines = (32 << 20) + 1
    baseline = _peak_rss_after(lambda: run(sandbox, command="view", path=FILE))
    shown: dict[str, str] = {}
    grown = _peak_rss_after(lambda: shown.update(
        whole=run(sandbox, command="view", path="/workspace/big.log"),
        tail=run(sandbox, command="view", path="/workspace/big.log", view_range=[lines - 1, -1]),
        past=run(sandbox, command="view", path="/workspace/big.log", view_range=[lines + 1, lines + 9]),
        edit=run(sandbox, command="str_replace", path="/workspace/big.log", old_str="last", new_str="x")))
    assert grown < baseline + (8 << 20), f"viewing a 32 MiB file raised the peak RSS by {grown:,} bytes"
    assert shown["whole"].startswith("Here's the result of running `cat -n` on /workspace/big.log:\n"
                                     "     1\t\n     2\t\n") and shown["whole"].endswith(CLIPPED)
    assert len(shown["whole"]) == Editor().max_chars + 1 + len(CLIPPED)
    assert shown["tail"].endswith(f"\n{lines - 1:6}\t\n{lines:6}\tlast line\n")
    assert shown["past"].startswith(f"Error: invalid `view_range`: [{lines + 1}, {lines + 9}]. Its first "
                                    f"element `{lines + 1}` should be within the range of lines of the "
                                    f"file: [1, {lines}].")
    assert shown["edit"] == ("Error: /workspace/big.log is 33,554,442 bytes, over the 2 MiB the editor "
                             "edits; view it in parts with `view_range` and edit it with bash (sed, python).")


def test_edits_show_a_bounded_snippet_of_a_big_file(sandbox):
    body = "".join(f"line {n}\n" for n in range(1, 100_001))  # ~1 MB: edited whole, shown in part
    sandbox.put_file("/workspace/data.txt", body)
    editor = Editor(max_chars=2000)
    out = run(sandbox, editor, command="str_replace", path="/workspace/data.txt",
              old_str="line 50000\n", new_str="fifty thousand\n")
    assert out.splitlines()[1:10] == [f"{n:6}\tline {n}" for n in range(49996, 50000)] + [
        " 50000\tfifty thousand"] + [f"{n:6}\tline {n}" for n in range(50001, 50005)]
    out = run(sandbox, editor, command="insert", path="/workspace/data.txt", insert_line=2, new_str="two and a half")
    assert out.splitlines()[1:5] == ["     1\tline 1", "     2\tline 2", "     3\ttwo and a half", "     4\tline 3"]
    out = run(sandbox, editor, command="undo_edit", path="/workspace/data.txt")
    assert len(out) == 2000 + 1 + len(CLIPPED) and "     3\tline 3" in out
    assert read(sandbox, "/workspace/data.txt") == body.replace("line 50000\n", "fifty thousand\n")


@pytest.mark.parametrize("path", ["/workspace/pkg/mod.py\n", "/workspace/pkg/mod.py\nx", "/workspace/\tmod.py"])
def test_a_path_with_a_control_character_is_refused_and_touches_nothing(sandbox, path):
    # issue 45: "/workspace/pkg/mod.py\n" edited /workspace/pkg/mod.py
    out = run(sandbox, command="str_replace", path=path, old_str="return x", new_str="return y")
    assert out.startswith(f"Error: `path` {path!r} holds a control character (such as a newline or a "
                          "tab), which the editor does not accept in file names; use bash")
    assert read(sandbox) == TEXT


def test_a_link_to_a_name_with_a_newline_is_refused(sandbox):
    assert sandbox.exec("printf 'new\\n' > \"$(printf '/workspace/pkg/mod.py\\nx')\" && "
                        "ln -s \"$(printf '/workspace/pkg/mod.py\\nx')\" /workspace/link").ok
    out = run(sandbox, command="str_replace", path="/workspace/link", old_str="return x", new_str="y")
    assert out == ("Error: /workspace/link resolves to '/workspace/pkg/mod.py\\nx', a name with a control "
                   "character, which the editor does not handle; use bash for this file.")
    assert read(sandbox) == TEXT


def test_the_undo_history_is_bounded_oldest_first(sandbox, monkeypatch):
    import envs.swe.editor as editor_module

    monkeypatch.setattr(editor_module, "MAX_HISTORY_ENTRIES", 3)
    editor = Editor()
    for n in range(5):
        run(sandbox, editor, command="create", path=f"/workspace/f{n}.py", file_text="x\n")
    assert sum(len(stack) for stack in editor.history.values()) == 3
    assert run(sandbox, editor, command="undo_edit", path="/workspace/f0.py") == \
        "Error: no edit history found for /workspace/f0.py."
    assert run(sandbox, editor, command="undo_edit", path="/workspace/f4.py").startswith("Last edit to")
