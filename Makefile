# mario-impala: every command a user runs. See README.md.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The interpreter the venv is made from: the first python3.13, then python3.12, on PATH, under
# pyenv, among uv's managed Pythons, or in the usual system places. PYTHON=/path/to/python takes
# that one; PYTHON=python3.12 (a name) is looked for in the same places.
ifdef PYTHON313
$(error PYTHON313 is gone: pass PYTHON=/path/to/python3.13 (or python3.12))
endif
PY_SUPPORTED := import sys; assert sys.version_info[:2] in ((3, 12), (3, 13))
ifeq ($(PYTHON),)
PY_NAMES := python3.13 python3.12
PY_CHECK := $(PY_SUPPORTED)
else
PY_NAMES := $(PYTHON)
PY_CHECK := pass
endif
ifneq ($(findstring /,$(PYTHON)),)
BASE_PYTHON := $(PYTHON)
else
BASE_PYTHON := $(shell for n in $(PY_NAMES); do v=$${n:6}; for p in $$n \
	$$HOME/.pyenv/versions/$$v*/bin/$$n $${UV_PYTHON_INSTALL_DIR:-$$HOME/.local/share/uv/python}/cpython-$$v*/bin/$$n \
	/usr/local/bin/$$n /usr/bin/$$n; do command -v $$p >/dev/null 2>&1 && \
	$$p -c '$(PY_CHECK)' >/dev/null 2>&1 && { command -v $$p; exit 0; }; done; done)
endif
STAMP := $(VENV)/.installed
# where torch comes from: auto (the interpreter's own CUDA torch, else the venv's), box (the
# interpreter's own), venv (installed into the venv); WHEELS=dir|file.tar installs offline from a
# wheelhouse that make wheelhouse wrote (docs/DEPLOY.md, "GPU boxes")
TORCH ?= auto
WHEELS ?=
OUT ?=
# EXTRAS=a,b: the optional extras to install or put in a wheelhouse instead of dev (the tests'
# and lint's); EXTRAS= (empty): none, the runtime only. make install WHEELS= takes the wheelhouse's.
EXTRAS ?=
# make wheelhouse for a box that has some packages already: HAVE=file (its `python -m pip list`
# output) and/or SKIP=torch,numpy==2.1.3; what it has in a version the project accepts is left out
# (docs/howto/offline-box.md)
HAVE ?=
SKIP ?=
EXTRAS_ARG = $(if $(filter file default undefined,$(origin EXTRAS)),,--extras '$(EXTRAS)')
NO_PYTHON = { echo "error: $(if $(PYTHON),PYTHON=$(PYTHON) not found,no python3.13 or python3.12 found) (PATH, pyenv, uv); install one (pyenv install 3.13) or pass PYTHON=/path/to/python" >&2; exit 1; }

.PHONY: install install-tensorboard wheelhouse test test-all test-fast lint bench

install: $(STAMP)

# the optional extra of the learner's --tensorboard (make install brings it too, for the tests)
install-tensorboard: install
	$(PY) -m pip install --quiet -e '.[tensorboard]'

$(STAMP): pyproject.toml
	@test -n "$(BASE_PYTHON)" || $(NO_PYTHON)
	$(BASE_PYTHON) -m scripts.install venv --venv $(VENV) --torch $(TORCH) $(if $(WHEELS),--wheels $(WHEELS)) $(EXTRAS_ARG)
	touch $(STAMP)

# every wheel the project needs for PYTHON in OUT (and OUT.tar), for a box with no package index;
# torch is left out when PYTHON has its own (TORCH=box / venv decide instead), and what the box
# has when HAVE or SKIP says so
wheelhouse:
	@test -n "$(BASE_PYTHON)" || $(NO_PYTHON)
	@test -n "$(OUT)" || { echo "error: make wheelhouse needs OUT=dir (OUT.tar is written beside it)" >&2; exit 1; }
	$(BASE_PYTHON) -m scripts.install wheelhouse --out $(OUT) --torch $(TORCH) $(EXTRAS_ARG) $(if $(HAVE),--have $(HAVE)) $(if $(SKIP),--skip '$(SKIP)')

# TEST_WORKERS=N runs the suite in N pytest-xdist workers (0, the default: in this process; on 2
# cores two workers save about a tenth, docs/PERFORMANCE.md); the tests marked `alone` run after
# the rest, one at a time. make test: every test but the multi-minute rehearsals (marked
# `rehearsal`: the soak, the multi-host run, Slurm, an offline install, supervisord's make train
# and make up); make test-all: make test, then the rehearsals (what CI runs). Between them they run
# every test once (tests/test_suites.py).
TEST_WORKERS ?= 0

test: install
	$(PY) -m pytest -m "not rehearsal and not alone" -n $(TEST_WORKERS)
	$(PY) -m pytest -m "not rehearsal and alone"

test-all: test
	$(PY) -m pytest -m "rehearsal and not alone" -n $(TEST_WORKERS)
	$(PY) -m pytest -m "rehearsal and alone"

test-fast: install
	$(PY) -m pytest -m "not slow and not alone" -n $(TEST_WORKERS)
	$(PY) -m pytest -m "not slow and alone"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) -m scripts.dev.bench.env
	$(PY) -m scripts.dev.bench.pipeline
	$(PY) -m scripts.dev.bench.replay
	$(PY) -m scripts.dev.bench.learner --e2e

# ---- running (scripts/service: one place for every command line) -------------------------------
# Settings a user may give; each becomes the variable MARIO_<NAME> that scripts/service reads,
# which has the defaults: N = one actor per core but one (at least 1), PORT 5555 (and PORT+1),
# the learner on the GPU if there is one. RUN and LEVELS also serve eval and report below.
# LEVELS is a set (1-1,1-2 | world:1 | all); LEVEL=1-1 still works, as a set of one. It goes to
# the learner, which owns every run setting: actors (make actors too) take theirs from it.
RUN ?= runs/default
LEVEL ?= 1-1
LEVELS ?= $(LEVEL)
SERVICE_VARS := RUN HOST PORT DEVICE METRICS_HOST LEARNER_METRICS_PORT LEARNER_AUTOSTART \
	LEARNER_ARGS N FIRST_ACTOR LEARNER ACTOR_METRICS_BASE LEVELS FRAMES ACTOR_ARGS KEYS \
	EVAL TARGETS
SERVICE_ENV = $(foreach v,$(SERVICE_VARS),$(if $($(v)),MARIO_$(v)='$($(v))'))
SERVICE = $(SERVICE_ENV) $(PY) -m scripts.service

.PHONY: learner actors train commands

# the learner alone in the foreground, with its own status line
learner: install
	$(SERVICE_ENV) MARIO_LEARNER_ARGS='--status-interval-s 2 $(LEARNER_ARGS)' $(PY) -m scripts.service exec learner

actors: install
	$(SERVICE) actors

train: install
	$(SERVICE) train

# every process make up (or make train) would start here, with its command line
commands: install
	@$(SERVICE) commands

# ---- evaluation and reports (docs/EVALUATION.md) ----------------------------------------------
# RUN's latest checkpoint, or CKPT=file, on every level of LEVELS; EPISODES per policy and level;
# POLICY=both (greedy, then sampled), greedy or sampled (GREEDY=1 / GREEDY=0, as before, pick
# one); PERTURB=1 plays each level plain and perturbed (sticky actions 0.25, no-op starts 0..30)
# side by side; JOBS=N plays N levels at a time in N processes (same figures, one core each);
# EVAL_ARGS passes more flags (e.g. --scale 2 --no-progress-steps 100 --out DIR).
CKPT ?=
EPISODES ?= 5
POLICY ?= both
PERTURB ?=
JOBS ?=
# make report COMPARE="runs/a runs/b" draws those runs' learning curves beside RUN's
COMPARE ?=
GREEDY ?=
EVAL_ARGS ?=

.PHONY: eval report soak hosts

eval: install
	$(PY) -m scripts.evaluate $(if $(CKPT),--checkpoint $(CKPT),--run-dir $(RUN)) --levels $(LEVELS) \
		--episodes $(EPISODES) $(if $(DEVICE),--device $(DEVICE)) $(if $(filter 1,$(PERTURB)),--perturbed) $(if $(JOBS),--jobs $(JOBS)) \
		--policy $(if $(GREEDY),$(if $(filter 1,$(GREEDY)),greedy,sampled),$(POLICY)) $(EVAL_ARGS)

report: install
	$(PY) -m scripts.report --run-dir $(RUN) $(if $(COMPARE),--compare $(COMPARE))

# ---- reliability (docs/RELIABILITY.md) --------------------------------------------------------
# make soak MINUTES=30: learner, 2 actors and the eval actor under supervisord (as make up), kill
# -9 of actors and of the learner (also mid-checkpoint) on a seeded schedule, a rogue peer; PASS
# or FAIL against docs/RELIABILITY.md's targets, summary in SOAK_RUN/soak.json (emptied first).
# SOAK_ARGS passes more flags (python -m scripts.dev.chaos.soak --help), e.g. --seed 1.
MINUTES ?= 30
SOAK_RUN ?= runs/soak
SOAK_ARGS ?=

soak: install
	$(PY) -m scripts.dev.chaos.soak --minutes $(MINUTES) --run-dir $(SOAK_RUN) $(SOAK_ARGS)

# make hosts MINUTES=20: a learner host, two actor hosts and an eval host, each a network
# namespace with its own address, started as docs/DEPLOY.md says (CURVE on, Prometheus scraping
# every host); on a seeded schedule an actor host's link goes down, an actor host dies and is
# replaced, the learner's link goes down, its broadcast port is blocked, the learner is killed.
# PASS or FAIL in HOSTS_RUN/hosts.json. Needs root, iproute2, nftables and prometheus.
# HOSTS_ARGS passes more flags (python -m scripts.dev.chaos.hosts --help).
HOSTS_RUN ?= runs/hosts
HOSTS_ARGS ?=

hosts: install
	$(PY) -m scripts.dev.chaos.hosts --minutes $(MINUTES) --run-dir $(HOSTS_RUN) $(HOSTS_ARGS)

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
# make up N=16: deploy/supervisord/mario-impala.conf in the background, the same processes as
# make train (LEARNER_AUTOSTART=false: actors only, with LEARNER=host:PORT; EVAL=false: no eval
# actor); make status lists them; make down stops everything (the learner writes its final
# checkpoint) and returns once supervisord has exited. KEYS=dir turns CURVE on (make keys writes
# it); a non-loopback HOST needs it.
KEYS ?=
FORCE ?= 0
DOWN_TIMEOUT_S ?= 180

.PHONY: up status down keys

up: install
	$(SERVICE) up

status:
	@$(SERVICE) status

down:
	@$(SERVICE) down --timeout-s $(DOWN_TIMEOUT_S)

# CURVE key pairs in KEYS (default runs/keys) for the learner, this host's actors and its eval actor
keys: install
	$(SERVICE) keys $(if $(filter 1,$(FORCE)),--force)
