#!/usr/bin/env bash
# A self-hosted Tinker API server for `compute=tinker` and the tests marked `tinker`:
# skyrl-tx 0.3.0, whose JAX engine runs on the CPU and serves the default model (Llama).
#
#   scripts/tinker_server.sh setup          # .venv-tinker, the served model, the engine launcher (idempotent)
#   scripts/tinker_server.sh serve [PORT]   # the server in the foreground on 127.0.0.1:PORT (default 8000)
#
# Then: TINKER_BASE_URL=http://127.0.0.1:PORT TINKER_API_KEY=tml-<anything> (the server checks
# no key; the SDK wants the prefix) python -m trainers.run compute=tinker lora.rank=8 ...
#
# Why each step (each checked against skyrl-tx 0.3.0):
# - .venv-tinker is its own venv: skyrl-tx pins transformers<5, clawgym runs 5.x. Its `jax`/`gpu`
#   extras pull jax[cuda12] (gigabytes); plain `jax` is the CPU build. peft asks for torch, and any
#   spec other than torch==2.13.0 resolves to a CUDA build, so it is pinned.
# - The API server starts its engine as `uv run --extra tinker --extra jax -m tx.tinker.engine ...`.
#   There is no uv here: a `uv` on the server's PATH (.venv-tinker/launcher/uv) runs that module with
#   the venv's own python instead, the rest of the arguments as they are.
# - The engine reads a top-level `rope_theta`, which the cached model's config.json keeps only under
#   `rope_parameters` (transformers 5), and its transformers 4 does not know the tokenizer class
#   `TokenizersBackend`: the served copy (files hard-linked) has `rope_theta` added and the
#   tokenizer named `PreTrainedTokenizerFast`.
# - The engine's default LoRA slots (32 adapters x rank 32) are far too large for this machine:
#   4 adapters of rank <= 8 (TINKER_MAX_ADAPTERS, TINKER_MAX_RANK).
# Nothing downloads at run time: the base model is a local directory and the hub is offline.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=$(pwd)
VENV="$ROOT/.venv-tinker"
PY="${PYTHON:-python3}"
SPEC="${TINKER_SERVER_SPEC:-skyrl-tx[tinker]==0.3.0}"
say() { echo "tinker: $*" >&2; }

served_model() {  # the served copy's directory, next to the default model's cache
  "$ROOT/.venv/bin/python" -c "from agents.model_cache import default_model_dir as d; print(d().with_name(d().name + '-tinker'))"
}

setup_venv() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import tx.tinker.api, jax, flax, optax" 2>/dev/null; then
    say "$VENV ready"
    return
  fi
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  say "pip install $SPEC jax flax optax into $VENV (CPU jax; ~150 packages, minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "$SPEC" jax flax optax "torch==2.13.0"
}

setup_client() {  # the SDK clawgym calls, in the project venv (the `tinker` extra)
  if "$ROOT/.venv/bin/python" -c "import tinker" 2>/dev/null; then
    return
  fi
  say "pip install tinker==0.16.1 into .venv (the client; 0.16.1 does not call the /api/v1/client/config route skyrl-tx 0.3.0 lacks)"
  "$ROOT/.venv/bin/python" -m pip install -q "tinker==0.16.1"
}

setup_launcher() {
  mkdir -p "$VENV/launcher"
  cat > "$VENV/launcher/uv" <<EOF
#!/usr/bin/env bash
# skyrl-tx's API server runs \`uv run [--extra X ...] -m MODULE ARGS\`; this runs MODULE with .venv-tinker's python.
[ "\${1:-}" = run ] || { echo "uv shim: only 'uv run' is supported, got: \$*" >&2; exit 2; }
shift
while [ "\${1:-}" = --extra ]; do shift 2; done
exec "$VENV/bin/python" "\$@"
EOF
  chmod +x "$VENV/launcher/uv"
}

setup_model() {  # links the model's files; writes its two JSON files as skyrl-tx reads them (cheap: every time)
  local source target
  target=$(served_model)
  source=$("$ROOT/.venv/bin/python" -c "from agents.model_cache import resolve_model_dir; print(resolve_model_dir('default'))")
  mkdir -p "$target"
  for f in "$source"/*; do
    name=$(basename "$f")
    case "$name" in config.json|tokenizer_config.json) continue ;; esac
    [ "$target/$name" -ef "$f" ] || ln -f "$f" "$target/$name" 2>/dev/null || cp -f "$f" "$target/$name"
  done
  "$ROOT/.venv/bin/python" - "$source" "$target" <<'EOF'
import json, sys
from pathlib import Path
source, target = Path(sys.argv[1]), Path(sys.argv[2])
config = json.loads((source / "config.json").read_text())
config.setdefault("rope_theta", (config.get("rope_parameters") or {}).get("rope_theta", 10000.0))
(target / "config.json").write_text(json.dumps(config, indent=2))
tokenizer = json.loads((source / "tokenizer_config.json").read_text())
if tokenizer.get("tokenizer_class") == "TokenizersBackend":  # transformers 5's name; 4.x has the fast class
    tokenizer["tokenizer_class"] = "PreTrainedTokenizerFast"
(target / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2))
EOF
  say "served model ready: $target"
}

serve() {
  local port="${1:-8000}" state="${TINKER_STATE_DIR:-$VENV/state}" model
  model=$(served_model)
  [ -x "$VENV/launcher/uv" ] && [ -f "$model/config.json" ] \
    || { echo "tinker: not set up; run \`make tinker\` (scripts/tinker_server.sh setup) first" >&2; exit 2; }
  mkdir -p "$state/checkpoints"
  local backend_config
  # Fixed batch shapes (sampling padded to TINKER_SAMPLE_BATCH rows, training one sample a
  # pass) spare the JIT a compile per batch size: each takes 15-65 s on this CPU.
  backend_config=$(printf '{"max_lora_adapters": %d, "max_lora_rank": %d, "sample_max_num_sequences": %d, "train_micro_batch_size": %d}' \
    "${TINKER_MAX_ADAPTERS:-4}" "${TINKER_MAX_RANK:-8}" "${TINKER_SAMPLE_BATCH:-8}" "${TINKER_TRAIN_MICROBATCH:-1}")
  say "serving $model on 127.0.0.1:$port (state $state)"
  # JAX's persistent cache keeps the compiled kernels for the next server start
  PATH="$VENV/launcher:$PATH" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 JAX_PLATFORMS=cpu \
    JAX_COMPILATION_CACHE_DIR="${TINKER_JAX_CACHE:-$VENV/jax-cache}" \
    exec "$VENV/bin/python" -m tx.tinker.api --host 127.0.0.1 --port "$port" \
    --base-model "$model" --backend jax --backend-config "$backend_config" \
    --checkpoints-base "$state/checkpoints" --database-url "sqlite:///$state/tinker.db"
}

case "${1:-setup}" in
  setup) setup_client; setup_venv; setup_launcher; setup_model; say "ready: scripts/tinker_server.sh serve [PORT]" ;;
  serve) shift; serve "$@" ;;
  model) served_model ;;
  *) echo "usage: $0 setup | serve [PORT] | model" >&2; exit 2 ;;
esac
