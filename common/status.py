"""The one-line training status, computed from Prometheus samples.

The learner prints it from its own registry and `make train` from the learner's /metrics page
(plus each actor's credit wait, `actor_samples`), so both show exactly the numbers Prometheus
and Grafana see. Samples are flattened to {"name" or "name{k=v,...}": value}, labels sorted.
`read_page` also says who serves a page (its `mario_process_info`), so that `make train` reads
only its own run's processes when another run holds a port it expected.
"""

from __future__ import annotations

import math
import re
import time
import urllib.request
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from common.metrics import LearnerMetrics, ProcessMetrics


def flatten(families: Iterable[Metric]) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in families:
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def _families(url: str, timeout_s: float) -> list[Metric] | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return list(text_string_to_metric_families(text))


def scrape(url: str, timeout_s: float = 2.0) -> dict[str, float]:
    """Flattened samples of a /metrics page; {} when it cannot be reached."""
    return flatten(_families(url, timeout_s) or [])


# ---- whose page it is --------------------------------------------------------------------

PROCESS_INFO = ProcessMetrics.TABLE[0].name + "_info"  # as exposed: Info appends _info


class Owner(NamedTuple):
    """Who serves a /metrics page, as its mario_process_info says (common/metrics.py)."""

    role: str  # learner, actor, eval, relay
    pid: int
    run_id: str
    run_dir: str  # the learner's; "" for the others

    def __str__(self) -> str:
        where = f", run dir {self.run_dir}" if self.run_dir else f", run id {self.run_id}"
        return f"{self.role} pid {self.pid}{where}"


class Page(NamedTuple):
    """A /metrics page: its flattened samples, and who serves it (None: no process of ours)."""

    samples: dict[str, float]
    owner: Owner | None


def read_page(url: str, timeout_s: float = 2.0) -> Page | None:
    """The page at `url` and who serves it; None when it cannot be reached."""
    families = _families(url, timeout_s)
    if families is None:
        return None
    owner = None
    for family in families:
        for s in family.samples:
            if s.name == PROCESS_INFO and s.labels.get("pid", "").isdigit():
                labels = {k: s.labels.get(k, "") for k in ("role", "run_id", "run_dir")}
                owner = Owner(pid=int(s.labels["pid"]), **labels)
    return Page(flatten(families), owner)


def _sum(samples: dict[str, float], name: str, label: str = "") -> float:
    """The sum of `name`'s samples over all label values; only those with `label` ("k=v")."""

    def match(key: str) -> bool:
        if not label:
            return key == name or key.startswith(name + "{")
        return key.startswith(name + "{") and label in key[len(name) + 1 : -1].split(",")

    return sum(v for k, v in samples.items() if match(k))


# The Bottleneck panel's thresholds (deploy/grafana/dashboards/mario-impala.json)
WAIT_SHARE_HIGH = 0.5  # the train loop waited for chunks more than half its time
CREDIT_WAIT_HIGH = 0.3  # actors blocked on credits more than 30% of their time
QUEUE_FULL = 0.8  # the ingest queue more than 80% full
CREDIT_WAIT = "mario_actor_flow_control_wait_seconds_total"


def actor_samples(samples: dict[str, float], actor_id: int) -> dict[str, float]:
    """An actor's credit-wait counter, labelled with its id (as Prometheus's target label does) to
    merge into the learner's samples."""
    if CREDIT_WAIT not in samples:
        return {}
    return {f"{CREDIT_WAIT}{{actor_id={actor_id}}}": samples[CREDIT_WAIT]}


# The eval actor's score and its best policy's (common/metrics.py EvalMetrics, actor/best.py)
EVAL_SCORE, EVAL_BEST = "mario_eval_score", "mario_eval_best_score"
EVAL_BEST_VERSION = "mario_eval_best_policy_version"
# "Well below the best": under this share of it. 10 sampled episodes per level have a standard
# error near 0.1 in mean progress, so a fall of a quarter from a best >= 0.5 is rarely noise.
BELOW_BEST = 0.75


def eval_samples(samples: dict[str, float]) -> dict[str, float]:
    """The eval actor's score samples from its flattened /metrics, to merge into the learner's."""
    return {k: samples[k] for k in (EVAL_SCORE, EVAL_BEST, EVAL_BEST_VERSION) if k in samples}


def _score(v: float) -> str:
    """A score: progress as a percentage, or a max x (a level of unknown length) above 1."""
    return f"{v:.0%}" if v <= 1 else f"x {v:.0f}"


def eval_summary(now: dict[str, float]) -> str:
    """The eval actor's perturbed score against the best kept: "eval 62% best 88% v1234", or
    "eval below best: 41% vs 88% v1234" when under `BELOW_BEST` of it; "eval -" before a score;
    empty without eval samples."""
    if EVAL_SCORE not in now:
        return ""
    score, best = now[EVAL_SCORE], now.get(EVAL_BEST, math.nan)
    version = now.get(EVAL_BEST_VERSION, -1)
    kept = f"{_score(best)} v{version:.0f}" if not math.isnan(best) else ""
    if math.isnan(score):
        return f"eval - best {kept}" if kept else "eval -"
    if not kept:
        return f"eval {_score(score)}"
    if score < BELOW_BEST * best:
        return f"eval below best: {_score(score)} vs {kept}"
    return f"eval {_score(score)} best {kept}"


class Indicators(NamedTuple):
    wait_share: float  # share of the train loop spent waiting for chunks (0 with no loop time)
    credit_wait: float | None  # mean share of actor time blocked on credits; None: no actors
    queue_fill: float  # ingest queue depth / capacity, now


def indicators(now: dict[str, float], before: dict[str, float], window_s: float) -> Indicators:
    """The Bottleneck panel's three numbers between the samples `before` and `now`."""
    wait = _sum(now, "mario_learner_wait_seconds_total")
    wait -= _sum(before, "mario_learner_wait_seconds_total")
    compute = _sum(now, "mario_learner_compute_seconds_total")
    compute -= _sum(before, "mario_learner_compute_seconds_total")
    capacity = now.get("mario_learner_ingest_queue_capacity", 0)
    # per actor: one absent before counts from 0; one restarted since (its counter reset) is out
    deltas = [
        value - before.get(key, 0.0)
        for key, value in now.items()
        if key == CREDIT_WAIT or key.startswith(CREDIT_WAIT + "{")
    ]
    rates = [d / window_s for d in deltas if d >= 0 and window_s > 0]
    return Indicators(
        wait_share=wait / (wait + compute) if wait + compute > 0 else 0.0,
        credit_wait=sum(rates) / len(rates) if rates else None,
        queue_fill=now.get("mario_learner_ingest_queue_depth", 0) / capacity if capacity else 0.0,
    )


def verdict(now: dict[str, float], before: dict[str, float], window_s: float) -> str:
    """The dashboard's Bottleneck verdict between two samples taken `window_s` seconds apart, by
    docs/MONITORING.md's table ("Reading the Bottleneck panel"). Without actor samples (the
    learner's own registry has none) the credit wait counts as low, as on the dashboard."""
    ind = indicators(now, before, window_s)
    starved = ind.wait_share > WAIT_SHARE_HIGH
    blocked = ind.credit_wait is not None and ind.credit_wait > CREDIT_WAIT_HIGH
    if ind.queue_fill > QUEUE_FULL or (blocked and not starved):
        return "learner-bound"
    if starved:
        return "transport-bound" if blocked else "actor-bound"
    return "balanced"


def _by_level(samples: dict[str, float], name: str, label: str = "") -> dict[str, float]:
    """`name`'s samples summed per value of their `level` label (only those with `label`)."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        if not key.startswith(name + "{"):
            continue
        labels = dict(kv.split("=", 1) for kv in key[len(name) + 1 : -1].split(","))
        if "level" in labels and (not label or label in key[len(name) + 1 : -1].split(",")):
            out[labels["level"]] = out.get(labels["level"], 0.0) + value
    return out


class LevelFigures(NamedTuple):
    progress: float | None  # mean over its episodes; None: none, or a level of unknown length
    flag_rate: float | None  # None: no episode
    episodes: float
    end_x: float | None = None  # mario_level_end_x: where most of its flagless episodes end


def level_figures(now: dict[str, float], before: dict[str, float]) -> dict[str, LevelFigures]:
    """Each level's mean progress and flag rate over the episodes that ended between the samples
    `before` and `now`; only levels with an episode in between."""

    def delta(name: str, label: str = "") -> dict[str, float]:
        a, b = _by_level(now, name, label), _by_level(before, name, label)
        return {lv: v - b.get(lv, 0.0) for lv, v in a.items()}

    episodes = delta("mario_episode_return_count")
    flags = delta("mario_episodes_total", "outcome=flag")
    p_sum, p_count = delta("mario_episode_progress_sum"), delta("mario_episode_progress_count")
    ends = _by_level(now, "mario_level_end_x")
    return {
        lv: LevelFigures(
            p_sum[lv] / p_count[lv] if p_count.get(lv, 0) > 0 else None,
            flags.get(lv, 0.0) / n,
            n,
            ends.get(lv) or None,  # the gauge stands at 0 until the level has an end
        )  # fmt: skip
        for lv, n in sorted(episodes.items())
        if n > 0
    }


def level_summary(figures: dict[str, LevelFigures]) -> str:
    """ "progress 43%" for one level; for several, the mean over levels of each level's progress
    and flag rate, then the weakest level and the x where most of its flagless episodes end:
    "set of 4: progress 43% flags 12%, weakest 1-2 31% (ends x 980)"."""
    known = {lv: f for lv, f in figures.items() if f.progress is not None}
    if not known:
        return "progress    -"
    mean = sum(f.progress for f in known.values()) / len(known)  # type: ignore[misc]
    if len(figures) == 1:
        return f"progress {mean:4.0%}"
    flags = sum(f.flag_rate or 0.0 for f in figures.values()) / len(figures)
    weakest = min(known, key=lambda lv: known[lv].progress)  # type: ignore[arg-type,return-value]
    ends = known[weakest].end_x
    return (
        f"set of {len(figures)}: progress {mean:4.0%} flags {flags:4.0%}, "
        f"weakest {weakest} {known[weakest].progress:4.0%}"
        + (f" (ends x {ends:.0f})" if ends is not None else "")
    )


def gpu_utilization(now: dict[str, float]) -> float | None:
    """Mean utilisation of the learner's GPUs (NVML, learner/gpu.py); None without a GPU."""
    values = [v for k, v in now.items() if k.startswith("mario_gpu_utilization_ratio")]
    return sum(values) / len(values) if values else None


def planned(now: dict[str, float]) -> str:
    """A planned run's env frames so far against its --train-frames; empty for an endless one."""
    goal = now.get("mario_learner_train_frames", 0)
    if not goal:
        return ""
    done = now.get("mario_learner_run_env_frames", 0)
    return f"frames {done / 1e6:.2f}M of {goal / 1e6:.2f}M | "


def declared_fields(now: dict[str, float], before: dict[str, float]) -> list[str]:
    """The fields of the learner's metrics that declare one, in their table's order: a gauge's or
    counter's value in `now` (summed over its labels), a histogram's mean over what it observed
    between `before` and `now` ("-" when nothing)."""
    out = []
    for m in LearnerMetrics.TABLE:
        if not m.status:
            continue
        value: float | None
        if m.kind is Histogram:
            count = _sum(now, m.name + "_count") - _sum(before, m.name + "_count")
            total = _sum(now, m.name + "_sum") - _sum(before, m.name + "_sum")
            value = total / count if count > 0 else None
        else:
            value = _sum(now, m.name + ("_total" if m.kind is Counter else ""))
        out.append(_field(m.status, value))
    return out


def _field(template: str, value: float | None) -> str:
    """`template` ("max x {:7.1f}") of `value`; None as "-" as wide as the number would be."""
    if value is not None:
        return template.format(value)
    spec = re.search(r"\{:?(\d*)[^}]*\}", template)
    assert spec is not None, template
    dash = "-".rjust(int(spec.group(1) or 0))
    return template[: spec.start()] + dash + template[spec.end() :]


def status_line(now: dict[str, float], before: dict[str, float], window_s: float) -> str:
    """The declared fields over the samples `before` and `now`, `window_s` seconds apart; then
    the flag rate, `level_summary`, `eval_summary`, the GPU's utilisation, `planned` and the
    Bottleneck `verdict`."""
    episodes = _sum(now, "mario_episode_return_count") - _sum(before, "mario_episode_return_count")
    flags = _sum(now, "mario_episodes_total", "outcome=flag")
    flags -= _sum(before, "mario_episodes_total", "outcome=flag")
    flag_rate = f"{flags / episodes:6.1%}" if episodes > 0 else "     -"
    gpu = gpu_utilization(now)
    judged = eval_summary(now)
    return (
        "".join(f"{field} | " for field in declared_fields(now, before)) + f"flags {flag_rate} | "
        f"{level_summary(level_figures(now, before))} | "
        + (f"{judged} | " if judged else "")
        + f"{episodes:.0f} episodes in {window_s:.0f} s | "
        + (f"gpu {gpu:4.0%} | " if gpu is not None else "")
        + planned(now)
        + verdict(now, before, window_s)
    )


class StatusWindow:
    """The status line with its episode means over the last `window_s` seconds (since
    construction, until then), not the handful of episodes since the previous line."""

    def __init__(self, window_s: float = 60.0, *, start: float | None = None):
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        t0 = time.monotonic() if start is None else start
        self._samples: deque[tuple[float, dict[str, float]]] = deque([(t0, {})])

    def line(self, now: dict[str, float], t: float | None = None) -> str:
        """The status line for the sample `now`, taken at monotonic time `t`."""
        t = time.monotonic() if t is None else t
        # keep exactly one sample at least window_s old: the start of the window
        while len(self._samples) > 1 and t - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        t_before, before = self._samples[0]
        self._samples.append((t, now))
        return status_line(now, before, t - t_before)
