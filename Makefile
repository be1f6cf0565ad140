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
	$(PY) -m scripts.bench.env
	$(PY) -m scripts.bench.pipeline
	$(PY) -m scripts.bench.replay
	$(PY) -m scripts.bench.learner --e2e

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
# RUN's latest checkpoint, or CKPT=file; EPISODES per policy; POLICY=both (greedy, then sampled),
# greedy or sampled (GREEDY=1 / GREEDY=0, as before, pick one); EVAL_ARGS passes more flags
# (e.g. --scale 2 --no-progress-steps 100 --out DIR).
CKPT ?=
EPISODES ?= 5
POLICY ?= both
# make report COMPARE="runs/a runs/b" draws those runs' learning curves beside RUN's
COMPARE ?=
GREEDY ?=
DEVICE ?= auto
EVAL_ARGS ?=

.PHONY: eval report soak

eval: install
	$(PY) -m scripts.evaluate $(if $(CKPT),--checkpoint $(CKPT),--run-dir $(RUN)) --level $(LEVEL) \
		--episodes $(EPISODES) --device $(DEVICE) \
		--policy $(if $(GREEDY),$(if $(filter 1,$(GREEDY)),greedy,sampled),$(POLICY)) $(EVAL_ARGS)

report: install
	$(PY) -m scripts.report --run-dir $(RUN) $(if $(COMPARE),--compare $(COMPARE))

# ---- reliability (docs/RELIABILITY.md) --------------------------------------------------------
# make soak MINUTES=30: learner, 2 actors and the eval actor under supervisord (as make up), kill
# -9 of actors and of the learner (also mid-checkpoint) on a seeded schedule, a rogue peer; PASS
# or FAIL against docs/RELIABILITY.md's targets, summary in SOAK_RUN/soak.json (emptied first).
# SOAK_ARGS passes more flags (python -m scripts.chaos.soak --help), e.g. --seed 1.
MINUTES ?= 30
SOAK_RUN ?= runs/soak
SOAK_ARGS ?=

soak: install
	$(PY) -m scripts.chaos.soak --minutes $(MINUTES) --run-dir $(SOAK_RUN) $(SOAK_ARGS)

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

# ---- as a service: supervisord (docs/DEPLOY.md) ------------------------------------------------
# make up N=16: supervisord in the background (deploy/supervisord/mario-impala.conf) runs the
# learner on HOST:PORT (DEVICE=auto: the GPU if present), N actors with ids FIRST_ACTOR.. and
# the eval actor (EVAL=false: none; its targets in TARGETS' folder, eval.json), restarting
# whichever dies; logs in RUN/logs/, actor targets for Prometheus in TARGETS.
# make status lists them; make down stops everything (the learner writes its final checkpoint)
# and returns once supervisord has exited. KEYS=dir turns CURVE on (make keys writes it); a
# non-loopback HOST needs it. LEARNER_AUTOSTART=false runs actors only (with LEARNER=host:PORT).
HOST ?= 127.0.0.1
METRICS_HOST ?= 127.0.0.1
LEARNER_METRICS_PORT ?= 9000
ACTOR_METRICS_BASE ?= 9100
FIRST_ACTOR ?= 0
LEARNER_AUTOSTART ?= true
# the eval actor (id FIRST_ACTOR + N) runs where the learner does, unless EVAL=false
EVAL ?= $(LEARNER_AUTOSTART)
EVAL_ID = $(shell echo $$(( $(FIRST_ACTOR) + $(N) )))
KEYS ?=
FORCE ?= 0
TARGETS ?= runs/targets/actors.json
DOWN_TIMEOUT_S ?= 180
SUPERVISOR_CONF := deploy/supervisord/mario-impala.conf
# the launcher's rule (scripts/launch.py one_lane): once the actors, the learner and the eval
# actor fill every core, lane threads add no CPU and the actors get --lanes 1 (ACTOR_ARGS overrides);
# computed for make up only (supervisorctl for status and down does not start actors)
UP_LANES =
up: UP_LANES = $(shell $(PY) scripts/launch.py lanes --n $(N) $(if $(filter true,$(LEARNER_AUTOSTART)),--with-learner) \
	$(if $(filter true,$(EVAL)),--with-eval))
SUPERVISOR_ENV = MARIO_PYTHON=$(abspath $(PY)) MARIO_RUN=$(abspath $(RUN)) MARIO_HOST=$(HOST) \
	MARIO_PORT=$(PORT) MARIO_DEVICE=$(DEVICE) MARIO_METRICS_HOST=$(METRICS_HOST) \
	MARIO_LEARNER_METRICS_PORT=$(LEARNER_METRICS_PORT) MARIO_LEARNER_AUTOSTART=$(LEARNER_AUTOSTART) \
	MARIO_LEARNER_ARGS='$(LEARNER_ARGS)' MARIO_N=$(N) MARIO_FIRST_ACTOR=$(FIRST_ACTOR) \
	MARIO_LEARNER=$(LEARNER) MARIO_ACTOR_METRICS_BASE=$(ACTOR_METRICS_BASE) \
	MARIO_ACTOR_ARGS='--level $(LEVEL) $(UP_LANES) $(ACTOR_ARGS)' MARIO_KEYS=$(if $(KEYS),$(abspath $(KEYS))) \
	MARIO_EVAL_AUTOSTART=$(EVAL) MARIO_EVAL_ID=$(EVAL_ID)
SUPERVISORCTL = $(SUPERVISOR_ENV) $(VENV)/bin/supervisorctl -c $(SUPERVISOR_CONF)

.PHONY: up status down keys

up: install
	@mkdir -p $(RUN)/logs
	$(SUPERVISOR_ENV) $(VENV)/bin/supervisord -c $(SUPERVISOR_CONF)
	@if [ "$(ACTOR_METRICS_BASE)" != 0 ]; then \
		mkdir -p $(dir $(TARGETS)); host=$(if $(filter 0.0.0.0 ::,$(METRICS_HOST)),127.0.0.1,$(METRICS_HOST)); sep=; \
		{ printf '['; for i in $$(seq $(FIRST_ACTOR) $$(( $(FIRST_ACTOR) + $(N) - 1 ))); do \
			printf '%s\n  {"targets": ["%s:%d"], "labels": {"job": "mario-actor", "actor_id": "%d"}}' \
				"$$sep" $$host $$(( $(ACTOR_METRICS_BASE) + i )) $$i; sep=,; done; printf '\n]\n'; \
		} > $(TARGETS).tmp && mv $(TARGETS).tmp $(TARGETS); \
		if [ "$(EVAL)" = true ]; then evals=$(dir $(TARGETS))eval.json; \
			printf '[\n  {"targets": ["%s:%d"], "labels": {"job": "mario-eval", "actor_id": "%d"}}\n]\n' \
				$$host $$(( $(ACTOR_METRICS_BASE) + $(EVAL_ID) )) $(EVAL_ID) > $$evals.tmp && mv $$evals.tmp $$evals; fi; fi
	@echo "supervisord runs $(if $(filter true,$(LEARNER_AUTOSTART)),the learner and )$(N) actors$(if $(filter true,$(EVAL)), and the eval actor (id $(EVAL_ID))) for $(RUN); logs in $(RUN)/logs/; make status, make down"

status:
	@$(SUPERVISORCTL) status

down:
	@pidfile=$(RUN)/supervisord.pid; \
	if [ ! -e $$pidfile ]; then echo "supervisord is not running for $(RUN)"; exit 0; fi; \
	pid=$$(cat $$pidfile); \
	if ! $(SUPERVISORCTL) shutdown; then \
		kill -0 $$pid 2>/dev/null && exit 1; echo "supervisord (pid $$pid) is gone; removing its stale pidfile"; rm -f $$pidfile; exit 0; fi; \
	for _ in $$(seq $$(( $(DOWN_TIMEOUT_S) * 5 ))); do \
		[ -e $$pidfile ] || { echo "stopped: every process has exited"; exit 0; }; sleep 0.2; done; \
	echo "error: supervisord (pid $$pid) still running after $(DOWN_TIMEOUT_S) s; see $(RUN)/logs/supervisord.log" >&2; exit 1

keys: install
	$(PY) -m scripts.keys --dir $(or $(KEYS),runs/keys) --n $(if $(filter true,$(EVAL)),$$(( $(N) + 1 )),$(N)) \
		--first $(FIRST_ACTOR) $(if $(filter 1,$(FORCE)),--force)
