#!/usr/bin/env bash
# Gathers, as wheels in .whl/ (ignored by git), what the live server and its GPU test need
# beyond a bare CUDA image's packages: the server's own (uvicorn, fastapi, starlette,
# opentelemetry-api) and the test's openai client with its dependencies, at the versions this
# checkout's .venv holds. On the device machine, carry .whl and run
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# (with PYTHONPATH=/tmp/site, as /tmp/gpuenv sets). Measured 2026-11-27 on an H200: the image
# lacked all of these; with them the live-server gpu test passed in 43 s.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
packages="openai httpx2 httpcore2 truststore pydantic pydantic-core jiter sniffio anyio
annotated-types typing-inspection typing-extensions uvicorn fastapi starlette opentelemetry-api"
pins=()
for name in $packages; do
  version=$(.venv/bin/python -m pip show "$name" 2>/dev/null | awk '/^Version:/{print $2}')
  [[ -n "$version" ]] || { echo "gpu_serve_wheels: $name is not in .venv (run make setup first)" >&2; exit 2; }
  pins+=("$name==$version")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${pins[@]}"
du -sh .whl
