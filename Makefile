# mario-impala: every command a user runs. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# python3.13 from PATH, else pyenv's, else the usual system places.
PYTHON313 ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13 /usr/local/bin/python3.13 /usr/bin/python3.13; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1 && { echo $$p; break; }; done)
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint bench

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(PYTHON313)" || { echo "error: python3.13 not found; install it (pyenv install 3.13) or pass PYTHON313=/path/to/python3.13" >&2; exit 1; }
	test -x $(PY) || $(PYTHON313) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: install
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) scripts/bench.py
	$(PY) scripts/bench_pipeline.py
	$(PY) scripts/bench_replay.py

# ---- running -----------------------------------------------------------------------------
# N actors default to one per core but one (at least 1); ports: PORT (chunks), PORT+1 (weights).
N ?= $(shell n=$$(nproc); echo $$(( n > 1 ? n - 1 : 1 )))
RUN ?= runs/default
PORT ?= 5555
LEVEL ?= 1-1
LEARNER ?= 127.0.0.1:$(PORT)
LEARNER_ARGS ?=
ACTOR_ARGS ?=

.PHONY: learner actors train

learner: install
	$(PY) -m learner --run-dir $(RUN) --port $(PORT) --status-interval-s 2 $(LEARNER_ARGS)

actors: install
	$(PY) scripts/launch.py actors --n $(N) --learner $(LEARNER) --run-dir $(RUN) -- --level $(LEVEL) $(ACTOR_ARGS)

train: install
	$(PY) scripts/launch.py train --n $(N) --learner 127.0.0.1:$(PORT) --run-dir $(RUN) \
		--learner-args "--device auto $(LEARNER_ARGS)" -- --level $(LEVEL) $(ACTOR_ARGS)

# ---- evaluation and reports (docs/EVALUATION.md) ----------------------------------------------
# RUN's latest checkpoint, or CKPT=file; GREEDY=0 samples actions; EVAL_ARGS passes more flags
# (e.g. --scale 2 --no-progress-steps 100 --out DIR).
CKPT ?=
EPISODES ?= 5
GREEDY ?= 1
DEVICE ?= auto
EVAL_ARGS ?=

.PHONY: eval report

eval: install
	$(PY) scripts/evaluate.py $(if $(CKPT),--checkpoint $(CKPT),--run-dir $(RUN)) --level $(LEVEL) \
		--episodes $(EPISODES) --device $(DEVICE) $(if $(filter 1,$(GREEDY)),--greedy,--no-greedy) \
		$(EVAL_ARGS)

report: install
	$(PY) scripts/report.py --run-dir $(RUN)

# ---- monitoring (docs/MONITORING.md) ---------------------------------------------------------
# Prometheus in the foreground (Ctrl-C stops it) on 127.0.0.1:9090: scrapes the learner on :9000
# and the actors that make actors / make train list in runs/targets/actors.json, evaluates
# deploy/prometheus/alerts.yml, keeps its data in runs/prometheus. Needs the prometheus binary
# (Debian/Ubuntu: apt-get install prometheus). PROMETHEUS_ARGS passes more flags.
PROMETHEUS_ARGS ?=

.PHONY: prometheus

prometheus:
	@command -v prometheus >/dev/null || { echo "error: prometheus not found; install it (Debian/Ubuntu: apt-get install prometheus)" >&2; exit 1; }
	prometheus --config.file=deploy/prometheus/prometheus.yml --storage.tsdb.path=runs/prometheus \
		--web.listen-address=127.0.0.1:9090 $(PROMETHEUS_ARGS)
