# The two commands of the README: `make book` and `make test`. Both set everything up first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup book test test-fast bench clean

setup: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml scripts/setup.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $(STAMP)

## Execute every chapter (ci profile by default; PROFILE=paper for the papers' scale) and build the HTML.
book: setup
	$(PY) -m lib.run --all --profile $(or $(PROFILE),ci) --build

## Unit tests, every chapter in the ci profile with its claims, and the book build.
test: setup
	$(PY) -m pytest -q

## Unit tests only (seconds to minutes).
test-fast: setup
	$(PY) -m pytest -q -m "not slow"

bench: setup
	$(PY) benchmarks/bench_ngrams.py

clean:
	rm -rf _build
