"""What exec, files and the episode lifecycle do, on both backends."""

from __future__ import annotations

import gc
import os
import resource
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from envs.sandbox import SandboxConfig, SandboxError, SandboxUnavailable, backend_status, make_sandbox
from tests.sandbox.conftest import KILL_SLACK_S


def test_basic_exec(sandbox):
    result = sandbox.exec("echo hi; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
    assert not result.timed_out and not result.truncated and not result.ok
    assert sandbox.exec("pwd").stdout == "/workspace\n"
    uid = sandbox.exec("id -u")
    assert uid.ok and uid.stdout.strip().isdigit()
    env = sandbox.exec("echo $HOME $LANG; echo $PATH")
    assert env.stdout.splitlines()[0] == "/workspace C.UTF-8"
    assert "/usr/bin" in env.stdout.splitlines()[1]


def test_put_get_roundtrip(sandbox):
    sandbox.put_file("a/b/c.txt", "hello\n", mode=0o600)
    assert sandbox.exec("cat /workspace/a/b/c.txt; stat -c %a a/b/c.txt").stdout == "hello\n600\n"
    blob = bytes(range(256)) * 10
    sandbox.put_file("/tmp/blob.bin", blob)
    assert sandbox.get_file("/tmp/blob.bin") == blob
    assert sandbox.exec("wc -c < /tmp/blob.bin").stdout.strip() == str(len(blob))
    sandbox.exec("printf made-inside > out.txt")
    assert sandbox.get_file("out.txt") == b"made-inside"
    assert sandbox.get_file("/workspace/out.txt") == b"made-inside"
    with pytest.raises(FileNotFoundError):
        sandbox.get_file("missing.txt")


@pytest.mark.parametrize("path", ["/etc/passwd", "/workspacex/f", "../escape", "/tmp/../etc/x", "", "/"])
def test_paths_outside_workspace_and_tmp_are_refused(sandbox, path):
    with pytest.raises(ValueError):
        sandbox.put_file(path, "x")
    with pytest.raises(ValueError):
        sandbox.get_file(path)


def test_planted_symlinks_are_not_followed_out(sandbox, tmp_path):
    secret = Path("/root") / f"clawgym-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    try:
        sandbox.exec(f"ln -s /etc/shadow shadow; ln -s {secret} secret; ln -s /etc etc; mkfifo fifo")
        for link in ("shadow", "secret", "etc/passwd"):
            with pytest.raises((PermissionError, ValueError)):
                sandbox.get_file(link)
        with pytest.raises((PermissionError, ValueError)):
            sandbox.put_file("etc/clawgym-planted", "x")
        assert not Path("/etc/clawgym-planted").exists()
        with pytest.raises(ValueError, match="not a regular file"):
            sandbox.get_file("fifo")  # would block forever if opened naively
        sandbox.put_file("secret", "replaced the link, not the target")
        assert secret.read_text() == "host secret"
    finally:
        secret.unlink()


def test_files_persist_within_an_episode_and_reset_empties(sandbox):
    sandbox.exec("echo 1 > keep.txt; mkdir -p d/e; echo 2 > /tmp/t.txt; echo 3 > /dev/shm/s")
    assert sandbox.exec("cat keep.txt /tmp/t.txt /dev/shm/s").stdout == "1\n2\n3\n"
    sandbox.exec("chmod 000 d /dev/shm")  # the wipe must not depend on the sandbox's permissions
    sandbox.reset()
    result = sandbox.exec("ls -A /workspace /tmp /dev/shm")
    assert result.ok
    assert result.stdout.split() == ["/dev/shm:", "/tmp:", "/workspace:"]


def test_a_chmod_000_workspace_can_be_repaired_by_the_agent(sandbox):
    """As on docker (runc changes directory before dropping capabilities): the next
    command still starts in /workspace, sees the mode it set, and can set it back."""
    assert sandbox.exec("chmod 000 /workspace").ok
    seen = sandbox.exec("pwd; stat -c %a /workspace; ls")
    assert seen.stdout == "/workspace\n0\n" and "Permission denied" in seen.stderr, seen
    repaired = sandbox.exec("chmod 755 /workspace && echo x > f && cat f")
    assert repaired.ok and repaired.stdout == "x\n", repaired
    assert sandbox.exec("chmod 000 .; chmod 755 /workspace; pwd").stdout == "/workspace\n"


def test_a_command_holding_a_nul_byte_is_refused_not_raised(sandbox):
    result = sandbox.exec("echo a\0b > f")
    assert (result.exit_code, result.stdout, result.timed_out) == (126, "", False)
    assert "refused" in result.stderr and "NUL byte" in result.stderr
    assert sandbox.exec("ls -A").stdout == ""  # nothing of it ran
    # lone surrogates have no UTF-8 form: both backends hand bash U+FFFD instead
    assert sandbox.exec("printf %s 'a\ud800b\udcffc'").stdout == "a\ufffdb\ufffdc"


def test_timeout_on_busy_loop(new_sandbox, sandbox_config):
    # a default timeout of 2 minutes: an exec that ignored the 1 s asked would run into it
    sandbox = new_sandbox(replace(sandbox_config, default_timeout_s=120.0))
    start = time.monotonic()
    result = sandbox.exec("while :; do :; done", timeout=1)
    assert result.timed_out and result.exit_code in (124, 137) and not result.ok
    assert time.monotonic() - start < 1 + KILL_SLACK_S


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), True, "5"])
def test_a_timeout_that_is_not_a_finite_positive_number_is_refused(sandbox, timeout):
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds > 0"):
        sandbox.exec("touch ran", timeout=timeout)
    assert sandbox.exec("ls -A").stdout == ""  # nothing of it ran


@pytest.mark.parametrize("field", ["default_timeout_s", "cpus"])
def test_a_config_limit_that_is_not_a_finite_positive_number_is_refused(field):
    for value in (float("nan"), float("inf"), 0):
        with pytest.raises(ValueError, match=f"sandbox.{field} must be a finite number"):
            SandboxConfig(**{field: value})


def test_timeout_kills_background_and_setsid_children(sandbox, host_processes):
    start = time.monotonic()
    result = sandbox.exec("setsid sleep 987 & sleep 988 & sleep 989", timeout=1)
    assert time.monotonic() - start < 1 + KILL_SLACK_S  # not the sleeps' 16 minutes
    assert result.timed_out
    assert host_processes("sleep 98") == []


def test_background_process_does_not_outlive_its_command(sandbox, host_processes):
    start = time.monotonic()
    result = sandbox.exec("sleep 977 & echo started", timeout=120)
    assert result.ok and result.stdout == "started\n" and not result.timed_out
    assert time.monotonic() - start < KILL_SLACK_S  # not the timeout's 2 minutes, nor the sleep's 16
    assert host_processes("sleep 977") == []
    assert "sleep" not in sandbox.exec("ps -eo comm").stdout


def test_nested_timeout_exit_124_is_not_our_timeout(sandbox):
    result = sandbox.exec("timeout 0.2 sleep 5", timeout=10)
    assert result.exit_code == 124 and not result.timed_out


def test_output_is_capped_and_drained(sandbox, sandbox_config):
    cap = sandbox_config.max_output_bytes
    result = sandbox.exec("yes | head -c 5000000")
    assert result.truncated and result.exit_code == 0
    assert len(result.stdout.encode()) <= cap
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    flood = sandbox.exec("timeout 2 yes; echo done >&2", timeout=60)
    assert flood.truncated and flood.stderr == "done\n" and not flood.timed_out  # it ran to its end
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 100, f"2 s of `yes` grew this process by {grown_mb:.0f} MB"


@pytest.mark.parametrize("entry", [("A", "x\0y"), ("A=B", "x"), ("", "x"), ("1A", "x"), ("A", 1)])
def test_config_env_entries_must_be_variables(entry):
    # bwrap reads its options NUL-separated: a NUL in a value would smuggle in options
    with pytest.raises(ValueError, match="sandbox.env entry"):
        SandboxConfig(env=(entry,))


def test_a_long_environment_reaches_commands(new_sandbox, sandbox_config):
    """bwrap's options travel in a memfd: 100 kB of them must not block on a pipe's buffer."""
    sandbox = new_sandbox(replace(sandbox_config, env=(("BIG", "x" * 100_000),)))
    assert sandbox.exec('echo "${#BIG}"').stdout == "100000\n"


def test_posix_message_queues_are_off(sandbox):
    """Without /dev/mqueue docker's reset could not find them; both backends refuse them."""
    assert sandbox.exec("ulimit -q").stdout == "0\n"
    made = sandbox.exec(
        "python3 -c \"import ctypes; rt = ctypes.CDLL('librt.so.1', use_errno=True); "
        "print(rt.mq_open(b'/q', 0o100 | 2, 0o600, None), ctypes.get_errno())\""
    )
    assert made.stdout.split()[0] == "-1", made


def test_exec_is_serialized_across_threads(sandbox):
    def run(i: int) -> str:
        return sandbox.exec(f"echo {i} > n; sleep 0.05; cat n").stdout

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(run, range(8))) == [f"{i}\n" for i in range(8)]


def test_nothing_persists_across_episodes(new_sandbox, host_processes):
    sandbox = new_sandbox()
    sandbox.exec("echo old > episode1.txt; echo old > /tmp/e1; echo old > /dev/shm/e1; (sleep 966 >/dev/null 2>&1 &)")
    # System V IPC lives in the IPC namespace, which lasts the whole episode on docker
    sandbox.exec("ipcmk -M 4096 && ipcmk -Q && ipcmk -S 1")
    sandbox.reset()
    assert sandbox.exec("ls -A /workspace /tmp /dev/shm").stdout.split() == ["/dev/shm:", "/tmp:", "/workspace:"]
    assert sandbox.exec("ipcs | grep -c ^0x").stdout == "0\n"
    assert host_processes("sleep 966") == []
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxError, match="closed"):
        sandbox.exec("true")


def test_close_leaks_nothing(backend, new_sandbox, sandbox_config):
    def containers() -> int:
        out = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=clawgym.sandbox"], capture_output=True, text=True
        )
        return len(out.stdout.split())

    baseline = containers() if backend == "docker" else 0
    sandbox = new_sandbox()
    sandbox.exec("echo x > f; sleep 955 &")
    root = sandbox.workspace.root
    cgroups = list(getattr(sandbox, "cgroups", None).dirs.values()) if getattr(sandbox, "cgroups", None) else []
    sandbox.close()
    mounts = Path("/proc/mounts").read_text()
    assert str(root) not in mounts and not root.exists()
    assert all(not path.exists() for path in cgroups)
    if backend == "docker":
        assert containers() == baseline
    # a sandbox dropped without close() is released by the garbage collector
    orphan = make_sandbox(backend, sandbox_config)
    orphan_root = orphan.workspace.root
    del orphan
    gc.collect()
    assert not orphan_root.exists() and str(orphan_root) not in Path("/proc/mounts").read_text()
    if backend == "docker":
        assert containers() == baseline


@pytest.mark.docker
def test_dead_container_is_reported_and_reset_replaces_it(sandbox_config, require):
    require("docker")
    sandbox = make_sandbox("docker", sandbox_config)
    try:
        sandbox.put_file("f", "x")
        subprocess.run(["docker", "kill", sandbox.container_id], capture_output=True, check=True)
        with pytest.raises(SandboxError, match="not running.*reset"):
            sandbox.exec("true")
        sandbox.reset()
        assert sandbox.exec("ls -A; echo revived").stdout == "revived\n"
    finally:
        sandbox.close()


def test_unknown_backend_names_the_allowed_values():
    with pytest.raises(ValueError) as info:
        make_sandbox("nope")
    for name in ("auto", "docker", "bwrap"):
        assert repr(name) in str(info.value)


def test_auto_prefers_docker(sandbox_config, require):
    expected = "docker" if backend_status(sandbox_config)["docker"] is None else "bwrap"
    require(expected)
    sandbox = make_sandbox("auto", sandbox_config)
    try:
        assert sandbox.backend == expected
        assert sandbox.exec("echo ok").stdout == "ok\n"
    finally:
        sandbox.close()


def test_backend_status_reasons_are_actionable(backend, sandbox_config):
    # reached only when `backend` is usable; the skip message carries the reason otherwise
    assert backend_status(sandbox_config)[backend] is None
    status = backend_status(SandboxConfig(rootfs="/nonexistent/rootfs", image="clawgym-base:nonexistent"))
    missing = {"docker": "image clawgym-base:nonexistent is missing", "bwrap": "rootfs is missing at /nonexistent"}
    assert missing[backend] in status[backend] and "make rootfs" in status[backend]
    with pytest.raises(SandboxUnavailable, match="make rootfs"):
        make_sandbox(backend, SandboxConfig(rootfs="/nonexistent/rootfs", image="clawgym-base:nonexistent"))


def test_commands_can_trap_sigint_even_when_the_host_ignores_it(backend):
    """A host started as `cmd &` by a non-interactive shell has SIGINT ignored; children
    inherit that and a shell can't trap an ignored signal. Sandboxed commands must not."""
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGQUIT, signal.SIG_IGN)
        from envs.sandbox import make_sandbox
        from tests.sandbox.conftest import TEST_CONFIG
        box = make_sandbox({backend!r}, TEST_CONFIG)
        try:
            print(box.exec("trap 'echo trapped' INT; kill -INT $$; echo after").stdout)
        finally:
            box.close()
    """)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["trapped", "after"]


@pytest.mark.docker
def test_stale_containers_are_swept_even_by_racing_sweepers(require):
    """Containers of a dead owner go, a live owner's stay; four sweepers at once (as four
    envs starting together) must not trip over containers another one just removed."""
    import socket

    import docker

    from envs.sandbox.base import DEFAULT_IMAGE
    from envs.sandbox.docker_backend import LABEL, sweep_stale_containers

    require("docker")
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free now: the owner of the stale containers is gone
    host = socket.gethostname()
    client = docker.from_env()

    def start(owner_pid: int) -> str:
        return client.api.create_container(
            DEFAULT_IMAGE, command=["sleep", "300"], name=f"clawgym-sweep-{uuid.uuid4().hex[:8]}",
            labels={LABEL: "1", "clawgym.owner": f"{host}:docker-{owner_pid}-{uuid.uuid4().hex[:10]}"})["Id"]

    stale = [start(dead.pid) for _ in range(4)]
    alive = start(os.getpid())
    try:
        with ThreadPoolExecutor(4) as pool:
            removed = list(pool.map(lambda _: sweep_stale_containers(docker.from_env()), range(4)))
        left = {c["Id"] for c in client.api.containers(all=True, filters={"label": LABEL})}
        assert not left & set(stale) and alive in left
        # every stale one is reported; dockerd may answer a forced removal of the same container
        # with success to more than one racing sweeper, so a name can appear twice
        reported = {name for names in removed for name in names if name.startswith("clawgym-sweep-")}
        assert len(reported) == 4 and client.api.inspect_container(alive)["Name"].lstrip("/") not in reported
    finally:
        for container in [*stale, alive]:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        client.close()
