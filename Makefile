# Two commands for a fresh clone:  `make train` (set up, then train with the preset that suits this machine:
# on 2 CPU cores 17 minutes on an Intel Xeon model 207, 36 on an AMD EPYC Zen 3 with the recipe before) and `make test` (set up, then lint and the default test suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# Without an NVIDIA GPU the CPU build of torch is enough and far smaller than the CUDA one.
TORCH_CPU ?= torch==2.13.0
TIMESTEPS ?=
RUN_ARGS ?=

.PHONY: setup setup-dev train test test-slow lint kernels format bench clean

# `make train` needs only the core install (training, evaluation, dashboards); `make test` adds every extra and the
# test and lint tools (`.[dev]`: MuJoCo, videos, plots, pygame, Ray, wandb, the Hub client, Optuna).
setup: $(STAMP)
setup-dev: $(DEV_STAMP)

# then the package's bytecode, once: pip compiles what it installs, not an editable install's source, and a process
# started where Python may not write it (PYTHONDONTWRITEBYTECODE) would compile the package again each time
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: installing torch with CUDA"; \
	else \
		echo "no NVIDIA GPU: installing $(TORCH_CPU) first"; \
		$(BIN)/python -m pip install --quiet "$(TORCH_CPU)"; \
	fi
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m compileall -q mission_gym
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(DEV_STAMP)

# `make train RUN_ARGS="--resume RUN"` continues a stopped run: a resumed run keeps its own configuration and
# train_ppo refuses a preset beside --resume, so `--preset auto` is left out then.
train: setup
	$(BIN)/python -m mission_gym.scripts.train_ppo $(if $(filter --resume --resume=%,$(RUN_ARGS)),,--preset auto) $(if $(TIMESTEPS),--timesteps $(TIMESTEPS)) $(RUN_ARGS)

test: setup-dev
	$(MAKE) --no-print-directory -j2 lint kernels
	$(BIN)/python -m pytest -q

# the simulation's numba kernels compiled and cached once, beside lint (one core each), rather than by each of the
# suite's first processes at once: a fresh clone has no cache yet (about 13 s on one core of an Intel Xeon)
kernels: setup
	$(BIN)/python -m mission_gym.scripts.bench --mode env --vec-env native --n-envs 16 --threads 1 2 --seconds 0.1 >/dev/null

test-slow: setup-dev
	$(BIN)/python -m pytest -q -m slow

# style and format (ruff), the package's import layers (import-linter, pyproject.toml) and types (mypy)
lint: setup-dev
	$(BIN)/ruff check mission_gym tests tools
	$(BIN)/ruff format --check mission_gym tests tools
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy

format: setup-dev
	$(BIN)/ruff format mission_gym tests tools
	$(BIN)/ruff check --fix mission_gym tests tools

bench: setup
	$(BIN)/python -m mission_gym.scripts.bench --mode env

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
