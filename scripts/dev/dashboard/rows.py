"""What the dashboard shows, row by row: each panel's title, help and queries. Edit here, then
`python -m scripts.dev.dashboard` writes deploy/grafana/dashboards/mario-impala.json.

Queries use fixed windows (`[1m]` for rates, `[5m]` for episode statistics, which are sparse) so
that each can be pasted into Prometheus's query page as it is; per-level queries take the
dashboard's `$level` variable (every level of the run by default).
"""

# ruff: noqa: E501  (a query and a panel's help read best on one line)

from __future__ import annotations

from scripts.dev.dashboard.build import Q, Row, Stat, Text, Timeseries

# The alert rules' thresholds (deploy/prometheus/alerts.yml), drawn on the collapse panel
FLAG_RATE_FALL_ALERT = 0.3
PROGRESS_FALL_ALERT = 0.2
JOBS = 'job=~"mario-learner|mario-actor|mario-eval|mario-relay"'
EVAL_OUTPUTS = """The eval actor keeps each level's best episode so far in **`RUN/eval/`**
(`best-<level>.mp4`, `best-<level>.json`: policy, policy version, max x).

- `make eval RUN=runs/x`: play the run's checkpoint on its levels; videos, stills and tables in
  `RUN/eval/` (`PERTURB=1`: sticky actions and no-op starts beside the plain play).
- `make report RUN=runs/x`: the learning curves, the levels table and the last evaluation in
  `RUN/report/` (`REPORT.md` and its plots).

docs/EVALUATION.md says what each file holds; docs/MONITORING.md what each row here shows."""

ROWS = [
    Row(
        "Bottleneck",
        [
            Stat(
                "Bottleneck",
                "Which side limits throughput, from the last minute: learner-bound (ingest queue > 80% full, or actors blocked on credits while the learner computes), transport-bound (learner starved while actors are blocked on credits), actor-bound (learner starved, actors busy), or balanced. See the text panel beside it.",
                [
                    Q(
                        "3 * clamp_max(((max(mario_learner_ingest_queue_depth / mario_learner_ingest_queue_capacity) or vector(0)) > bool 0.8) + ((avg(rate(mario_actor_flow_control_wait_seconds_total[1m])) or vector(0)) > bool 0.3) * (1 - ((sum(rate(mario_learner_wait_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))) > bool 0.5)), 1) + (1 - clamp_max(((max(mario_learner_ingest_queue_depth / mario_learner_ingest_queue_capacity) or vector(0)) > bool 0.8) + ((avg(rate(mario_actor_flow_control_wait_seconds_total[1m])) or vector(0)) > bool 0.3) * (1 - ((sum(rate(mario_learner_wait_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))) > bool 0.5)), 1)) * ((sum(rate(mario_learner_wait_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))) > bool 0.5) * (1 + ((avg(rate(mario_actor_flow_control_wait_seconds_total[1m])) or vector(0)) > bool 0.3))",
                        "verdict",
                        instant=True,
                    )
                ],
                steps=[(None, "green")],
                names={
                    "0": ("balanced", "green"),
                    "1": ("actor-bound", "orange"),
                    "2": ("transport-bound", "purple"),
                    "3": ("learner-bound", "red"),
                },
                value_only=True,
            ),
            Stat(
                "Bottleneck indicators",
                "Learner wait share: train-loop time spent waiting for chunks (high: starved). Actor credit wait: mean share of actor time blocked on a send credit (high: the learner or the link cannot keep up). Ingest queue fill: queued chunks / capacity (full: learner-bound). Chunk latency p90: send to consumption, queueing included.",
                [
                    Q(
                        "sum(rate(mario_learner_wait_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))",
                        "learner wait share",
                        instant=True,
                    ),
                    Q(
                        "avg(rate(mario_actor_flow_control_wait_seconds_total[1m]))",
                        "actor credit wait",
                        instant=True,
                    ),
                    Q(
                        "max(mario_learner_ingest_queue_depth / mario_learner_ingest_queue_capacity)",
                        "ingest queue fill",
                        instant=True,
                    ),
                    Q(
                        "histogram_quantile(0.9, sum by (le) (rate(mario_chunk_latency_seconds_bucket[1m])))",
                        "chunk latency p90",
                        instant=True,
                    ),
                ],
                unit="percentunit",
                w=10,
                decimals=0,
                steps=[(None, "green"), (0.3, "orange"), (0.5, "red")],
                by_query={
                    "C": {"thresholds": [(None, "green"), (0.5, "orange"), (0.8, "red")]},
                    "D": {
                        "unit": "s",
                        "decimals": 2,
                        "thresholds": [(None, "green"), (1, "orange"), (5, "red")],
                    },
                },
            ),
            Text(
                "How to read the bottleneck panels",
                "| learner wait share | actor credit wait | ingest queue | verdict |\n|---|---|---|---|\n| any | any | > 80% full | **learner-bound**: the learner trains slower than chunks arrive |\n| low | high | not full | **learner-bound**: actors wait for credits the busy learner owes |\n| high | high | empty | **transport-bound**: credits and chunks are stuck between the two |\n| high | low | empty | **actor-bound**: actors cannot produce chunks fast enough |\n| low | low | not full | **balanced** |\n\nLearner-bound: a faster learner device, larger `--batch-chunks`, or fewer actors. Actor-bound: more actors or envs per actor (see *Actor steps/s* and *Actor time split*). Transport-bound: check *Ingest and broadcast bandwidth* and chunk latency with an empty queue; more `--credits-per-actor` hides link latency. Chunk latency includes time spent in the queue, so it is high whenever the queue is full. Thresholds: wait share 50%, credit wait 30%, queue 80%.",
                w=8,
                h=7,
            ),
        ],
    ),
    Row(
        "Throughput",
        [
            Timeseries(
                "Learner agent steps/s",
                "Fresh agent steps the learner trains on per second: the learner's own 30 s average, and the rate of its counter.",
                [
                    Q("mario_learner_agent_steps_per_second", "gauge (30 s)"),
                    Q("sum(rate(mario_learner_agent_steps_total[1m]))", "rate (1 m)"),
                ],
            ),
            Timeseries(
                "Env frames/s",
                "NES frames emulated by all actors, and the frames of the agent steps the learner consumed. A gap means chunks are dropped (stale, rejected) or still queued.",
                [
                    Q("sum(rate(mario_actor_env_frames_total[1m]))", "actors (sum)"),
                    Q("sum(rate(mario_learner_env_frames_total[1m]))", "learner consumed"),
                ],
            ),
            Timeseries(
                "Samples/s by source",
                "Agent steps trained on per second: fresh from actors, or replayed.",
                [Q("sum by (source) (rate(mario_learner_samples_total[1m]))", "{{source}}")],
                stack=True,
            ),
        ],
    ),
    Row(
        "Health: restarts, memory, checkpoints, credits",
        [
            Timeseries(
                "Restarts (1 h)",
                "Times each process started anew within the last hour (changes of process_start_time_seconds). A crash loop shows here when supervisord or systemd hides it; its log in RUN/logs/ says why. Alert: MarioRestarting.",
                [Q(f"changes(process_start_time_seconds{{{JOBS}}}[1h])", "{{job}} {{instance}}")],
                w=6,
            ),
            Timeseries(
                "Memory (resident)",
                "Resident memory of each process (process_resident_memory_bytes). A learner or actor that only grows is leaking; one near the host's memory is killed by the OOM killer (a restart above).",
                [Q(f"process_resident_memory_bytes{{{JOBS}}}", "{{job}} {{instance}}")],
                unit="bytes",
                w=6,
            ),
            Timeseries(
                "Checkpoint age",
                "Seconds since the learner's last checkpoint (since its start, before its first): a learner crash loses at most this much training. It saws up to --checkpoint-interval-s and back; a line that only climbs means checkpoints fail (the learner's log).",
                [
                    Q(
                        "time() - (mario_learner_last_checkpoint_timestamp_seconds > 0 or mario_learner_start_time_seconds)",
                        "since the last checkpoint",
                    )
                ],
                unit="s",
                w=6,
            ),
            Timeseries(
                "Credits outstanding",
                "Send credits granted to the actors and not yet spent: the most chunks that can be in flight (the learner's count), and those the actors hold. None held while actors run: the learner is not granting (full ingest queue).",
                [
                    Q("mario_learner_credits_outstanding", "granted, unspent (learner)"),
                    Q("sum(mario_actor_credits)", "held by the actors"),
                ],
                w=6,
            ),
            Timeseries(
                "Env frames trained (run)",
                "Env frames of the whole run, resumed with it (mario_learner_run_env_frames), and a planned run's length (make train FRAMES=; mario_learner_train_frames, 0 when endless).",
                [
                    Q("mario_learner_run_env_frames", "trained"),
                    Q("mario_learner_train_frames", "planned (0: until stopped)"),
                ],
                w=12,
            ),
            Timeseries(
                "Newest 200 training episodes",
                "Flag rate of the newest 200 training episodes of all levels together, as the status line shows it (mario_recent_episodes_flag_rate), and their mean progress over the levels' newest 50 (mario_levels_mean_progress).",
                [
                    Q("mario_recent_episodes_flag_rate", "flag rate"),
                    Q("mario_levels_mean_progress", "progress (mean over levels)"),
                    Q("mario_levels_mean_flag_rate", "flag rate (mean over levels)"),
                ],
                unit="percentunit",
                max=1,
                w=12,
            ),
        ],
    ),
    Row(
        "GPU",
        [
            Timeseries(
                "GPU utilization",
                "Share of time a kernel ran, per GPU (NVML). Exported only when the learner runs on CUDA.",
                [Q("mario_gpu_utilization_ratio", "GPU {{gpu}}")],
                unit="percentunit",
                max=1,
            ),
            Timeseries(
                "GPU memory",
                "Device memory in use (any process) and installed, per GPU.",
                [
                    Q("mario_gpu_memory_used_bytes", "used GPU {{gpu}}"),
                    Q("mario_gpu_memory_total_bytes", "total GPU {{gpu}}"),
                ],
                unit="bytes",
            ),
            Timeseries(
                "GPU power",
                "Board power draw per GPU.",
                [Q("mario_gpu_power_watts", "GPU {{gpu}}")],
                unit="watt",
            ),
        ],
    ),
    Row(
        "Learner",
        [
            Timeseries(
                "Updates/s",
                "Optimizer updates per second.",
                [Q("sum(rate(mario_learner_updates_total[1m]))", "updates/s")],
            ),
            Timeseries(
                "Update duration",
                "Time of one update (collate, V-trace, backward, step), median and 90th percentile.",
                [
                    Q(
                        "histogram_quantile(0.5, sum by (le) (rate(mario_learner_update_seconds_bucket[1m])))",
                        "p50",
                    ),
                    Q(
                        "histogram_quantile(0.9, sum by (le) (rate(mario_learner_update_seconds_bucket[1m])))",
                        "p90",
                    ),
                ],
                unit="s",
            ),
            Timeseries(
                "Train loop: waiting vs computing",
                "Share of the train loop's time spent waiting for chunks and computing. Mostly waiting: the learner is starved (actor- or transport-bound).",
                [
                    Q(
                        "sum(rate(mario_learner_wait_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))",
                        "waiting for data",
                    ),
                    Q(
                        "sum(rate(mario_learner_compute_seconds_total[1m])) / (sum(rate(mario_learner_wait_seconds_total[1m])) + sum(rate(mario_learner_compute_seconds_total[1m])))",
                        "computing",
                    ),
                ],
                unit="percentunit",
                max=1,
                stack=True,
            ),
            Timeseries(
                "Losses by term",
                "Last update's loss terms (entropy is the negative entropy bonus term).",
                [Q("mario_learner_loss", "{{term}}")],
                min=None,
            ),
            Timeseries(
                "Gradient norm",
                "Last update's global gradient norm before clipping.",
                [Q("mario_learner_grad_norm", "grad norm")],
            ),
            Timeseries(
                "Policy entropy",
                "Last update's mean policy entropy (nats).",
                [Q("mario_learner_entropy", "entropy")],
            ),
            Timeseries(
                "Chunks per update",
                "Chunks each update trained on: at least --min-batch-chunks, all that were queued up to --max-batch-chunks, fewer only after --batch-wait-s without them (a slow actor). At the maximum, the learner is the slower side; near the minimum or below, it waits for actors.",
                [
                    Q(
                        "sum(rate(mario_learner_batch_chunks_sum[1m])) / sum(rate(mario_learner_batch_chunks_count[1m]))",
                        "mean",
                    ),
                    Q(
                        "histogram_quantile(0.1, sum by (le) (rate(mario_learner_batch_chunks_bucket[1m])))",
                        "p10",
                    ),
                ],
            ),
            Timeseries(
                "Learning rate",
                "The optimizer's learning rate in the last update: flat at --learning-rate, or falling linearly to --lr-final-fraction of it over --lr-anneal-frames env frames.",
                [Q("mario_learner_learning_rate", "learning rate")],
                unit="sci",
            ),
            Timeseries(
                "Epochs per update",
                "Passes over each batch in the last update (mario_learner_epochs): --epochs, or more up to --max-epochs where the learner adapts them to the data rate (a GPU learner that waits for data reuses it).",
                [
                    Q("mario_learner_epochs", "epochs"),
                    Q("mario_learner_clip_fraction", "clipped share (PPO)"),
                ],
            ),
        ],
    ),
    Row(
        "Policy lag, ingest queue, latency",
        [
            Timeseries(
                "Policy lag",
                "Learner policy version minus the version that acted, per consumed chunk (updates).",
                [
                    Q(
                        "histogram_quantile(0.5, sum by (le) (rate(mario_policy_lag_updates_bucket[1m])))",
                        "p50",
                    ),
                    Q(
                        "histogram_quantile(0.9, sum by (le) (rate(mario_policy_lag_updates_bucket[1m])))",
                        "p90",
                    ),
                ],
                threshold=20,
            ),
            Timeseries(
                "Ingest queue",
                "Chunks waiting to be trained on, and the queue's capacity. Full: learner-bound.",
                [
                    Q("mario_learner_ingest_queue_depth", "depth"),
                    Q("mario_learner_ingest_queue_capacity", "capacity"),
                ],
            ),
            Timeseries(
                "Chunk latency",
                "Time from an actor sending a chunk to the learner consuming it (queueing included).",
                [
                    Q(
                        "histogram_quantile(0.5, sum by (le) (rate(mario_chunk_latency_seconds_bucket[1m])))",
                        "p50",
                    ),
                    Q(
                        "histogram_quantile(0.9, sum by (le) (rate(mario_chunk_latency_seconds_bucket[1m])))",
                        "p90",
                    ),
                ],
                unit="s",
            ),
            Timeseries(
                "Chunks by result",
                "Chunks received per second: accepted, stale (older than --max-policy-lag) or rejected.",
                [Q("sum by (result) (rate(mario_learner_chunks_total[1m]))", "{{result}}")],
                stack=True,
            ),
            Timeseries(
                "Messages rejected by reason",
                "Messages the learner dropped per second: undecodable, wrong spec, unknown actor, ...",
                [
                    Q(
                        "sum by (reason) (rate(mario_learner_messages_rejected_total[1m]))",
                        "{{reason}}",
                    )
                ],
            ),
            Timeseries(
                "Ingest and broadcast bandwidth",
                "Chunk payload bytes received and policy weight bytes sent per second.",
                [
                    Q("sum(rate(mario_learner_ingest_bytes_total[1m]))", "chunks in"),
                    Q("sum(rate(mario_weights_broadcast_bytes_total[1m]))", "weights out"),
                ],
                unit="Bps",
            ),
        ],
    ),
    Row(
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
    ),
    Row(
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
        ],
    ),
    Row(
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
    ),
    Row(
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
    ),
    Row(
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
    ),
]
