# Two commands on a fresh machine: `make run` and `make test`. Each installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install proto bench clean native lock

# constraints.txt pins every package to the version tested (`make lock` writes it again)
$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,torch]'
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

# After a change to pyproject.toml's dependencies: resolve them afresh in a scratch environment
# and pin what it got. Review the diff, then `make test`.
LOCK_VENV := .lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PY) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q --upgrade pip
	$(LOCK_VENV)/bin/pip install -q -e '.[dev,torch]'
	{ sed -n '/^#/p' constraints.txt; $(LOCK_VENV)/bin/pip freeze --exclude-editable | \
	  sed 's/^\(torch==[^+]*\)+cpu$$/\1/'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) .frenzy services/scheduler/frenzy_scheduler/_native
