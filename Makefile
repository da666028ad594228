# `make test` and `make demo` each set the project up first when needed, so
# either works alone on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test java-test demo bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check mjfl tests
	$(BIN)/python -m pytest -q

# The phone client's Java core (android/client-core), with javac and the JUnit console launcher.
java-test:
	android/build-jvm.sh

demo: $(STAMP)
	$(BIN)/mjfl testbed run examples/quickstart.toml --emulate 20 --out runs/demo

bench: $(STAMP)
	mkdir -p runs/bench
	$(BIN)/mjfl bench schedulers --devices 100 1000 --jobs 3 --rounds 30 --json runs/bench/schedulers.json
	$(BIN)/mjfl bench trainers --json runs/bench/trainers.json
	$(BIN)/mjfl bench coordinator --json runs/bench/coordinator.json

clean:
	rm -rf $(VENV) runs *.egg-info .pytest_cache
