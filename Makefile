# The two commands a newcomer runs: `make demo` (install + the main job on bundled tiny data) and `make test`.
PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install -q -e ".[test]"
DEMO_OUT ?= out/demo

.PHONY: install demo test test-all bench fixtures clean

install:
	$(PIP_INSTALL)

demo: install
	rm -rf $(DEMO_OUT) && mkdir -p $(DEMO_OUT)
	irsurgeon build-mtp fixtures/demo/ckpt -o $(DEMO_OUT)

test: install
	$(PYTHON) -m pytest -q

test-all: install
	$(PYTHON) -m pytest -q -m ""

bench: install
	$(PYTHON) scripts/bench_build.py

fixtures:
	$(PYTHON) scripts/make_demo_fixture.py

clean:
	rm -rf out build *.egg-info .pytest_cache
