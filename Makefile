# clawgym: every target bootstraps first (idempotent, seconds when all is present).
PY := .venv/bin/python

.PHONY: setup train test test-all bench bench-learning bench-serve serve demo rootfs model envs engine test-engine tinker test-tinker clean

setup:
	@bash scripts/bootstrap.sh

## the main job: the personal-chat learning demo on the default model (key=value overrides via ARGS)
train: setup
	$(PY) -m trainers.run $(ARGS)

## the README's test command: the default suite (docker and browser included)
test: setup
	$(PY) -m pytest -q -m "not slow and not gpu and not engine and not tinker"

## everything, slow tests too
test-all: setup
	$(PY) -m pytest -q -m "slow or not slow"

bench: setup
	$(PY) -m benchmarks.perf sandbox vector

bench-learning: setup
	$(PY) -m benchmarks.learning chat seeds=4 $(ARGS)

bench-serve: setup
	$(PY) -m benchmarks.perf_serve

## the live OpenAI-compatible server that learns while it serves (key=value overrides via ARGS)
serve: setup
	$(PY) -m trainers.serve $(ARGS)

## a simulated user teaches a live server; prints the held-out preference-met rate per round
demo: setup
	$(PY) -m scripts.chat_demo

rootfs:
	bash scripts/build_rootfs.sh && bash scripts/build_rootfs.sh --flavor swe

model: setup
	$(PY) -m scripts.cache_model

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

clean:
	rm -rf .venv .pytest_cache
