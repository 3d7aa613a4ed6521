"""Faults an agent can cause, and what the sandbox must contain, on both backends."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from envs.sandbox import SandboxConfig, cache_dir, default_rootfs, make_sandbox
from tests.helpers import require
from tests.sandbox.conftest import KILL_SLACK_S, TEST_CONFIG


def test_no_network_not_even_the_hosts_loopback(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        tcp = sandbox.exec(f"timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}'", timeout=10)
        py = sandbox.exec(
            "python3 -c \"import socket; s=socket.socket(); s.settimeout(2); "
            f"s.connect(('127.0.0.1', {port}))\"",
            timeout=10,
        )
        outside = sandbox.exec("timeout 3 bash -c 'echo > /dev/tcp/1.1.1.1/53'", timeout=10)
    finally:
        stop.set()
        thread.join()
        server.close()
    assert tcp.exit_code != 0 and py.exit_code != 0 and outside.exit_code != 0
    assert accepted == []
    interfaces = [line.split(":")[0].strip() for line in sandbox.exec("cat /proc/net/dev").stdout.splitlines()[2:]]
    assert interfaces == ["lo"]


def test_host_files_and_processes_are_invisible(sandbox):
    name = f"clawgym-secret-{uuid.uuid4().hex}"
    secrets = [Path("/root") / name, Path("/tmp") / name]
    try:
        for path in secrets:
            path.write_text("host secret")
        for path in secrets:
            result = sandbox.exec(f"cat {path}")
            assert result.exit_code != 0 and "host secret" not in result.stdout
        assert name not in sandbox.exec("ls -a /root /tmp 2>&1").stdout
    finally:
        for path in secrets:
            path.unlink(missing_ok=True)
    procs = sandbox.exec("ls -d /proc/[0-9]* | wc -l")
    assert procs.ok and int(procs.stdout) < 10


_EVERY_PROCESS = r"""
sleep 30 & (setsid sleep 31 &)
for p in /proc/[0-9]*; do
  echo "== $p"; tr '\0' ' ' < $p/cmdline; echo; tr '\0' '\n' < $p/environ
done
"""


def test_host_environment_and_paths_are_invisible_in_proc(sandbox, monkeypatch):
    """No process in the sandbox (bwrap's own pid 1 included) shows the host's environment
    or a host path in its /proc/<pid>/environ or cmdline."""
    canary = f"clawgym-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("CLAWGYM_TEST_SECRET", canary)
    result = sandbox.exec(_EVERY_PROCESS, timeout=10)
    assert result.ok, result
    assert result.stdout.count("== /proc/") >= 3  # pid 1, bash, the sleeps
    assert "/proc/1\n" in result.stdout
    host_paths = {str(cache_dir()), os.path.realpath(default_rootfs()), str(sandbox.workspace.root), sys.prefix}
    for leak in [canary, "CLAWGYM_TEST_SECRET", *host_paths]:
        assert leak not in result.stdout, f"{leak!r} is visible inside the sandbox:\n{result.stdout}"


def test_commands_hold_no_capabilities(sandbox):
    status = sandbox.exec("grep ^Cap /proc/self/status").stdout
    caps = dict(line.split(":") for line in status.splitlines())
    assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}
    assert all(int(value, 16) == 0 for value in caps.values()), status


_WRITABLE_DIRS = r"""
awk '$3 !~ /^(proc|sysfs|cgroup2?)$/ {print $2}' /proc/self/mounts | sort -u | while read -r m; do
  find "$m" -xdev -type d -writable 2>/dev/null
done | sort -u | while read -r d; do
  (: > "$d/.clawgym-probe") 2>/dev/null && rm -f "$d/.clawgym-probe" && echo "$d"
done
"""
_FILL = r"""
for d in /workspace /tmp /dev/shm; do cat /dev/zero > $d/fill 2>/dev/null; done
du -sk /workspace/fill /tmp/fill /dev/shm/fill
"""


def test_writable_space_is_bounded_as_documented(sandbox, sandbox_config):
    """/workspace, /tmp and /dev/shm are the only places a file can be created (not /dev,
    not /dev/mqueue), and together they hold at most disk_mb plus a quarter (see base.py)."""
    writable = sandbox.exec(_WRITABLE_DIRS, timeout=20)
    assert writable.stdout.split() == ["/dev/shm", "/tmp", "/workspace"], writable
    assert sandbox.exec("touch /dev/x").exit_code != 0
    require(sandbox.workspace.quota, "no disk quota: the tmpfs mounts need root (only RLIMIT_FSIZE applies)")
    filled = sandbox.exec(_FILL, timeout=20)
    kb = {path: int(size) for size, path in (line.split() for line in filled.stdout.splitlines())}
    assert kb["/workspace/fill"] <= sandbox_config.disk_mb * 1024, filled
    assert kb["/tmp/fill"] + kb["/dev/shm/fill"] <= sandbox_config.disk_mb // 4 * 1024, filled
    assert kb["/workspace/fill"] > sandbox_config.disk_mb * 1024 * 0.9  # it really was filled


def test_only_workspace_and_tmp_are_writable(sandbox):
    name = f"clawgym-x-{uuid.uuid4().hex[:8]}"
    for cmd in (f"touch /etc/{name}", f"echo x > /usr/{name}", f"mkdir /{name}", f"touch /root/{name}"):
        assert sandbox.exec(cmd).exit_code != 0, cmd
    for parent in ("/etc", "/usr", "/", "/root"):
        assert not (Path(parent) / name).exists()
        assert not (default_rootfs() / parent.lstrip("/") / name).exists()
    assert sandbox.exec(f"echo ok > /workspace/{name} && echo ok > /tmp/{name} && cat {name}").stdout == "ok\n"


def test_fork_bomb_is_contained(sandbox, sandbox_config):
    start = time.monotonic()
    result = sandbox.exec(":(){ :|:& };:; sleep 120", timeout=5)
    assert result.timed_out or result.exit_code != 0
    assert time.monotonic() - start < 5 + KILL_SLACK_S  # killed at its timeout, bomb and all
    assert subprocess.run(["true"], timeout=10).returncode == 0  # the host can still fork
    after = sandbox.exec("ps -eo comm --no-headers")
    assert after.ok
    assert len(after.stdout.split()) <= 6, after.stdout  # init, wrapper, bash, ps: nothing left over


_FORK_UNTIL_REFUSED = """
import os, signal
children = []
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children.append(pid)
except OSError:
    pass
print(len(children))
"""


def test_process_count_is_capped(sandbox, sandbox_config):
    sandbox.put_file("/tmp/forks.py", _FORK_UNTIL_REFUSED)
    result = sandbox.exec("python3 /tmp/forks.py", timeout=20)
    assert result.ok, result
    assert 10 < int(result.stdout) < sandbox_config.pids
    assert sandbox.exec("ps -e --no-headers | wc -l").stdout.strip() in {"3", "4", "5", "6"}


def test_memory_is_capped(sandbox):
    result = sandbox.exec("python3 -c 'b = bytearray(10 * 1024**3); print(len(b))'", timeout=30)
    assert result.exit_code != 0 and not result.stdout
    assert "MemoryError" in result.stderr or result.exit_code == 137
    assert sandbox.exec("echo alive").stdout == "alive\n"
    # over the cgroup cap but under bwrap's RLIMIT_AS headroom: the cgroup must stop it
    touched = sandbox.exec("python3 -c 'b = bytearray(700 * 1024**2); print(len(b))'", timeout=30)
    assert touched.exit_code != 0 and not touched.stdout
    assert sandbox.exec("echo alive").stdout == "alive\n"


def test_cpu_is_capped(sandbox, sandbox_config):
    require((os.cpu_count() or 1) >= 2, "needs 2 host cores to tell a 1-core cap from no cap")
    spin = "timeout 1.5 sh -c 'while :; do :; done'"
    result = sandbox.exec(f"TIMEFORMAT='%U %S'; time ( {spin} & {spin} & wait )", timeout=10)
    cpu_s = sum(map(float, result.stderr.split()))
    assert cpu_s < 1.5 * sandbox_config.cpus + 0.4, f"2 busy loops for 1.5 s used {cpu_s:.2f} CPU-s"


def test_disk_is_capped(sandbox, sandbox_config):
    require(sandbox.workspace.quota, "no disk quota: the tmpfs workspace mount needs root (only RLIMIT_FSIZE applies)")
    free_before = shutil.disk_usage("/").free
    result = sandbox.exec("dd if=/dev/zero of=big bs=1M count=200", timeout=30)
    assert result.exit_code != 0
    assert "No space left" in result.stderr or result.exit_code == 153  # ENOSPC, or SIGXFSZ (bwrap)
    assert (sandbox.workspace.workspace / "big").stat().st_size <= sandbox_config.disk_mb << 20
    assert free_before - shutil.disk_usage("/").free < 50 << 20  # tmpfs: the host disk is untouched
    assert sandbox.exec("rm big && echo ok").stdout == "ok\n"


def test_limits_are_visible_inside(sandbox, sandbox_config):
    result = sandbox.exec("df -m /workspace | tail -1; hostname")
    lines = result.stdout.splitlines()
    assert lines[-1] == "clawgym-sandbox"
    if sandbox.workspace.quota:
        assert int(lines[0].split()[1]) <= sandbox_config.disk_mb
    assert os.path.realpath(default_rootfs()) != "/"


def test_a_workspace_alias_is_the_same_directory(backend: str) -> None:
    """``workspace_aliases`` mounts /workspace at a second path (SWE-bench images use /testbed)."""
    sandbox = make_sandbox(backend, replace(TEST_CONFIG, workspace_aliases=("/mnt",)))
    try:
        result = sandbox.exec("echo hi > a && cat /mnt/a && echo there > /mnt/b && pwd")
        assert result.stdout.split() == ["hi", "/workspace"]
        assert sandbox.get_file("b") == b"there\n"
    finally:
        sandbox.close()


def test_a_workspace_alias_must_be_a_plain_path() -> None:
    for bad in ("relative", "/tmp", "/workspace", "/a/../b", "/a//b"):
        with pytest.raises(ValueError, match="workspace_aliases"):
            SandboxConfig(workspace_aliases=(bad,))
