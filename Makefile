# `make test` and `make demo` each set the project up first when needed, so
# either works alone on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup java-setup browser-setup test test-fast java-test demo bench clean

# The JVM side (android/client-core and the app's compile check) needs a JDK 17,
# JUnit 5, Gson and OkHttp: Debian's packages, installed here when missing.
JAVA_PACKAGES := default-jdk-headless junit5 libgoogle-gson-java libokhttp-java
JAVA_JARS := /usr/share/java/junit-platform-console-standalone.jar /usr/share/java/gson.jar /usr/share/java/okhttp.jar /usr/share/java/okio.jar

setup: $(STAMP) java-setup browser-setup

java-setup:
	@missing=; command -v javac >/dev/null 2>&1 || missing=javac; \
	for jar in $(JAVA_JARS); do [ -f $$jar ] || missing="$$missing $$jar"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing the JVM side's packages: $(JAVA_PACKAGES)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(JAVA_PACKAGES) >/dev/null; \
	  else \
	    echo "missing:$$missing"; \
	    echo "install them with: sudo apt-get install $(JAVA_PACKAGES)  (Debian 12 / Ubuntu)"; exit 1; \
	  fi; \
	fi

# The dashboard's browser test and `mjfl bench dashboard` drive Debian's Chromium through
# Playwright (the dev extra; never `playwright install`): installed here when missing.
CHROMIUM := /usr/bin/chromium

browser-setup:
	@if [ ! -x $(CHROMIUM) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the dashboard's browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "missing: $(CHROMIUM)"; \
	    echo "install it with: sudo apt-get install chromium  (Debian 12)"; exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Three workers on two cores: a test's processes spend much of their time waiting on one another
# (a socket, a service starting), and with two workers a quarter of two cores' time went idle. A
# module's tests run on one worker, the modules with slow tests first (tests/conftest.py orders them).
PARALLEL := -n 3 --dist loadfile --no-loadscope-reorder

test: $(STAMP) java-setup browser-setup
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check mjfl tests
	android/build-jvm.sh
	$(BIN)/python -m pytest -q $(PARALLEL)

# The inner loop: lint, the import contracts and every test not marked slow (the end-to-end
# runs as lab staff start them), without the Java build. `make test` runs everything.
test-fast: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/ruff check mjfl tests
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

# The phone client's Java core (android/client-core) and the app's compile check, with
# javac and the JUnit console launcher (no Gradle, no Android SDK needed).
java-test: java-setup
	android/build-jvm.sh

demo: $(STAMP)
	$(BIN)/mjfl testbed run examples/quickstart.toml --emulate 20 --out runs/demo

bench: $(STAMP) browser-setup
	mkdir -p runs/bench
	$(BIN)/mjfl bench schedulers --fleet-sizes 100,1000 --jobs 3 --rounds 30 --json runs/bench/schedulers.json
	$(BIN)/mjfl bench trainers --json runs/bench/trainers.json
	$(BIN)/mjfl bench coordinator --json runs/bench/coordinator.json
	$(BIN)/mjfl bench dashboard --json runs/bench/dashboard.json

clean:
	rm -rf $(VENV) runs *.egg-info .pytest_cache
