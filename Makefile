# Two commands on a fresh machine: `make run` and `make test`. Each installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install proto bench clean native

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,torch]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	-$(MAKE) native
	$(BIN)/frenzy demo

# The scheduler's hot modules compiled with mypyc (optional: without a C compiler it runs as
# Python, the same decisions, slower; frenzy_scheduler/native.py). Rebuild after editing them.
native: $(STAMP)
	$(BIN)/python -m frenzy_scheduler.native_build

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25

# Regenerate frenzy/v1/*_pb2*.py from protos/ (tests fail when the checked-in code is stale).
proto: $(STAMP)
	$(BIN)/python -m frenzy.tools.protogen

bench: $(STAMP)
	$(BIN)/python bench/e2e_latency.py

clean:
	rm -rf $(VENV) .frenzy services/scheduler/frenzy_scheduler/_native
