# mario-impala: every command a user runs. See README.md.
#
# The targets and the variables a user sets, one line each: `make help` prints these `## NAME:`
# lines and docs/reference/make.md is generated from them (make reference), with the defaults
# read from below and from scripts/service/host.py. A target or variable without its line fails
# tests/scripts/dev/test_reference.py. `##@` starts a group.
##@ Install
## install: the venv (VENV) with the project, its test and lint tools, and torch as TORCH says
## install-tensorboard: the optional extra of the learner's --tensorboard
## wheelhouse: every wheel the project needs for PYTHON in OUT (and OUT.tar), for a box with no package index
## VENV: the virtual environment's directory
## PYTHON: the interpreter the venv is made from: a path, or a name looked for on PATH, under pyenv and uv (empty: the first python3.13, then python3.12)
## TORCH: where torch comes from: auto (the interpreter's own CUDA torch, else the venv's), box (the interpreter's own), venv (installed into the venv)
## WHEELS: install offline from this wheelhouse, a directory or .tar that make wheelhouse wrote
## OUT: the directory make wheelhouse writes (OUT.tar beside it)
## EXTRAS: the optional extras to install or put in a wheelhouse instead of dev (EXTRAS= empty: the runtime only)
## HAVE: make wheelhouse leaves out what this file (the box's pip list output) has in a version the project accepts
## SKIP: make wheelhouse leaves out these packages the box has: torch,numpy or torch==2.6.0
##@ Test and lint
## test: every test but the multi-minute rehearsals
## test-all: make test, then the rehearsals (what CI runs)
## test-fast: the tests not marked slow
## lint: ruff check and ruff format --check
## bench: env, pipeline, replay and learner throughput
## pages: the command blocks of README.md, getting-started and the how-to pages, as their markers shorten them, each page in network namespaces of its own; PASS or FAIL (root)
## PAGES: the pages make pages runs (empty: every one with command blocks)
## TEST_WORKERS: pytest-xdist workers (0: the tests run in one process)
##@ Train: a learner, N actors and the eval actor on this host
## train: the learner, N actors and the eval actor in the foreground, with a status line; Ctrl-C stops
## learner: the learner alone in the foreground, with its status line
## actors: this host's N actors alone, in the foreground, for the learner elsewhere at LEARNER=host:PORT (their CURVE keys in KEYS)
## commands: the command line of every process make up (or make train) would start here
## RUN: run directory: config, checkpoints, logs, metrics.jsonl, eval/ (make eval and make report read it)
## LEVELS: the run's levels: 1-1 | 1-1,1-2 | world:1 | all (the learner's --level; the actors are told them); make eval's, when set (unset: the run's own, from RUN/config.json)
## LEVEL: one level; the former spelling of LEVELS, which wins when both are set
## FRAMES: the run's length in env frames: the learner stops there, its learning rate falling linearly to 0 on the way (--train-frames, --lr-anneal-frames, --lr-final-fraction 0; 0: until stopped, the rate falling to a tenth over 1.5 M frames and holding)
## N: actors on this host (0: one per core but one, at least 1)
## FIRST_ACTOR: this host's first actor id: ids FIRST_ACTOR .. FIRST_ACTOR+N-1 (the eval actor's id is 1000000)
## RELAY: true: also run a weight relay that this host's actors subscribe to (empty: on a host of 2 or more actors whose LEARNER is elsewhere)
## HOST: the learner's bind address (it uses PORT and PORT+1); beyond loopback the learner needs KEYS
## PORT: the learner's port for the actors (weights on PORT+1)
## DEVICE: the learner's device (and make eval's): auto (the GPU if there is one), cpu, cuda, cuda:N
## LEARNER: HOST:PORT the actors connect to (empty: 127.0.0.1:PORT)
## LEARNER_AUTOSTART: false: no learner on this host (actors only, with LEARNER=host:PORT)
## EVAL: false: no eval actor on this host; true: one even without the learner (empty: where the learner runs)
## LEARNER_ARGS: more learner flags (docs/reference/learner.md)
## ACTOR_ARGS: more actor flags (docs/reference/actor.md); the eval actor takes those it shares (all but --num-envs and --lanes)
## EVAL_ACTOR_ARGS: more eval actor flags, e.g. --eval-interval-s 20 (docs/reference/eval-actor.md); after ACTOR_ARGS, so they win
## METRICS_HOST: the address every /metrics server binds
## LEARNER_METRICS_PORT: the learner's /metrics port
## ACTOR_METRICS_BASE: actor i serves /metrics on ACTOR_METRICS_BASE+i (0: off)
## TARGETS: the directory where make train, actors, up and learner write this run's Prometheus file_sd lists, one per kind of process, named after RUN
## KEYS: the CURVE keys directory make keys writes (empty: CURVE off, and make keys writes runs/keys); a non-loopback HOST needs it
##@ Evaluate and report (docs/EVALUATION.md)
## eval: RUN's kept best policy (RUN/eval/best-policy.pt, else its latest checkpoint), or CKPT, on every level of the run (or of LEVELS), EPISODES per policy and level
## best: RUN's latest checkpoint against its kept best policy, fresh perturbed episodes each as the eval actor judges; the better stays in RUN/eval/best-policy.pt (for a stopped run)
## report: RUN's report: its learning curves and evaluations
## CKPT: a checkpoint file for make eval to play instead of RUN's kept best policy or latest checkpoint
## EPISODES: make eval's episodes per policy and level
## POLICY: make eval's policies: both (greedy, then sampled), greedy or sampled
## GREEDY: 1: greedy, 0: sampled; the former spelling of POLICY, which it overrides
## PERTURB: 1: make eval plays each level perturbed (sticky actions 0.25, no-op starts 0..30), the headline, then plain, side by side; 0: plain only
## JOBS: make eval plays JOBS levels at a time, in JOBS processes
## EVAL_ARGS: more make eval flags (python -m scripts.evaluate --help)
## COMPARE: run directories whose learning curves make report draws beside RUN's
## BEST_ARGS: more make best flags (python -m scripts.evaluate.challenge --help: --episodes, --seed)
##@ Rehearse faults (docs/RELIABILITY.md)
## soak: learner, actors and eval actor under supervisord, killed and disturbed on a seeded schedule for MINUTES; PASS or FAIL
## hosts: the learner host and actor host of docs/DEPLOY.md's "Actors on other hosts" in network namespaces, their links cut on a seeded schedule; PASS or FAIL (root)
## MINUTES: how long make soak and make hosts run
## SOAK_RUN: make soak's run directory (emptied first)
## SOAK_ARGS: more make soak flags (python -m scripts.dev.chaos.soak --help)
## HOSTS_RUN: make hosts' run directory
## HOSTS_ARGS: more make hosts flags (python -m scripts.dev.chaos.hosts --help)
##@ Monitor (docs/MONITORING.md)
## prometheus: Prometheus in the foreground on 127.0.0.1:9090, scraping the learner and the listed actors
## PROMETHEUS_ARGS: more prometheus flags
## monitor: Prometheus and, where Grafana or docker is installed, Grafana with the dashboard; Ctrl-C stops
## MONITOR_ARGS: more make monitor flags (python -m scripts.monitor --help)
##@ Run as a service: supervisord (docs/DEPLOY.md)
## up: the processes of make train under supervisord, in the background
## status: supervisord's processes and their state
## down: stop everything (the learner writes its final checkpoint) and wait for supervisord to exit
## keys: CURVE key pairs in KEYS for the learner, this host's actors and its eval actor
## FORCE: 1: make keys replaces keys that exist
## DOWN_TIMEOUT_S: seconds make down waits for supervisord to exit
##@ This list and the reference
## help: this list
## reference: docs/reference/ written anew from the code: flags, make variables, metrics
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
# wheelhouse that make wheelhouse wrote (docs/howto/gpu-box.md)
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

.PHONY: install install-tensorboard wheelhouse test test-all test-fast lint bench pages

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
# and make up, the pages' commands); make test-all: make test, then the rehearsals (what CI runs). Between them they run
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

# make pages: every ```sh block of README.md, docs/getting-started.md and docs/howto/*.md run as
# a reader types it, at the shortened length the marker above it gives (or not, with the reason
# it gives: a GPU, another machine), each page on network namespaces with checkouts of its own,
# from one short make train; a block without a marker fails make test (scripts/dev/pages).
# Logs in runs/pages/. Needs root and iproute2.
PAGES ?=

pages: install
	$(PY) -m scripts.dev.pages $(PAGES)

.PHONY: help reference

# the `## NAME:` lines at the top, a group per `##@` line
help:
	@awk 'BEGIN { print "usage: make TARGET [NAME=value ...]; the defaults: docs/reference/make.md" } \
		/^##@ /{ printf "\n%s\n", substr($$0, 5); next } \
		/^## [^ ]+: /{ n = index($$0, ": "); name = substr($$0, 4, n - 4); \
		printf "  %-26s %s\n", (name ~ /^[A-Z]/ ? name "=" : "make " name), substr($$0, n + 2) }' \
		$(firstword $(MAKEFILE_LIST))

reference: install
	$(PY) -m scripts.dev.reference

# ---- running (scripts/service: one place for every command line) -------------------------------
# Settings a user may give; each becomes the variable MARIO_<NAME> that scripts/service reads,
# which has the defaults: N = one actor per core but one (at least 1), PORT 5555 (and PORT+1),
# the learner on the GPU if there is one. RUN and LEVELS also serve eval and report below.
# LEVELS is a set (1-1,1-2 | world:1 | all); LEVEL=1-1 still works, as a set of one. It goes to
# the learner, which owns every run setting: actors (make actors too) take theirs from it.
# A second run on this machine needs its own RUN and ports (PORT, LEARNER_METRICS_PORT,
# ACTOR_METRICS_BASE): train, up and actors refuse ports in use before starting anything, naming
# each one, its holder and free values to pass (docs/MONITORING.md). Each run lists its own
# processes for Prometheus in runs/targets, so make prometheus scrapes both.
RUN ?= runs/default
LEVEL ?= 1-1
LEVELS ?= $(LEVEL)
SERVICE_VARS := RUN HOST PORT DEVICE METRICS_HOST LEARNER_METRICS_PORT LEARNER_AUTOSTART \
	LEARNER_ARGS N FIRST_ACTOR LEARNER ACTOR_METRICS_BASE LEVELS FRAMES ACTOR_ARGS KEYS \
	EVAL EVAL_ACTOR_ARGS RELAY TARGETS
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
# RUN's kept best policy (RUN/eval/best-policy.pt, the eval actor's; else its latest checkpoint),
# or CKPT=file, on every level of the run (its config.json: RUN's, or that of the run whose
# checkpoints/ or eval/ holds CKPT) or, when LEVELS (or LEVEL) is set, of LEVELS; EPISODES per
# policy and level; POLICY=both (greedy, then
# sampled), greedy or sampled (GREEDY=1 / GREEDY=0, as before, pick one); each level is played
# perturbed (sticky actions 0.25, no-op starts 0..30: the headline) and plain, side by side, and
# PERTURB=0 plays it plain only; JOBS=N plays N levels at a time in N processes (same figures, one
# core each); EVAL_ARGS passes more flags (e.g. --latest --scale 2 --no-progress-steps 100).
CKPT ?=
EPISODES ?= 5
POLICY ?= both
PERTURB ?= 1
JOBS ?=
# make report COMPARE="runs/a runs/b" draws those runs' learning curves beside RUN's
COMPARE ?=
GREEDY ?=
EVAL_ARGS ?=

.PHONY: eval best report soak hosts

# LEVELS or LEVEL set (on the command line or in the environment), not the defaults above
EVAL_LEVELS = $(if $(strip $(LEVELS)),$(if $(filter-out file default undefined,$(origin LEVELS) $(origin LEVEL)),--levels $(LEVELS)))

eval: install
	$(PY) -m scripts.evaluate $(if $(CKPT),--checkpoint $(CKPT),--run-dir $(RUN)) $(EVAL_LEVELS) \
		--episodes $(EPISODES) $(if $(DEVICE),--device $(DEVICE)) $(if $(filter 1,$(PERTURB)),--perturbed) $(if $(JOBS),--jobs $(JOBS)) \
		--policy $(if $(GREEDY),$(if $(filter 1,$(GREEDY)),greedy,sampled),$(POLICY)) $(EVAL_ARGS)

# make best RUN=...: a stopped run's latest checkpoint challenges the best policy its eval actor
# kept, as the eval actor would have (a run stopped mid-challenge leaves its newest weights unjudged)
BEST_ARGS ?=

best: install
	$(PY) -m scripts.evaluate.challenge --run-dir $(RUN) $(BEST_ARGS)

report: install
	$(PY) -m scripts.report --run-dir $(RUN) $(if $(COMPARE),--compare $(COMPARE))

# ---- reliability (docs/RELIABILITY.md) --------------------------------------------------------
# make soak MINUTES=30: learner, 2 actors and the eval actor under supervisord (as make up), kill
# -9 of actors and of the learner (also mid-checkpoint) on a seeded schedule, a rogue peer; PASS
# or FAIL against docs/RELIABILITY.md's targets, summary in SOAK_RUN/soak.json (emptied first).
# SOAK_ARGS passes more flags (python -m scripts.dev.chaos.soak --help), e.g. --seed 1. A soak
# too short to strike every kind of fault is refused before it starts, naming the shortest.
MINUTES ?= 30
SOAK_RUN ?= runs/soak
SOAK_ARGS ?=

soak: install
	$(PY) -m scripts.dev.chaos.soak --minutes $(MINUTES) --run-dir $(SOAK_RUN) $(SOAK_ARGS)

# make hosts MINUTES=20: docs/DEPLOY.md's "Actors on other hosts" (the learner host with its
# actors and the eval actor, and an actor host), each a network namespace with its own address,
# started with the page's own make lines (CURVE on, Prometheus scraping every host); on a seeded schedule an actor host's link goes down, an actor host dies and is
# replaced, the learner's link goes down, its broadcast port is blocked, the learner is killed.
# PASS or FAIL in HOSTS_RUN/hosts.json. Needs root, iproute2, nftables and prometheus.
# HOSTS_ARGS passes more flags (python -m scripts.dev.chaos.hosts --help). MINUTES must hold one
# round of every kind of fault (6.1 with the default lengths); a shorter run is refused before it
# starts, naming the shortest for its lengths.
HOSTS_RUN ?= runs/hosts
HOSTS_ARGS ?=

hosts: install
	$(PY) -m scripts.dev.chaos.hosts --minutes $(MINUTES) --run-dir $(HOSTS_RUN) $(HOSTS_ARGS)

# ---- monitoring (docs/MONITORING.md) ---------------------------------------------------------
# make monitor: Prometheus as below and, where Grafana (a grafana binary, or docker) is installed,
# Grafana on 127.0.0.1:3000 with the dashboard as its home page, both in the foreground (Ctrl-C
# stops them); with no Grafana it says how to get one and runs Prometheus alone (scripts/monitor.py).
# MONITOR_ARGS passes more flags (--prometheus-port, --grafana-port, --prometheus-args).
MONITOR_ARGS ?=

.PHONY: monitor

monitor: install
	$(PY) -m scripts.monitor $(MONITOR_ARGS)

# Prometheus in the foreground (Ctrl-C stops it) on 127.0.0.1:9090: scrapes the learners, actors,
# eval actors and relays that each run's make train / up / actors / learner lists in runs/targets
# (learner-RUN.json, actors-RUN.json, ...; scripts/service/targets.py), evaluates
# deploy/prometheus/alerts.yml, keeps its data in runs/prometheus. Needs the prometheus binary
# (Debian/Ubuntu: apt-get install prometheus). PROMETHEUS_ARGS passes more flags.
PROMETHEUS_ARGS ?=

.PHONY: prometheus

prometheus:
	@command -v prometheus >/dev/null || { echo "error: prometheus not found; install it (Debian/Ubuntu: apt-get install prometheus)" >&2; exit 1; }
	prometheus --config.file=deploy/prometheus/prometheus.yml --storage.tsdb.path=runs/prometheus \
		--web.listen-address=127.0.0.1:9090 $(PROMETHEUS_ARGS)

# ---- as a service: supervisord (docs/howto/services.md) ---------------------------------------
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
