#!/usr/bin/env bash
# Build .venv-verifiers: verifiers 0.4.0 (vf-eval, prime-rl's environment API) beside clawgym's
# envs, for envs.interop.verifiers and the tests marked `verifiers`. Idempotent.
#
# Why a venv of its own: verifiers 0.4.0 requires openai>=2.54,<3 and clawgym pins
# openai==3.54.0 (pip install --dry-run verifiers==0.4.0 into .venv would downgrade it).
# clawgym is not pip-installed here (its pins would clash the same way): a .pth file puts the
# repo on the path, with the env layer's own needs installed (gymnasium pinned as clawgym pins
# it, pyyaml, docker). It also puts envs/interop/verifiers_plugin on the path, whose
# clawgym_verifiers module is what `--env.taskset.id clawgym-verifiers` imports.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=$(pwd)
PY="${PYTHON:-python3}"
VENV=.venv-verifiers
SPEC="${VERIFIERS_SPEC:-verifiers==0.4.0}"
say() { echo "verifiers: $*"; }
ready() { "$VENV/bin/python" -c "import verifiers, clawgym_verifiers; print(verifiers.__version__)" 2>/dev/null; }

if [ -x "$VENV/bin/python" ] && version=$(ready); then
  say "$VENV ready (verifiers $version)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
say "pip install $SPEC into $VENV (~100 packages; a minute)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$SPEC" "gymnasium==1.4.0" "pyyaml>=6.0" "docker==7.2.0"
site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
printf '%s\n%s\n' "$ROOT" "$ROOT/envs/interop/verifiers_plugin" > "$site/clawgym.pth"
say "ready, verifiers $(ready)"
