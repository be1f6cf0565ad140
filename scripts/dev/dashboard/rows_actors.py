"""The rows of what the actors play and report: the training episodes, per level, a collapse
from the run's best, the actors themselves, and the evaluations (rows.py puts them in order)."""

# ruff: noqa: E501  (a query and a panel's help read best on one line)

from __future__ import annotations

from scripts.dev.dashboard.build import Q, Row, Stat, Text, Timeseries

# The alert rules' thresholds (deploy/prometheus/alerts.yml), drawn on the collapse panel
FLAG_RATE_FALL_ALERT = 0.3
PROGRESS_FALL_ALERT = 0.2
EVAL_OUTPUTS = """The eval actor keeps each level's best episode so far in **`RUN/eval/`**
(`best-<level>.mp4`, `best-<level>.json`: policy, policy version, max x).

- `make eval RUN=runs/x`: play the run's checkpoint on its levels; videos, stills and tables in
  `RUN/eval/` (`PERTURB=1`: sticky actions and no-op starts beside the plain play).
- `make report RUN=runs/x`: the learning curves, the levels table and the last evaluation in
  `RUN/report/` (`REPORT.md` and its plots).

docs/EVALUATION.md says what each file holds; docs/MONITORING.md what each row here shows."""


EPISODES = Row(
    "Episodes",
    [
        Timeseries(
            "Mean return by level",
            "Mean game return (unshaped) of episodes finished in the last 5 m.",
            [
                Q(
                    'sum by (level) (rate(mario_episode_return_sum{level=~"$level"}[5m])) / sum by (level) (rate(mario_episode_return_count{level=~"$level"}[5m]))',
                    "{{level}}",
                )
            ],
            min=None,
        ),
        Timeseries(
            "Mean max x by level",
            "Mean furthest x position of episodes finished in the last 5 m (1-1's flag is near 3160).",
            [
                Q(
                    'sum by (level) (rate(mario_episode_max_x_sum{level=~"$level"}[5m])) / sum by (level) (rate(mario_episode_max_x_count{level=~"$level"}[5m]))',
                    "{{level}}",
                )
            ],
        ),
        Timeseries(
            "Flag rate by level",
            "Share of episodes finished in the last 5 m that reached the flag.",
            [
                Q(
                    '(sum by (level) (rate(mario_episodes_total{outcome="flag", level=~"$level"}[5m])) or 0 * sum by (level) (rate(mario_episodes_total{level=~"$level"}[5m]))) / sum by (level) (rate(mario_episodes_total{level=~"$level"}[5m]))',
                    "{{level}}",
                )
            ],
            unit="percentunit",
            max=1,
        ),
        Timeseries(
            "Episodes per minute by outcome",
            "Finished episodes per minute, by level and outcome.",
            [
                Q(
                    '60 * sum by (level, outcome) (rate(mario_episodes_total{level=~"$level"}[5m]))',
                    "{{level}} {{outcome}}",
                )
            ],
            stack=True,
        ),
        Timeseries(
            "Mean episode length by level",
            "Mean agent steps of episodes finished in the last 5 m.",
            [
                Q(
                    'sum by (level) (rate(mario_episode_length_steps_sum{level=~"$level"}[5m])) / sum by (level) (rate(mario_episode_length_steps_count{level=~"$level"}[5m]))',
                    "{{level}}",
                )
            ],
        ),
    ],
)


LEVELS = Row(
    "Levels",
    [
        Timeseries(
            "Progress by level",
            "Mean progress (max x as a share of the level; 1 at the flag) of the training episodes finished in the last 5 m, per level, and its mean over the levels that finished one, each level alike. Levels of unknown length have no progress: see Mean max x by level.",
            [
                Q(
                    'sum by (level) (rate(mario_episode_progress_sum{level=~"$level"}[5m])) / sum by (level) (rate(mario_episode_progress_count{level=~"$level"}[5m]))',
                    "{{level}}",
                ),
                Q(
                    'avg(sum by (level) (rate(mario_episode_progress_sum{level=~"$level"}[5m])) / (sum by (level) (rate(mario_episode_progress_count{level=~"$level"}[5m])) > 0))',
                    "mean over levels",
                ),
            ],
            unit="percentunit",
            max=1,
            bold="mean over levels",
        ),
        Timeseries(
            "Progress by level, newest episodes",
            "mario_level_progress: the mean progress of each level's newest 50 training episodes (0 until the level's first episode), and their mean, each level alike.",
            [
                Q('mario_level_progress{level=~"$level"}', "{{level}}"),
                Q('avg(mario_level_progress{level=~"$level"})', "mean over levels"),
            ],
            unit="percentunit",
            max=1,
            bold="mean over levels",
        ),
        Timeseries(
            "Flag rate by level, newest episodes",
            "mario_level_flag_rate: the share of each level's newest 50 training episodes that reached the flag, and the mean over levels of the last 5 m's flag rate (from mario_episodes_total), each level that finished an episode alike.",
            [
                Q('mario_level_flag_rate{level=~"$level"}', "{{level}}"),
                Q(
                    'avg((sum by (level) (rate(mario_episodes_total{outcome="flag", level=~"$level"}[5m])) or 0 * sum by (level) (rate(mario_episodes_total{level=~"$level"}[5m]))) / (sum by (level) (rate(mario_episodes_total{level=~"$level"}[5m])) > 0))',
                    "mean over levels (5 m)",
                ),
            ],
            unit="percentunit",
            max=1,
            bold="mean over levels (5 m)",
        ),
        Timeseries(
            "Episodes per minute by level",
            "Training episodes finished per minute on each level over the last 5 m: what the schedule's weights turn into (short episodes on a hard level count many).",
            [
                Q(
                    '60 * sum by (level) (rate(mario_episodes_total{level=~"$level"}[5m]))',
                    "{{level}}",
                )
            ],
            w=24,
        ),
        Timeseries(
            "Advantage std by level",
            "mario_level_advantage_std: the std of each level's advantages in the last update, before their normalisation (scaled reward units): large where the level's returns still stray from the value's estimate. A level far above the others steers the policy step (advantages are normalised over each minibatch as a whole). A level with no steps in an update keeps its last value.",
            [Q('mario_level_advantage_std{level=~"$level"}', "{{level}}")],
            w=12,
        ),
        Timeseries(
            "Policy entropy by level",
            "mario_level_policy_entropy: the policy's mean entropy on each level's steps in the last update, in nats (ln of the action count at uniform, 0 when it always picks one action). A level whose entropy stays high while the others fall is one the shared policy has not settled on. A level with no steps in an update keeps its last value.",
            [Q('mario_level_policy_entropy{level=~"$level"}', "{{level}}")],
            w=12,
        ),
        Timeseries(
            "Where episodes end, by level",
            "mario_level_end_x: where most of each level's newest 50 training episodes without a flag ended (the median max x of the 100-wide bin of x holding the most of them). A flat line is a wall the policy has not passed, such as 1-2's ledge near x 980; the eval's own end points are in make report's last evaluation.",
            [Q('mario_level_end_x{level=~"$level"}', "{{level}}")],
            w=24,
        ),
    ],
)


COLLAPSE = Row(
    "Collapse: the newest episodes against the run's best",
    [
        Timeseries(
            "Flag rate, newest 50 and best",
            "Each level's flag rate over its newest 50 training episodes (mario_level_flag_rate) and the best a full window of them had so far in the run (mario_level_flag_rate_best; a resumed run keeps it).",
            [
                Q('mario_level_flag_rate{level=~"$level"}', "{{level}} now"),
                Q('mario_level_flag_rate_best{level=~"$level"}', "{{level}} best"),
            ],
            unit="percentunit",
            max=1,
            w=6,
        ),
        Timeseries(
            "Flag rate fall from the best",
            "How far each level's flag rate lies below its best (mario_level_flag_rate_fall; 0 until 50 episodes of the level since the learner started). Healthy noise reaches about 30 points for a moment; the red line is MarioFlagRateCollapsed's threshold, held 10 minutes.",
            [Q('mario_level_flag_rate_fall{level=~"$level"}', "{{level}}")],
            unit="percentunit",
            max=1,
            threshold=FLAG_RATE_FALL_ALERT,
            w=6,
        ),
        Timeseries(
            "Progress, newest 50 and best",
            "Each level's mean progress over its newest 50 training episodes (mario_level_progress) and the best a full window of them had so far in the run (mario_level_progress_best).",
            [
                Q('mario_level_progress{level=~"$level"}', "{{level}} now"),
                Q('mario_level_progress_best{level=~"$level"}', "{{level}} best"),
            ],
            unit="percentunit",
            max=1,
            w=6,
        ),
        Timeseries(
            "Progress fall from the best",
            "How far each level's mean progress lies below its best (mario_level_progress_fall; 0 until the window is full). The red line is MarioProgressCollapsed's threshold, held 10 minutes.",
            [Q('mario_level_progress_fall{level=~"$level"}', "{{level}}")],
            unit="percentunit",
            max=1,
            threshold=PROGRESS_FALL_ALERT,
            w=6,
        ),
    ],
)


EVALUATION = Row(
    "Evaluation",
    [
        Timeseries(
            "Eval max x by level and policy",
            "Mean (and median) max x over each policy's last --eval-window evaluation episodes (greedy: argmax actions; sampled: actions drawn from the policy); mario-eval targets.",
            [
                Q('mario_eval_max_x{level=~"$level"}', "{{level}} {{policy}}"),
                Q('mario_eval_median_max_x{level=~"$level"}', "{{level}} {{policy}} median"),
            ],
        ),
        Timeseries(
            "Eval flag rate by level and policy",
            "Share of each policy's last --eval-window evaluation episodes that reached the flag (greedy: argmax actions; sampled: actions drawn from the policy).",
            [Q('mario_eval_flag_rate{level=~"$level"}', "{{level}} {{policy}}")],
            unit="percentunit",
            max=1,
        ),
        Timeseries(
            "Eval return by level and policy",
            "Mean game return of each policy's last --eval-window evaluation episodes (greedy: argmax actions; sampled: actions drawn from the policy).",
            [Q('mario_eval_return{level=~"$level"}', "{{level}} {{policy}}")],
            min=None,
        ),
        Timeseries(
            "Eval progress by level and policy",
            "Mean progress (max x as a share of the level, 1 at the flag; mario_eval_progress) of each policy's last --eval-window evaluation episodes.",
            [Q('mario_eval_progress{level=~"$level"}', "{{level}} {{policy}}")],
            unit="percentunit",
            max=1,
        ),
        Timeseries(
            "Eval score against the best policy kept",
            "The eval actor's score of the newest policy (mario_eval_score: the mean over levels of each level's mean progress in its last --eval-window perturbed sampled episodes) and that of the best policy it kept in RUN/eval/best-policy.pt (mario_eval_best_score: its mean over the fresh episodes of its latest challenge, which a window score above it starts), which make eval plays by default. The status line says 'below best' under three quarters of it. No line until every level's window is full.",
            [Q("mario_eval_score", "now"), Q("mario_eval_best_score", "best kept")],
        ),
        Timeseries(
            "Eval best max x so far",
            "The best mean max x of an evaluation window so far (mario_eval_best_max_x), by level and policy.",
            [Q('mario_eval_best_max_x{level=~"$level"}', "{{level}} {{policy}}")],
        ),
        Text(
            "Eval videos and the report",
            EVAL_OUTPUTS,
            w=8,
            h=8,
        ),
    ],
)


ACTORS = Row(
    "Actors",
    [
        Stat(
            "Actors connected",
            "Actors the learner heard from recently, and actor targets Prometheus scrapes.",
            [
                Q("mario_actors_connected", "connected", instant=True),
                Q('count(up{job="mario-actor"})', "listed", instant=True),
            ],
            w=4,
            h=8,
        ),
        Timeseries(
            "Up by actor",
            "1 while Prometheus can scrape the actor's /metrics.",
            [Q('up{job="mario-actor"}', "actor {{actor_id}}")],
            w=5,
            max=1,
        ),
        Timeseries(
            "Actor steps/s",
            "Agent steps per second per actor (10 s average).",
            [Q("mario_actor_agent_steps_per_second", "actor {{actor_id}}")],
            w=5,
            stack=True,
        ),
        Timeseries(
            "Credit wait share by actor",
            "Share of each actor's time blocked waiting for a send credit. High everywhere: the learner (or the link) is the bottleneck.",
            [Q("rate(mario_actor_flow_control_wait_seconds_total[1m])", "actor {{actor_id}}")],
            unit="percentunit",
            w=5,
            max=1,
        ),
        Timeseries(
            "Reconnects",
            "Reconnections to the learner in the last 5 m, per actor.",
            [Q("increase(mario_actor_reconnects_total[5m])", "actor {{actor_id}}")],
            w=5,
        ),
        Timeseries(
            "Actor time split",
            "Seconds per second, mean over actors: policy inference, env stepping (in a thread, so it overlaps inference), and waiting for credits.",
            [
                Q("avg(rate(mario_actor_inference_seconds_total[1m]))", "inference"),
                Q("avg(rate(mario_actor_step_seconds_total[1m]))", "env step"),
                Q("avg(rate(mario_actor_flow_control_wait_seconds_total[1m]))", "credit wait"),
            ],
            unit="percentunit",
            w=7,
        ),
        Timeseries(
            "Policy version behind the learner",
            "Learner policy version minus the version each actor acts with.",
            [
                Q(
                    "scalar(max(mario_policy_version)) - mario_actor_policy_version",
                    "actor {{actor_id}}",
                )
            ],
            w=7,
        ),
        Timeseries(
            "Weight relays: versions behind the learner",
            "Learner policy version minus the newest version each actor host's weight relay forwarded (docs/DEPLOY.md, RELAY); empty without relays. Rising: the broadcast port between the hosts is cut (MarioRelayBehind), and that host's actors ask the learner for weights themselves.",
            [
                Q(
                    'scalar(max(mario_policy_version{job="mario-learner"})) - mario_relay_policy_version{job="mario-relay"}',
                    "relay of actors from {{first_actor}}",
                )
            ],
            w=10,
        ),
    ],
)
