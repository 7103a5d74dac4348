# The two commands a newcomer runs: `make demo` (install + the main job on bundled tiny data) and `make test`.
PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install -q -e ".[test]"
DEMO_OUT ?= out/demo

.PHONY: install demo test test-all bench bench-optimum reliability fixtures clean

install:
	$(PIP_INSTALL)

# The main job on bundled tiny data: a published-style export without the MTP head is patched in place,
# checked against the contract, and run with openvino-genai (MTP speculative decoding vs plain greedy).
demo: install
	rm -rf $(DEMO_OUT) && mkdir -p $(dir $(DEMO_OUT)) && cp -r fixtures/demo/target $(DEMO_OUT)
	irsurgeon show $(DEMO_OUT)
	irsurgeon patch $(DEMO_OUT) --checkpoint fixtures/demo/ckpt
	irsurgeon verify $(DEMO_OUT) --genai --prompts 3

test: install
	$(PYTHON) -m pytest -q

test-all: install
	$(PYTHON) -m pytest -q -m ""

bench: install
	$(PYTHON) scripts/bench_build.py
	$(PYTHON) scripts/bench_vs_optimum.py

bench-optimum: install
	$(PYTHON) scripts/bench_vs_optimum.py

reliability: install
	$(PYTHON) scripts/bench_reliability.py

fixtures:
	$(PYTHON) scripts/make_demo_fixture.py
	$(PYTHON) scripts/make_fixtures.py

clean:
	rm -rf out build *.egg-info .pytest_cache .hypothesis
