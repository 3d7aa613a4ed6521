# clawgym: every target bootstraps first (idempotent, seconds when all is present).
PY := .venv/bin/python

.PHONY: setup train test test-all bench bench-learning bench-serve serve demo rootfs model envs engine test-engine tinker test-tinker tinker-cookbook verifiers test-verifiers trl test-trl docs clean

## install everything the tests need (Debian packages, dockerd, .venv, the rootfs, the model, the SWE projects); idempotent
setup:
	@bash scripts/bootstrap.sh

## the main job: the personal-chat learning demo on the default model (key=value overrides via ARGS)
train: setup
	$(PY) -m trainers.run $(ARGS)

## the default test suite (docker and browser included; what CI runs)
test: setup
	$(PY) -m pytest -q -m "not slow and not gpu and not engine and not tinker and not trl and not verifiers and not tinker_cookbook and not skyrl_gym"

## everything, slow tests too
test-all: setup
	$(PY) -m pytest -q -m "slow or not slow"

## sandbox exec latency and vector-env throughput
bench: setup
	$(PY) -m benchmarks.perf sandbox vector

## the chat learning benchmark over 4 seeds (key=value overrides via ARGS)
bench-learning: setup
	$(PY) -m benchmarks.learning chat seeds=4 $(ARGS)

## the live server's latency and throughput under concurrent clients
bench-serve: setup
	$(PY) -m benchmarks.perf_serve

## the live OpenAI-compatible server that learns while it serves (key=value overrides via ARGS)
serve: setup
	$(PY) -m trainers.serve $(ARGS)

## a simulated user teaches a live server; prints the held-out preference-met rate per round
demo: setup
	$(PY) -m scripts.chat_demo

## the sandbox root filesystems (base and swe flavors) and their Docker images
rootfs:
	bash scripts/build_rootfs.sh && bash scripts/build_rootfs.sh --flavor swe

## the default model (SmolLM2-135M-Instruct) as a safetensors cache
model: setup
	$(PY) -m scripts.cache_model

## list every registered env with its alias and description
envs: setup
	$(PY) -m envs list

## .venv-engine: vLLM's CPU build (its own torch) for engine=vllm engine.launch=true; idempotent
engine:
	@bash scripts/engine_venv.sh

## the tests marked engine: a real vLLM server trains 2 steps (opt-in; minutes)
test-engine: setup engine
	$(PY) -m pytest -q -m engine tests/agents/test_engines_vllm.py tests/trainers/test_engine_vllm.py

## the Tinker SDK in .venv and a self-hosted skyrl-tx Tinker server in .venv-tinker (CPU); idempotent
tinker: setup
	@bash scripts/tinker_server.sh setup

## the tests marked tinker: 2 chat steps through a real skyrl-tx server (opt-in; minutes)
test-tinker: setup tinker
	$(PY) -m pytest -q -m tinker tests/trainers/test_tinker.py

## tinker-cookbook 0.4.1 in .venv for envs.interop.tinker_cookbook (with --no-deps: its transformers<=5.5.3 pin is
## not clawgym's 5.23, which its renderers work with; the four libraries its RL loop imports, pinned), and `make tinker`'s server; idempotent
tinker-cookbook: setup tinker
	@$(PY) -c "import importlib.metadata as m, sys, tinker_cookbook.rl.train; sys.exit(m.version('tinker-cookbook') != '0.4.1')" 2>/dev/null || { \
	  echo "tinker-cookbook: pip install tinker-cookbook==0.4.1 (--no-deps) chz blobfile termcolor datasets into .venv" >&2; \
	  $(PY) -m pip install -q --no-deps "tinker-cookbook==0.4.1" && \
	  $(PY) -m pip install -q "chz==0.4.0" "blobfile==3.3.0" "termcolor==3.3.0" "datasets==5.2.0"; }

## trl 1.16.0 in .venv (the trl extra: clawgym's torch/transformers/peft/accelerate pins unchanged) for
## envs.interop.trl; idempotent
trl: setup
	@$(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('trl') != '1.16.0')" 2>/dev/null || { \
	  echo "trl: pip install -e '.[trl]' (trl==1.16.0) into .venv" >&2; \
	  $(PY) -m pip install -q -e '.[trl]'; }

## the tests marked trl: one real GRPOTrainer step on guess with the default model (opt-in; minutes on CPU)
test-trl: setup trl
	$(PY) -m pytest -q -m trl tests/envs/test_interop_trl.py

## .venv-verifiers: verifiers 0.4.0 (it needs openai<3; clawgym pins 3.54) with clawgym's envs on its path, for
## envs.interop.verifiers and `vf-eval clawgym-verifiers`; idempotent
verifiers: setup
	@bash scripts/verifiers_venv.sh

## the tests marked verifiers: vf-eval plays guess and chat against the live server (opt-in; minutes)
test-verifiers: setup verifiers
	$(PY) -m pytest -q -m verifiers tests/envs/test_interop_verifiers.py

## the docs site, built with warnings as errors (-W) and every cross-reference checked (-n)
docs: setup
	$(PY) -m sphinx -W -n --keep-going -b html docs docs/_build/html

## remove .venv and the test and docs caches
clean:
	rm -rf .venv .pytest_cache docs/_build docs/reference/generated
