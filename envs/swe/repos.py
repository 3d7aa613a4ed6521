"""A repository at ``base_commit`` for an instance: built once, cached, copied per episode.

Building (once per instance, on the host and in a sandbox; :meth:`RepoCache.prepare`):

1. **Flatten.** The source repository (a local path, a ``file://`` URL, or the generator's
   ``envs.swe.projects.repo_with_commit``) is never run git in: a scratch repository
   borrows its objects (``objects/info/alternates``), so the source's config and hooks are
   never read, and makes one root commit holding ``base_commit``'s tree (fixed author and
   date, so the same tree always gives the same sha). The workspace repository holds only
   that commit: nothing after ``base_commit`` (where the fix lives, for a mutated project
   the very parent commit) can be found with ``git log --all``. Agents still get
   ``git diff``, ``git status``, ``git stash``, ``git checkout -- file``.
2. **Install.** The instance's ``install`` script runs once in a sandbox on that checkout
   (no network; what it builds must land in ``/workspace``). Tracked files it changes are
   an error; untracked files it makes are written to ``.git/info/exclude``, so neither
   ``git status`` nor the graded diff shows them.
3. **Pack.** ``/workspace`` (with ``.git``) is stored as one uncompressed tar under
   ``$CLAWGYM_CACHE/swe/workspaces/<instance>-<key>/``. The key hashes what the result
   depends on (base_commit, install, the rootfs build), so editing ``install`` rebuilds.

Per episode, :func:`checkout` puts the tar into the sandbox's ``/tmp`` and untars it into
``/workspace`` in one command (no reinstall; docs/results/envs-swe.md has the measured p50/p95). Files are
owned by whoever runs the sandbox's commands (``--no-same-owner``), so git never meets a
"dubious ownership" repository; the env's git config also says ``safe.directory = *`` for
backends where the two differ. ``core.checkStat=minimal`` with preserved mtimes keeps
the index valid after the copy, so the agent's first ``git status`` does not rehash.

A record whose ``repo`` is a GitHub name (``owner/name``) and has no local source runs on
the docker backend when the SWE-bench image swebench's harness names for it
(``sweb.eval.x86_64.<id>:latest``, or ``swebench/sweb.eval.x86_64.<id, __ as _1776_>:latest``)
is in the local daemon: the image's ``/testbed`` is packed the same way (its history kept:
SWE-bench's eval scripts name ``base_commit``), and the sandbox runs that image with the
workspace mounted at both ``/workspace`` and ``/testbed`` (its conda env's editable install
points at ``/testbed``), the env's ``bin`` first on ``PATH``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from envs.errors import EnvError
from envs.sandbox import Sandbox, SandboxConfig, SandboxError, cache_dir
from envs.swe import swe_rootfs
from envs.swe.instances import Instance
from envs.terminal.env import GITCONFIG
from envs.terminal.env import GITCONFIG_TEXT as TERMINAL_GITCONFIG_TEXT

CACHE_VERSION = 1
"""Bump when the cached tar's layout changes; old entries are then rebuilt."""
STAGE = "/tmp/.clawgym"
"""Where clawgym stages its own files inside a sandbox (tars, patches, logs)."""
TAR_IN_SANDBOX = f"{STAGE}/workspace.tar"
GITCONFIG_TEXT = TERMINAL_GITCONFIG_TEXT + "[safe]\n\tdirectory = *\n"
"""Lowest-precedence git settings for the agent (its own ``git config`` wins): an identity
for ``git commit``, no pager, and every directory safe (docker's root vs a non-root host)."""
SANDBOX_ENV = (("GIT_CONFIG_GLOBAL", GITCONFIG), ("PAGER", "cat"), ("GIT_PAGER", "cat"),
               ("PYTHONDONTWRITEBYTECODE", "1"))
"""Environment of every SWE sandbox command: no ``__pycache__`` litter in ``git status``."""
DEFAULT_EXCLUDES = """# clawgym: tool droppings, never part of an agent's patch
__pycache__/
*.py[cod]
.pytest_cache/
.hypothesis/
"""
BASE_DATE = "2000-01-01T00:00:00+0000"
_HOST_GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
                 "GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "clawgym",
                 "GIT_AUTHOR_EMAIL": "base@clawgym.invalid", "GIT_AUTHOR_DATE": BASE_DATE,
                 "GIT_COMMITTER_NAME": "clawgym", "GIT_COMMITTER_EMAIL": "base@clawgym.invalid",
                 "GIT_COMMITTER_DATE": BASE_DATE, "LC_ALL": "C"}


class RepoError(EnvError):
    """An instance's repository could not be built (missing source, unknown commit, failed
    install): an infrastructure error; the message names the field to fix."""


@dataclass(frozen=True)
class PreparedRepo:
    """An instance's workspace, built and cached: what :func:`checkout` copies in."""

    instance_id: str
    tar: Path
    """``/workspace`` (``.git`` included) after ``install``, as an uncompressed tar."""
    head: str
    """The commit ``HEAD`` is at in ``/workspace``; the graded diff is taken against it."""
    image: str | None = None
    """A SWE-bench image to run on (docker only), else None: the ``swe`` rootfs."""
    build_s: float = 0.0
    """Seconds the build took (0 when it came from the cache)."""


class RepoCache:
    """Prepared workspaces under ``root`` (default ``$CLAWGYM_CACHE/swe/workspaces``).

    Safe across threads and processes: builds of one entry are serialized by a file lock,
    and an entry appears by an atomic rename, complete or not at all.
    """

    def __init__(self, root: str | Path | None = None, *, install_timeout_s: float = 900.0) -> None:
        self.root = Path(root) if root is not None else cache_dir() / "swe" / "workspaces"
        self.install_timeout_s = install_timeout_s
        self._failed: dict[str, str] = {}  # key -> why, so a broken install is not retried each reset

    def key(self, instance: Instance, image: str | None = None) -> str:
        parts = [CACHE_VERSION, instance.base_commit, instance.install, _rootfs_tag(), image or ""]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]

    def entry(self, instance: Instance, image: str | None = None) -> Path:
        return self.root / f"{instance.instance_id}-{self.key(instance, image)}"

    def cached(self, instance: Instance, image: str | None = None) -> PreparedRepo | None:
        """The prepared workspace if it is already built, else None (builds nothing)."""
        meta = self.entry(instance, image) / "meta.json"
        try:
            data = json.loads(meta.read_text())
        except (OSError, ValueError):
            return None
        return PreparedRepo(instance.instance_id, meta.parent / "workspace.tar", data["head"], image)

    def prepare(self, instance: Instance, sandbox: Sandbox, image: str | None = None) -> PreparedRepo:
        """The instance's workspace, building it first if needed (``install`` runs in
        ``sandbox``, which is wiped after). Raises :class:`RepoError` naming the field."""
        key = self.key(instance, image)
        if key in self._failed:
            raise RepoError(self._failed[key])
        found = self.cached(instance, image)
        if found is not None:
            return found
        self.root.mkdir(parents=True, exist_ok=True)
        entry = self.entry(instance, image)
        with open(self.root / f".{entry.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another env (thread or process) may be building it
            found = self.cached(instance, image)
            if found is not None:
                return found
            start = time.monotonic()
            try:
                tar, head = self._build(instance, sandbox, image)
            except RepoError as exc:
                self._failed[key] = str(exc)
                raise
            finally:
                try:
                    sandbox.reset()
                except SandboxError:
                    pass  # the caller's next reset starts a fresh sandbox
            build_s = time.monotonic() - start
            scratch = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=self.root))
            (scratch / "workspace.tar").write_bytes(tar)
            (scratch / "meta.json").write_text(json.dumps(
                {"instance_id": instance.instance_id, "base_commit": instance.base_commit,
                 "head": head, "image": image, "build_s": round(build_s, 3),
                 "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1))
            if entry.exists():  # a stale half-entry from a crash: replace it
                shutil.rmtree(entry, ignore_errors=True)
            os.rename(scratch, entry)
        return PreparedRepo(instance.instance_id, entry / "workspace.tar", head, image, build_s)

    def _build(self, instance: Instance, sandbox: Sandbox, image: str | None) -> tuple[bytes, str]:
        if image is not None:
            tar, head = testbed_tar(image), instance.base_commit
        else:
            with tempfile.TemporaryDirectory(prefix="clawgym-swe-") as scratch:
                head = flatten(source_repo(instance), instance, Path(scratch))
                tar = pack(Path(scratch) / "tree")
        if not instance.install.strip():
            return tar, head
        return self._install(instance, sandbox, tar), head

    def _install(self, instance: Instance, sandbox: Sandbox, tar: bytes) -> bytes:
        """Run ``install`` on the checkout in ``sandbox``; the resulting workspace as a tar."""
        checkout(sandbox, tar)
        result = sandbox.exec(instance.install, timeout=self.install_timeout_s)
        if not result.ok:
            how = (f"ran past {self.install_timeout_s:g} s" if result.timed_out
                   else f"exited with code {result.exit_code}")
            raise RepoError(f"instance {instance.instance_id}: install {how}: "
                            f"{_tail(result.stderr or result.stdout)!r}; fix `install` in {instance.source}")
        status = sandbox.exec("git status --porcelain=v1 -z --untracked-files=normal", timeout=120)
        entries = [e for e in status.stdout.split("\0") if e]
        changed = [e[3:] for e in entries if not e.startswith("??")]
        if not status.ok or changed:
            raise RepoError(f"instance {instance.instance_id}: install changed tracked files "
                            f"{changed[:5] or status.stderr.strip()[:200]}; an install may only add "
                            f"files (fix `install` in {instance.source})")
        made = [e[3:] for e in entries if e.startswith("??")]
        if made:
            exclude = sandbox.get_file(".git/info/exclude").decode(errors="replace")
            lines = "".join(f"/{_glob_escape(p)}\n" for p in made)
            sandbox.put_file(".git/info/exclude", exclude + "# clawgym: made by install\n" + lines)
        packed = sandbox.exec(f"tar -cf {STAGE}/out.tar -C /workspace . && git status --porcelain",
                              timeout=300)
        if not packed.ok or packed.stdout.strip():
            raise RepoError(f"instance {instance.instance_id}: could not pack the installed "
                            f"workspace: {_tail(packed.stderr or packed.stdout)!r}")
        return sandbox.get_file(f"{STAGE}/out.tar")


# ---- per episode -------------------------------------------------------------------------
def checkout(sandbox: Sandbox, tar: bytes | PreparedRepo, *, workdir: str = "/workspace") -> None:
    """Fill the sandbox's (wiped) ``workdir`` with a prepared workspace; writes the git config.

    Two host-side file puts and one command. Raises :class:`RepoError` if the copy fails.
    """
    stage_checkout(sandbox, tar)
    result = sandbox.exec(untar_command(workdir), timeout=300)
    if not result.ok:
        raise RepoError(f"could not copy the repository into {workdir}: "
                        f"{_tail(result.stderr or result.stdout)!r}")


def stage_checkout(sandbox: Sandbox, tar: bytes | PreparedRepo) -> None:
    """Put the git config and the workspace tar in place; :func:`untar_command` finishes."""
    data = tar.tar.read_bytes() if isinstance(tar, PreparedRepo) else tar
    sandbox.put_file(GITCONFIG, GITCONFIG_TEXT)
    sandbox.put_file(TAR_IN_SANDBOX, data)


def untar_command(workdir: str = "/workspace") -> str:
    """The shell command that unpacks a staged workspace tar into ``workdir``."""
    return f"tar -xf {TAR_IN_SANDBOX} -C {workdir} --no-same-owner && rm -f {TAR_IN_SANDBOX}"


def pristine_git_dir(sandbox: Sandbox, prepared: PreparedRepo, dest: str = f"{STAGE}/pristine") -> str:
    """Extract the prepared ``.git`` and every ``.gitignore`` (nothing else) into ``dest``: a
    git dir the agent never touched, so a diff taken with it cannot be steered by hooks,
    config or rewritten history, and the ignore rules as they were at base."""
    sandbox.put_file(TAR_IN_SANDBOX, prepared.tar.read_bytes())
    # tar exits 2 when a repository has no .gitignore to match: HEAD says the .git came out
    result = sandbox.exec(f"rm -rf {dest} && mkdir -p {dest} && {{ tar -xf {TAR_IN_SANDBOX} -C {dest} "
                          f"--no-same-owner --wildcards ./.git '*/.gitignore'; test -f {dest}/.git/HEAD; }} "
                          f"&& rm -f {TAR_IN_SANDBOX}", timeout=300)
    if not result.ok:
        raise RepoError(f"could not restore the pristine .git: {_tail(result.stderr)!r}")
    return f"{dest}/.git"


# ---- building blocks -----------------------------------------------------------------------
def source_repo(instance: Instance) -> Path:
    """The local git repository holding ``base_commit``; :class:`RepoError` names what is missing."""
    if instance.project is not None:
        try:
            from envs.swe.projects import repo_with_commit
        except ImportError as exc:
            raise RepoError(f"instance {instance.instance_id}: project {instance.project!r} needs "
                            f"envs.swe.projects, which cannot be imported: {exc}") from exc
        try:
            return Path(repo_with_commit(instance.project, instance.record))
        except EnvError:
            raise
        except Exception as exc:  # the generator's own errors name the project's problem
            raise RepoError(f"instance {instance.instance_id}: project {instance.project!r}: "
                            f"{type(exc).__name__}: {exc}") from exc
    local = instance.local_repo()
    if local is None:
        raise RepoError(
            f"instance {instance.instance_id}: repo {instance.repo!r} is not a local git repository "
            f"and no SWE-bench image for it is in the local Docker daemon; clone it and set `repo` to "
            f"its path (or a file:// URL) in {instance.source}, or build the image with swebench's "
            "harness and use sandbox=docker")
    if not local.is_dir():
        raise RepoError(f"instance {instance.instance_id}: repo {str(local)!r} does not exist; fix "
                        f"`repo` in {instance.source}")
    return local


def objects_dir(repo: Path) -> Path:
    """The object store of a repository (work tree, bare, or worktree with a ``.git`` file),
    found without running git in it."""
    git = repo / ".git"
    if git.is_file():  # a linked worktree or submodule: "gitdir: <path>"
        text = git.read_text().strip()
        git = (repo / text.removeprefix("gitdir:").strip()).resolve()
        common = git / "commondir"
        if common.is_file():
            git = (git / common.read_text().strip()).resolve()
    elif not git.is_dir():
        git = repo  # bare
    objects = git / "objects"
    if not (objects.is_dir() and (git / "HEAD").exists()):
        raise FileNotFoundError(f"{repo} is not a git repository (no {objects})")
    return objects


def flatten(source: Path, instance: Instance, scratch: Path) -> str:
    """Make ``scratch/tree``: a repository whose one commit holds ``base_commit``'s tree,
    checked out. Returns that commit's sha."""
    where = f"fix `repo` in {instance.source}"
    try:
        objects = objects_dir(source)
    except (OSError, FileNotFoundError) as exc:
        raise RepoError(f"instance {instance.instance_id}: {exc}; {where}") from None
    view = scratch / "view.git"
    _git(["init", "-q", "--bare", str(view)], scratch)
    (view / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    base = instance.base_commit
    if _git(["cat-file", "-e", f"{base}^{{commit}}"], view, check=False).returncode != 0:
        raise RepoError(f"instance {instance.instance_id}: base_commit {base} is not a commit of "
                        f"{source}; fix `base_commit` (or `repo`) in {instance.source}")
    tree = _git(["rev-parse", f"{base}^{{tree}}"], view).stdout.strip()
    commit = _git(["commit-tree", tree, "-m", f"base_commit {base}"], view).stdout.strip()
    _git(["update-ref", "refs/heads/main", commit], view)
    out = scratch / "tree"
    _git(["init", "-q", str(out)], scratch)
    _git(["fetch", "-q", "--no-tags", str(view), "refs/heads/main:refs/heads/main"], out)
    _git(["symbolic-ref", "HEAD", "refs/heads/main"], out)
    _git(["reset", "-q", "--hard", "main"], out)
    for key, value in (("core.checkStat", "minimal"), ("core.trustctime", "false"),
                       ("gc.auto", "0"), ("core.fileMode", "true")):
        _git(["config", key, value], out)
    (out / ".git" / "info").mkdir(exist_ok=True)
    (out / ".git" / "info" / "exclude").write_text(DEFAULT_EXCLUDES)
    for junk in ("hooks", "description", "logs", "FETCH_HEAD", "ORIG_HEAD"):
        path = out / ".git" / junk
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    return commit


def pack(tree: Path) -> bytes:
    """``tree``'s contents as an uncompressed tar (members ``./name``; links kept as links)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(os.listdir(tree)):
            tar.add(tree / name, arcname=f"./{name}")
    return buffer.getvalue()


def _git(args: list[str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, **_HOST_GIT_ENV}, timeout=600)
    if check and result.returncode != 0:
        raise RepoError(f"git {' '.join(args[:2])} failed: {result.stderr.strip()[:300]}")
    return result


def _rootfs_tag() -> str:
    """The ``swe`` rootfs build the cache was made on (``swe-<hash>``): a rebuilt rootfs
    (other packages) rebuilds installed workspaces too."""
    return Path(os.path.realpath(swe_rootfs())).name


def _glob_escape(path: str) -> str:
    return "".join("\\" + c if c in "*?[\\!# " else c for c in path)


def _tail(text: str, limit: int = 300) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


# ---- SWE-bench images (docker only) -------------------------------------------------------
TESTBED = "/testbed"
TESTBED_PATH = "/opt/miniconda3/envs/testbed/bin:/opt/miniconda3/bin:" \
               "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""``PATH`` in a SWE-bench image: its ``testbed`` conda env first, as ``conda activate`` would."""


def needs_image(instance: Instance) -> bool:
    """Whether the instance has no local source, so only a SWE-bench image can hold it."""
    return instance.project is None and instance.local_repo() is None


def image_names(instance: Instance) -> list[str]:
    """The names swebench gives the instance's image (``ImageSpec.name``): the record's own
    ``image`` if any, the local build, and the published one (``__`` becomes ``_1776_``)."""
    key = f"sweb.eval.x86_64.{instance.instance_id}:latest".lower()
    names = [f"swebench/{key}".replace("__", "_1776_"), key]
    own = instance.record.get("image")
    return ([own] if isinstance(own, str) and own else []) + names


def find_image(instance: Instance) -> str | None:
    """The first of :func:`image_names` the local Docker daemon has, else None."""
    try:
        import docker

        client = docker.from_env(timeout=10)
    except Exception:  # no SDK or no daemon: no image either
        return None
    try:
        for name in image_names(instance):
            try:
                client.images.get(name)
                return name
            except Exception:
                continue
        return None
    finally:
        client.close()


def testbed_tar(image: str) -> bytes:
    """The image's ``/testbed`` as a workspace tar (members ``./name``)."""
    import docker

    client = docker.from_env(timeout=600)
    try:
        container = client.containers.create(image, command=["true"])
        try:
            stream, _ = container.get_archive(TESTBED)
            raw = b"".join(stream)
        finally:
            container.remove(force=True)
    except docker.errors.DockerException as exc:
        raise RepoError(f"could not read {TESTBED} from image {image}: {exc}") from exc
    finally:
        client.close()
    out = io.BytesIO()
    prefix = TESTBED.strip("/") + "/"
    with tarfile.open(fileobj=io.BytesIO(raw)) as src, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as dst:
        for member in src:
            if not member.name.startswith(prefix):
                continue  # the testbed directory itself
            member.name = "./" + member.name[len(prefix):]
            if member.islnk():
                member.linkname = "./" + member.linkname.removeprefix(prefix)
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
    return out.getvalue()


def testbed_sandbox(config: SandboxConfig) -> Sandbox:
    """A docker sandbox on a SWE-bench image (``config.image``) whose workspace is mounted at
    both ``/workspace`` and ``/testbed``, where the image's own scripts look for the repo."""
    from dataclasses import replace

    from envs.sandbox import make_sandbox

    return make_sandbox("docker", replace(config, workspace_aliases=(TESTBED,)))
