# The two commands of the README:
#   make run    set everything up (virtual env, install, data) and run m2 on ece408-high, 10,000 images
#   make test   the same set-up, then the test suite (every test: what CI runs)
# and, while working: make test-fast (the tests not marked slow or service: a few minutes)
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

# pytest exits 5 when it collects no test: not a failure of the suite.
test: data
	$(PY) -m pytest tests -q -rfEs || [ $$? -eq 5 ]

test-fast: data
	$(PY) -m pytest tests -q -m "not slow and not service" || [ $$? -eq 5 ]

bench-cpu: data
	$(PY) -m ece408_op bench cpu --json bench-cpu.json

clean:
	rm -rf $(VENV) build *.egg-info
