# The README's two commands: `make demo` (the main job) and `make test`.
# Both set up everything they need on a fresh Debian machine: system packages,
# a virtualenv with Keel and its dev tools, and the Kafka jars from Maven Central.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
DEMO_SIZE ?=

.PHONY: setup system-deps test unit test-browser demo evaluate down lint fmt bench clean

system-deps:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(BIN)/keel: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: system-deps $(BIN)/keel tests/senders/node_modules
	$(BIN)/keel infra fetch

# GitHub's signing library (@octokit/webhooks-methods, tests/senders/) for the
# webhook-scheme tests (node and npm come with system-deps).
tests/senders/node_modules: tests/senders/package.json tests/senders/package-lock.json
	npm ci --prefix tests/senders --no-audit --no-fund --loglevel=error && touch $@

# One stage of the tests: the directory tests/$(1) as its own pytest session (its own
# session fixtures, --durations and teardown summary), timed. A failing stage stops make,
# and so does one that collects nothing (pytest exits 5).
define test-stage
	@start=$$(date +%s); rc=0; \
	$(BIN)/pytest tests/$(1) $(2) $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 0 ]; then status=""; else status=" (failed: pytest exit $$rc)"; fi; \
	echo "stage $(1): $$(( $$(date +%s) - start )) s$$status"; \
	exit $$rc
endef

# Four stages, fastest first: unit (pure, in-process; UNIT_WORKERS pytest-xdist workers,
# a test file to a worker), integration (one real Kafka broker
# and Redis for the stage, shared by INTEGRATION_WORKERS pytest-xdist workers, a test file
# to a worker; each test has its own topic prefix), fault (a three-broker cluster,
# processes SIGKILLed: one at a time), browser (the web UI in Debian's headless Chromium,
# against a real stack; it saves docs/ui/*.png).
INTEGRATION_WORKERS ?= 2
UNIT_WORKERS ?= 2
test: setup
	$(call test-stage,unit,-n $(UNIT_WORKERS) --dist loadfile)
	$(call test-stage,integration,-n $(INTEGRATION_WORKERS) --dist loadfile)
	$(call test-stage,fault)
	$(call test-stage,browser)

unit: $(BIN)/keel
	$(call test-stage,unit,-n $(UNIT_WORKERS) --dist loadfile)

test-browser: system-deps $(BIN)/keel
	$(call test-stage,browser)

# Keel's event log read from Java (ops/event_reader/, docs/event-log.md): the jar and its
# dependencies (target/lib) from Maven Central, rebuilt only when its sources change;
# tests/integration/test_java_event_reader.py runs it.
EVENT_READER := ops/event_reader/target/keel-event-reader.jar
setup: $(EVENT_READER)
$(EVENT_READER): ops/event_reader/pom.xml $(wildcard ops/event_reader/src/main/java/dev/keel/eventreader/*.java) | system-deps
	mvn -q -B -f ops/event_reader/pom.xml package
	touch $@

# Local Kafka + Redis, Keel's topics, then a checked batch of workflows through a crash.
demo: setup
	$(BIN)/keel infra up
	$(BIN)/keel topics create
	$(BIN)/keel demo $(if $(DEMO_SIZE),--size $(DEMO_SIZE))

# The fault-injection evaluation (docs/evaluation.md): the invoice pipeline once without
# a fault and once per fault class, judged from its histories; the report in evaluation/.
EVAL_RUNS ?= 12
evaluate: setup
	$(BIN)/pip install -q -e '.[evaluate]'
	$(BIN)/keel infra up
	$(BIN)/keel evaluate --runs $(EVAL_RUNS) --out evaluation

down:
	$(BIN)/keel infra down

# The bundled examples and the tutorial's shop are also held to mypy --strict: written as a
# user's app is (docs/workflows.md, docs/tutorial.md; the shop with its own [tool.mypy]).
lint: $(BIN)/keel
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy orchestrator handlers connectors ops
	$(BIN)/mypy --strict --follow-imports=silent orchestrator/examples
	cd docs/tutorial && $(abspath $(BIN))/mypy shop tests
	$(BIN)/lint-imports

fmt: $(BIN)/keel
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	-$(BIN)/keel infra down
	rm -rf $(VENV) .keel
