# The two commands of the README:
#   make run    set everything up (virtual env, install, data) and run m2 on ece408-high, 10,000 images
#   make test   the same set-up, then the test suite (every test: what CI runs), in two phases
# and, while working: make test-fast (the tests not marked slow or service: under 2 minutes, checked)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: run test test-fast data bench-cpu clean

# The test extra: every part's packages (mxnet, service, grade) and the test tools (ece408_op/base/extras.py)
# and the checkpoints, a distribution of their own (models/setup.py) that the mxnet extra needs
$(VENV)/.installed: setup.py ece408_op/base/extras.py models/setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q ./models -e '.[test]'
	touch $@

data: $(VENV)/.installed
	$(PY) -m ece408_op fetch

run: data
	$(PY) -m ece408_op m2 ece408-high 10000

# make test: two phases, the second run whatever the first gave. The tests not marked serial in parallel
# (pytest-xdist: WORKERS processes, each file's tests in one of them, --dist loadfile; most tests wait on
# subprocesses, servers and sandboxes, so more workers than cores), then the serial ones (wall-clock
# bounds, p99s, the default port) alone. pytest exits 5 when it collects no test: not a failure of a
# phase. make test-fast also fails when the fast tier has drifted (--fast-tier-check: tests/tiers.py).
WORKERS ?= 4
PYTEST   = $(PY) -m pytest tests -q -rfEs --durations=30

test: data
	$(PYTEST) -m "not serial" -n $(WORKERS) --dist loadfile; parallel=$$?; \
	$(PYTEST) -m serial; serial=$$?; \
	echo "make test: parallel phase exit $$parallel, serial phase exit $$serial (5: no test, not a failure)"; \
	[ $$parallel -eq 0 -o $$parallel -eq 5 ] && [ $$serial -eq 0 -o $$serial -eq 5 ]

test-fast: data
	$(PY) -m pytest tests -q -rfE -m "not slow and not service" --fast-tier-check || [ $$? -eq 5 ]

bench-cpu: data
	$(PY) -m ece408_op bench cpu --json bench-cpu.json

clean:
	rm -rf $(VENV) build *.egg-info
