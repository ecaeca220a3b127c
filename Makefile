# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BROWSER := $(VENV)/.browser
JOBS   ?= auto

.PHONY: demo test test-slow bench lock clean

$(STAMP): pyproject.toml constraints.txt .ci/bootstrap.sh
	bash .ci/bootstrap.sh $(VENV)
	touch $@

# The test suite also opens the HTML report in Debian's chromium (installed once by the bootstrap).
$(BROWSER): $(STAMP)
	bash .ci/bootstrap.sh $(VENV) --browser
	touch $@

demo: $(STAMP)
	$(BIN)/aipu demo

test: $(STAMP) $(BROWSER)
	$(BIN)/python -m pytest -n $(JOBS) -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) -m slow

bench: $(STAMP)
	$(BIN)/aipu bench all

# Re-resolve the pinned environment (constraints.txt) to the newest allowed versions; see .ci/lock.sh.
lock:
	bash .ci/lock.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build sim_build out
