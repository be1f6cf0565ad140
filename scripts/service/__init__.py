"""How this host's processes start and are supervised: the one place for the command lines of
the learner, the actors and the eval actor, the rules that shape them, and the supervisord that
runs them for `make train`, `make actors` and `make up`.

    host.py         the host's settings (MARIO_* variables), the command lines, the lane and
                    thread rules, the Prometheus targets files
    supervisor.py   supervisord for one run directory: start, ask, stop
    watch.py        `make train` / `make actors` in the foreground: the status line, exits and
                    restarts reported with the process's last log lines
    __main__.py     `python -m scripts.service exec|up|train|actors|down|status|commands`

deploy/supervisord/mario-impala.conf and the systemd units in deploy/systemd run
`python -m scripts.service exec learner|actor ID|eval`, which renders the process's command
line from the host's settings and replaces itself with it.
"""
