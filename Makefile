# make demo: the batch-size study on the tiny GRPO testbed (sweep + analysis) on CPU.
#   DEMO_SEEDS: a count N (default 5: seeds 1..N; 1 is a quick look) or a list with commas (6,7).
# make demo-grpo: one tiny GRPO run and its reward curve.  make test: the test suite.
# make lint: ruff (lint, format check) and mypy, as configured in pyproject.toml.
# make bench: hyrl vs TRL, vs a plain-PyTorch floor, and its overhead, in one table
#   (tools/bench.py; creates .venv-bench for TRL itself). BENCH_SEEDS, BENCH_THREADS, BENCH_OUT,
#   BENCH_FLAGS (more tools/bench.py flags, e.g. --parts floor,overhead).
# make contract: the contract tier (tests/contract): SGLang 0.5.23's own code on CPU against what
#   hyrl sends; creates .venv-contract from requirements-contract.txt (SGLang's own torch, about
#   6 GB), sglang itself (--no-deps, the version requirements.txt pins) and this package.
# make golden: the tiny GRPO and PPO runs and a resume of a committed --async-rollout checkpoint,
#   compared with committed records, timing aside (tools/golden.py; about a minute): a refactor
#   that changes no number passes; `python tools/golden.py update CASE` when one is meant to.
# make slurm-test: the Slurm tier (tests/e2e/test_slurm.py, marked slurm), which `make test` skips:
#   the launchers under a one-node Slurm of its own (tools/slurm_local.sh: as root; installs
#   Debian's slurm-wlm and munge when missing; writes only under .slurm-local; refuses to run
#   beside a Slurm or munge it did not start). HYRL_SLURM=1: a skipped test fails the tier.
# Both create .venv from requirements-cpu.txt (plus this package, editable) when it is missing.
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hyrl-installed
STAMP_TIME := $(shell date +%Y%m%d-%H%M%S)
DEMO_DIR ?= runs/demo-sweep-$(STAMP_TIME)
DEMO_SEEDS ?= 5
RUN_DIR ?= runs/demo-grpo-$(STAMP_TIME)
BENCH_SEEDS ?= 3
BENCH_THREADS ?= 1
BENCH_OUT ?= runs/bench-$(STAMP_TIME)
BENCH_FLAGS ?=
TEST_WORKERS ?= 2
CONTRACT_VENV ?= .venv-contract
CONTRACT_STAMP := $(CONTRACT_VENV)/.hyrl-installed
SGLANG_PIN := $(shell grep -m1 '^sglang==' requirements.txt)

.PHONY: demo demo-grpo test lint format venv clean-venv bench contract slurm-test golden

venv: $(STAMP)

$(STAMP): requirements-cpu.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing requirements-cpu.txt into $(VENV) (about a minute on a fresh machine)"
	$(PY) -m pip install -q -r requirements-cpu.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
	$(PY) -m pip install -q --no-deps -e . 2>&1 | { grep -v '^WARNING: Location' || true; }
	@touch $(STAMP)

demo: $(STAMP)
	@seeds="$(DEMO_SEEDS)"; \
	if [[ "$$seeds" != *,* ]]; then \
		if ! [[ "$$seeds" =~ ^[0-9]+$$ ]] || (( seeds < 1 || seeds > 20 )); then \
			echo "make demo: DEMO_SEEDS=$$seeds: allowed: a count 1..20 or a list such as 6,7,8" >&2; \
			exit 2; \
		fi; \
		seeds="$$(seq -s, 1 "$$seeds")"; \
	fi; \
	PATH="$(abspath $(VENV))/bin:$$PATH" bash recipes/tiny/sweep_grpo.sh $(DEMO_DIR) --seeds "$$seeds"
	@echo "report: $(DEMO_DIR)/analysis/report.md"

demo-grpo: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" bash recipes/tiny/grpo.sh --run-dir $(RUN_DIR)
	$(PY) tools/plot_run.py $(RUN_DIR) --out $(RUN_DIR)/reward.png

bench: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) tools/bench.py --seeds $(BENCH_SEEDS) \
		--threads $(BENCH_THREADS) --out $(BENCH_OUT) $(BENCH_FLAGS)

# Two workers (pytest-xdist), each taking whole test files (module fixtures run once);
# TEST_WORKERS=0 runs serially. The slowest 20 tests are listed at the end.
test: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20

slurm-test: $(STAMP)
	HYRL_SLURM=1 $(PY) -m pytest -q -p no:cacheprovider -m slurm tests/e2e/test_slurm.py

golden: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) tools/golden.py check

$(CONTRACT_STAMP): requirements-contract.txt requirements.txt pyproject.toml
	@test -x $(CONTRACT_VENV)/bin/python || python3 -m venv $(CONTRACT_VENV)
	@echo "installing requirements-contract.txt and $(SGLANG_PIN) into $(CONTRACT_VENV) (about 6 GB)"
	$(CONTRACT_VENV)/bin/python -m pip install -q -r requirements-contract.txt 2>&1 | { grep -v '^WARNING: Location' || true; }
	$(CONTRACT_VENV)/bin/python -m pip install -q --no-deps "$(SGLANG_PIN)" 2>&1 | { grep -v '^WARNING: Location' || true; }
	$(CONTRACT_VENV)/bin/python -m pip install -q --no-deps -e . 2>&1 | { grep -v '^WARNING: Location' || true; }
	@touch $(CONTRACT_STAMP)

# HYRL_CONTRACT=1: a missing sglang or a skipped test fails the tier instead of skipping it.
contract: $(CONTRACT_STAMP)
	HYRL_CONTRACT=1 $(CONTRACT_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/contract

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Applies ruff's fixes and formatting in place.
format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean-venv:
	rm -rf $(VENV)
