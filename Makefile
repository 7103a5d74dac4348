# The two commands a newcomer runs: `make demo` (install + the main job on bundled tiny data) and `make test`.
PYTHON ?= python3
PIP_INSTALL = $(PYTHON) -m pip install -q -e ".[test]"
PIP_INSTALL_DEMO = $(PYTHON) -m pip install -q -e ".[genai]"  # the demos need openvino-genai, not the test tools
DEMO_OUT ?= out/demo
DEMO_GEMMA4_OUT ?= out/demo-gemma4
DEMO_DFLASH_OUT ?= out/demo-dflash
DEMO_EAGLE3_OUT ?= out/demo-eagle3

.PHONY: install install-demo lint compile demo demo-gemma4 demo-dflash demo-eagle3 test test-extended test-all bench bench-optimum bench-dflash bench-tune reliability fixtures clean

install:
	$(PIP_INSTALL)

install-demo:
	$(PIP_INSTALL_DEMO)

# The main job on bundled tiny data: a published-style export without the MTP head is patched in place,
# checked against the contract, and run with openvino-genai (MTP speculative decoding vs plain greedy).
demo: install-demo
	rm -rf $(DEMO_OUT) && mkdir -p $(dir $(DEMO_OUT)) && cp -r fixtures/qwen3_5/target $(DEMO_OUT)
	irsurgeon show $(DEMO_OUT)
	irsurgeon patch $(DEMO_OUT) --checkpoint fixtures/qwen3_5/ckpt
	irsurgeon verify $(DEMO_OUT) --genai --prompts 3

# The same for the second draft family: a tiny Gemma 4 text-only export gets its MTP assistant (mtp_assistant/) and
# the five outputs openvino-genai reads, then runs with it against target-only greedy decoding.
demo-gemma4: install-demo
	rm -rf $(DEMO_GEMMA4_OUT) && mkdir -p $(dir $(DEMO_GEMMA4_OUT)) && cp -r fixtures/gemma4/target $(DEMO_GEMMA4_OUT)
	irsurgeon show $(DEMO_GEMMA4_OUT)
	irsurgeon patch $(DEMO_GEMMA4_OUT) --checkpoint fixtures/gemma4/ckpt
	irsurgeon verify $(DEMO_GEMMA4_OUT) --genai --prompts 3

# DFlash: the bundled pair's draft is random (its drafts are almost never accepted), so the demo uses a synthesized
# pair whose drafts are (`synth --kind dflash-cycle`: a hand-set Qwen3 target and draft).
demo-dflash: install-demo
	irsurgeon synth $(DEMO_DFLASH_OUT) --kind dflash-cycle --force
	irsurgeon patch $(DEMO_DFLASH_OUT)/target --checkpoint $(DEMO_DFLASH_OUT)/ckpt
	irsurgeon verify $(DEMO_DFLASH_OUT)/target --genai --prompts 3

# EAGLE-3: a draft trained on taps [1, 5, 8] of a seeded 12-layer Llama target (`synth --kind eagle3-trained`:
# irsurgeon/families/eagle3/trained/README.md); the draft is built with its trainer's taps and run in openvino-genai.
demo-eagle3: install-demo
	irsurgeon synth $(DEMO_EAGLE3_OUT) --kind eagle3-trained --force
	irsurgeon patch $(DEMO_EAGLE3_OUT)/target --checkpoint $(DEMO_EAGLE3_OUT)/ckpt
	irsurgeon verify $(DEMO_EAGLE3_OUT)/target --genai --prompts 3

# The tests run the CLI in hundreds of child processes: its modules are byte-compiled once here, where a machine
# with PYTHONDONTWRITEBYTECODE set would compile them again in every one (about 0.15 s each on 2 slow cores); and
# pytest's rewritten test modules are cached by one collection here, where each xdist worker would rewrite all of
# them again (about 5 s of CPU a worker; pytest reads the cache whatever PYTHONDONTWRITEBYTECODE says). That
# collection (about 3 s) runs again only when a test file, setup.cfg or the pytest release changed: its stamp lies
# in the cache's own folder, so removing the cache removes it. A speed-up only: a checkout it cannot write into is
# tested all the same.
TEST_SOURCES := $(shell find tests -name '*.py' -not -path '*/__pycache__/*')
PYTEST_TAG = import sys, pytest; print(f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}")
PRIMED = tests/__pycache__/.primed-$(shell $(PYTHON) -c '$(PYTEST_TAG)' 2>/dev/null)

compile: $(PRIMED)
	-$(PYTHON) -m compileall -q irsurgeon lab tests/helpers >/dev/null

$(PRIMED): $(TEST_SOURCES) setup.cfg
	-PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest -q --collect-only -p no:cacheprovider >/dev/null && touch $@

# The linter, before any test (under a second): ruff, pinned in setup.cfg's test extra, with the rules in
# pyproject.toml (pyflakes' checks and every `# noqa` needed), over every Python file of the repository; then a
# `# noqa` that names no reason in words after its codes is refused.
LINT_PATHS = irsurgeon lab tests benchmarks scripts
lint:
	$(PYTHON) -m ruff check --no-cache $(LINT_PATHS)
	@! grep -rnE --include='*.py' '#[[:space:]]*noqa(:[A-Z0-9,[:space:]]*)?$$' $(LINT_PATHS) \
		|| { echo "the # noqa above names no reason: say why after its codes"; exit 1; }

# Two workers (one per core), each given whole test files (--dist loadscope): a file's module-scoped fixtures (a
# patched pair, a genai run several tests read) are made once, where pytest-xdist's default per-test spread made most
# of them in both workers. Measured 2026-12-08, pytest alone, alternating on this 2-core machine: 259 and 261 s of CPU
# per-test spread, 245 and 228 s per file, the wall time the same (2 min 28 s / 2 min 17-27 s).
PYTEST = $(PYTHON) -m pytest -q -n 2 --dist loadscope

test: install lint compile
	$(PYTEST)

# What CI runs after `make test`: every openvino-genai run (the slow ones too) and the `extended` inputs of paths the
# default tier runs once.
test-extended: install compile
	$(PYTEST) -m "extended or genai"

test-all: install lint compile
	$(PYTEST) -m ""

bench: install
	$(PYTHON) benchmarks/bench_build.py
	$(PYTHON) benchmarks/bench_vs_optimum.py

bench-optimum: install
	$(PYTHON) benchmarks/bench_vs_optimum.py

# DFlash: irsurgeon patch vs optimum-cli export of the same draft (cost, one draft call), on the bundled tiny pair and
# a Qwen3.5-27B-DFlash-sized one made under /tmp (3.5 GB of checkpoint, 14 GB of IRs, ~11 GB of memory, about
# 30 min; removed at the end). Needs optimum-intel 2.2.0's environment (scripts/make_dflash_reference.py).
BENCH_DFLASH_SIZES ?= tiny,real
bench-dflash: install
	$(PYTHON) benchmarks/bench_dflash.py --sizes $(BENCH_DFLASH_SIZES)

# irsurgeon tune (--dry-run, in a child process) against a K x format grid timed in alternating rounds, on every
# bundled pair, the synthesized pairs whose drafts are accepted and a 512x8 performance fixture, then the
# Llama-3.1-8B EAGLE-3 estimate (2- and 4-layer targets of its width, 2.4 GB under /tmp; all removed at the end).
# Measured 2026-12-07 on 2 shared cores: 17 min 17 s in all, tune 19-133 s a pair (docs/testing.md).
bench-tune: install
	$(PYTHON) benchmarks/bench_tune.py --estimate

reliability: install
	$(PYTHON) benchmarks/bench_reliability.py

fixtures:
	$(PYTHON) scripts/make_demo_fixture.py
	$(PYTHON) scripts/make_fixtures.py

clean:
	rm -rf out build *.egg-info .pytest_cache .hypothesis
