.DEFAULT_GOAL := help
PY ?= python3

help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

demo: ## Install the package and run the simulated day on the in-memory store
	$(PY) -m pip install . && usage-guard demo

check: ## The edit loop: layer and size checks, fmt, clippy, the extension, ruff, stubtest, mypy
	bash scripts/check.sh

test: ## Run every test: fmt, clippy, cargo test, build, ruff, stubtest, pytest, wheels
	bash scripts/test.sh

wheel: ## Build the release abi3 wheel (CPython 3.9+) and the sdist into dist/
	bash scripts/build_wheel.sh

test-wheels: ## Test that wheel on CPython 3.9-3.13 with no Rust toolchain, and the sdist
	bash scripts/test_wheels.sh

.venv/bin/python:
	$(PY) -m venv .venv
	.venv/bin/pip install -q -r requirements-test.txt

dev: .venv/bin/python ## Build the extension into .venv for development
	VIRTUAL_ENV=$(CURDIR)/.venv .venv/bin/maturin develop

bench: .venv/bin/python ## Run the benchmarks: criterion, then one table of every figure beside its peer (installs limits, tiktoken, redis; redis-server via apt-get)
	command -v redis-server >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
	cargo bench --bench admit_bill
	cargo bench --bench gateway_load --no-default-features --features gateway,bpe-openai,sqlite,thread-mimalloc
	.venv/bin/pip install -q limits tiktoken redis
	VIRTUAL_ENV=$(CURDIR)/.venv .venv/bin/maturin develop --release --quiet
	.venv/bin/python benches/table.py --criterion $(or $(CARGO_TARGET_DIR),target)/criterion
	.venv/bin/python benches/gateway.py

fmt: ## Format Rust and Python sources
	cargo fmt --all
	.venv/bin/ruff format python tests_py benches examples

.PHONY: help demo check test dev bench fmt
.PHONY: wheel test-wheels
