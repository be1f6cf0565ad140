"""The Grafana dashboard, built as code: `python -m scripts.dev.dashboard` writes
deploy/grafana/dashboards/mario-impala.json from rows.py, on Grafana's typed builders
(build.py); `--check` says whether the committed file is what they build."""
