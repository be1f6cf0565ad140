"""What the dashboard shows, row by row: each panel's title, help and queries (the learner's
rows here, those of what the actors play and report in rows_actors.py). Edit here, then
`python -m scripts.dev.dashboard` writes deploy/grafana/dashboards/mario-impala.json.

Queries use fixed windows (`[1m]` for rates, `[5m]` for episode statistics, which are sparse) so
that each can be pasted into Prometheus's query page as it is; per-level queries take the
dashboard's `$level` variable (every level of the run by default).
"""

# ruff: noqa: E501  (a query and a panel's help read best on one line)

from __future__ import annotations

from scripts.dev.dashboard.build import Q, Row, Stat, Text, Timeseries
from scripts.dev.dashboard.rows_actors import ACTORS, COLLAPSE, EPISODES, EVALUATION, LEVELS

JOBS = 'job=~"mario-learner|mario-actor|mario-eval|mario-relay"'


BOTTLENECK = Row(
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
)


THROUGHPUT = Row(
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
)


HEALTH = Row(
    "Health: restarts, memory, checkpoints, credits",
    [
        Timeseries(
            "Restarts (1 h)",
            "Times each process started anew within the last hour (changes of process_start_time_seconds). A crash loop shows here when supervisord or systemd hides it; its log in RUN/logs/ says why. Alert: MarioRestarting.",
            [Q(f"changes(process_start_time_seconds{{{JOBS}}}[1h])", "{{job}} {{instance}}")],
            w=6,
        ),
        Timeseries(
            "Memory (resident, C heap)",
            "Resident memory of each process (process_resident_memory_bytes), and what its live C allocations hold (mario_process_heap_in_use_bytes; mario_process_heap_free_bytes is what the allocator keeps free). Resident memory that steps up while the heap in use stays flat is the allocator keeping freed buffers; both climbing is a leak. One near the host's memory is killed by the OOM killer (a restart above).",
            [
                Q(f"process_resident_memory_bytes{{{JOBS}}}", "{{job}} {{instance}} resident"),
                Q(f"mario_process_heap_in_use_bytes{{{JOBS}}}", "{{job}} {{instance}} heap in use"),
            ],
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
        Timeseries(
            "Processes serving /metrics, by role",
            "How many processes of each role serve a page, by the run they say they belong to (mario_process_info's role and run_id): a run short of its actors shows here, and a second run's processes scraped by mistake show under another run id.",
            [Q("count by (role, run_id) (mario_process_info)", "{{role}} ({{run_id}})")],
            w=24,
        ),
    ],
)


GPU = Row(
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
)


LEARNER = Row(
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
            "Chunks each update trained on: with --batch-chunks MIN-MAX (4-8), at least MIN, all that were queued up to MAX, fewer only after --batch-wait-s without them (a slow actor); with --batch-chunks N, always N. At the maximum, the learner is the slower side; near the minimum or below, it waits for actors.",
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
            "The optimizer's learning rate in the last update: falling linearly from --learning-rate to --lr-final-fraction of it over --lr-anneal-frames env frames, then held (by default to a tenth over 1.5 M; a planned run's to 0 at FRAMES); flat with --lr-anneal-frames 0.",
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
)


LAG = Row(
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
)


ROWS = [
    BOTTLENECK,
    THROUGHPUT,
    HEALTH,
    GPU,
    LEARNER,
    LAG,
    EPISODES,
    LEVELS,
    COLLAPSE,
    ACTORS,
    EVALUATION,
]
