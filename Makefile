PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow test-triton bench fuzz install clean test-services

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Reinstall only when the project's metadata changes.
$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# Two pytest workers (pytest-xdist): the suite takes ~10 minutes on a 2-core machine instead of ~16.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP) test-services
	$(BIN)/python -m pytest -q -p no:cacheprovider $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))

# The slow cases the default run leaves out (real models, multi-rank and restart jobs, separate-process
# builds, exhaustive fused regressions): CI runs them after `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS))

# The fused backend's suite with every region a Triton kernel (in Triton's interpreter where there is no
# GPU), then each kernel it launched compiled for an H100 (sm_90) by Triton's own ptxas, no GPU needed:
# what the interpreter does not check. CI runs it after `make test` (about 10 minutes on 2 cores).
LAUNCHES := build/triton-launches.jsonl
test-triton: $(STAMP)
	mkdir -p build && rm -f $(LAUNCHES)
	DYNASHAPE_TEST_TRITON=cpu DYNASHAPE_TEST_SM90=$(CURDIR)/$(LAUNCHES) $(BIN)/python -m pytest -q -p no:cacheprovider \
	  $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS)) tests/backends/fused
	env -u TRITON_INTERPRET $(BIN)/python -m tests.backends.fused.sm90 $(LAUNCHES)

# The shared-PGO tests start a real redis-server on loopback, and the report tests load pages
# in headless Chromium: install Debian's when missing and we are root; otherwise (no root, no
# network) only those tests skip, saying why.
test-services:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      redis-server) >/dev/null 2>&1; } \
	  || echo "note: redis-server is not installed; the Redis PGO tests will be skipped"
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      chromium) >/dev/null 2>&1; } \
	  || echo "note: chromium is not installed; the report's browser test will be skipped"

bench: $(STAMP)
	for f in bench/[!_]*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# The soundness fuzzer with a random seed (or FUZZ_SEED=...): failing programs, original and
# reduced, go to fuzz-failures/seed-<seed>/ as standalone scripts.
# By default every third program compiles with the fused backend (kernels built before each call
# returns, so they are judged), the others with the eager one; FUZZ_BACKEND=eager|fused forces one.
# FUZZ_MODE=train: training programs (inputs that require grad; outputs, flags and every .grad
# compared after backward, under a call phase per program), to fuzz-failures/seed-<seed>-train/.
# FUZZ_MODE=state: programs over Python state (globals, closures, a list, a dict, attributes, another
# module's globals) that the caller changes between calls, to fuzz-failures/seed-<seed>-state/.
# FUZZ_DEVICE=cuda: inputs on the GPU (Triton kernels); FUZZ_DEVICE=interpret: every fused region as a
# Triton kernel in Triton's interpreter on CPU tensors (no GPU needed; `pip install -e '.[gpu]'`).
# FUZZ_CUDAGRAPHS=buckets|exact: every program through CUDA graphs (simulated on CPU tensors): padding judged.
FUZZ_MINUTES ?= 10
FUZZ_SEED ?=
FUZZ_BACKEND ?=
FUZZ_MODE ?=
FUZZ_DEVICE ?=
FUZZ_CUDAGRAPHS ?=
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --minutes $(FUZZ_MINUTES) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED)) \
	  $(if $(FUZZ_BACKEND),--backend $(FUZZ_BACKEND)) $(if $(FUZZ_MODE),--mode $(FUZZ_MODE)) \
	  $(if $(FUZZ_DEVICE),--device $(FUZZ_DEVICE)) $(if $(FUZZ_CUDAGRAPHS),--cudagraphs $(FUZZ_CUDAGRAPHS))

clean:
	rm -rf $(VENV)
