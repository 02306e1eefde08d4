# The two commands of the README: `make book` and `make test`. Both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
BOOK := $(VENV)/bin/lowrank-book
STAMP := $(VENV)/.installed

.PHONY: setup book test test-fast robust bench clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-models.txt constraints.txt pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

## Execute every chapter (ci profile by default; PROFILE=paper for the papers' scale) and build the HTML.
book: setup
	$(BOOK) run --all --profile $(or $(PROFILE),ci) --build

## Unit tests, every chapter in the ci profile with its claims, and the book build.
## TEST_WORKERS pytest-xdist workers, each module whole on one of them (the whole book starts first).
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope

## Unit tests only (seconds to minutes).
test-fast: setup
	$(PY) -m pytest -q -m "not slow"

## The chapters whose verdicts rest on sampling, at five seeds; the table of each claim's verdict per seed.
ROBUST_CHAPTERS ?= examples llc insensitivity llc_theorems logit_rank ntp lenses modes
ROBUST_SEEDS ?= 0,1,2,3,4
robust: setup
	$(BOOK) run $(ROBUST_CHAPTERS) --seeds $(ROBUST_SEEDS) --jobs $(or $(JOBS),2) --out _build/robust
	$(BOOK) report --records _build/robust --markdown _build/robust/seeds.md

## The baseline venvs of bench_llc.py (.venv-devinterp2, .venv-devinterp1, .venv-canonical).
BENCH_STAMPS := .venv-devinterp2/.installed .venv-devinterp1/.installed .venv-canonical/.installed

$(BENCH_STAMPS): requirements-bench.txt scripts/setup_bench.sh
	bash scripts/setup_bench.sh

## Every benchmark, side by side with its baseline; JSON results in _build/bench/.
bench: setup $(BENCH_STAMPS)
	mkdir -p _build/bench
	set -e; for b in ngrams modes examples isan llc insensitivity logits logits_gguf ntp llc_theorems local_quadratic cli; do \
	  echo "== benchmarks/bench_$$b.py"; \
	  $(PY) benchmarks/bench_$$b.py --json _build/bench/$$b.json; \
	done

clean:
	rm -rf _build
