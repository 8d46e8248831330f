# The README's two commands: `make demo` (the main job) and `make test`.
# Both set up everything they need on a fresh Debian machine: system packages,
# a virtualenv with Keel and its dev tools, and the Kafka jars from Maven Central.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
DEMO_SIZE ?= 300

.PHONY: setup system-deps test unit demo down lint fmt bench clean

system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(BIN)/keel: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: system-deps $(BIN)/keel
	$(BIN)/keel infra fetch

test: setup
	$(BIN)/pytest $(PYTEST_ARGS)

unit: $(BIN)/keel
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# Local Kafka + Redis, Keel's topics, then a checked batch of workflows through a crash.
demo: setup
	$(BIN)/keel infra up
	$(BIN)/keel topics create
	$(BIN)/keel demo --size $(DEMO_SIZE)

down:
	$(BIN)/keel infra down

lint: $(BIN)/keel
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy orchestrator handlers connectors ops

fmt: $(BIN)/keel
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	-$(BIN)/keel infra down
	rm -rf $(VENV) .keel
