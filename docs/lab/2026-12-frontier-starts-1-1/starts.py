"""Per 200 k env frames of each run: level-start and frontier episodes, the frontier episodes'
share of agent steps, their mean (max) start x, flag rate and mean gain in x. From the
repository root: python docs/lab/2026-12-frontier-starts-1-1/starts.py RUNS_DIR NAME..."""

import json
import sys

for name in sys.argv[2:]:
    with open(f"{sys.argv[1]}/{name}/episodes.jsonl") as f:
        eps = [e for e in map(json.loads, f) if "event" not in e]
    print(name)
    print("| env frames | level-start | frontier | their share of steps | start x, mean (max) "
          "| their flags | their gain in x |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    last = max(e["env_frames"] for e in eps)
    for b in range(0, round(last / 200000) * 200000, 200000):  # the full windows
        w = [e for e in eps if b < e["env_frames"] <= b + 200000]
        start = [e for e in w if e["start_x"] < 0]
        fr = [e for e in w if e["start_x"] >= 0]
        n = max(1, len(fr))
        share = sum(e["length"] for e in fr) / max(1, sum(e["length"] for e in w))
        sx = sum(e["start_x"] for e in fr) / n
        top = max([e["start_x"] for e in fr] or [0])
        flags = sum(e["flag"] for e in fr) / n
        gain = sum(e["max_x"] - e["start_x"] for e in fr) / n
        print(f"| {b + 200000:,} | {len(start)} | {len(fr)} | {share:.0%} | {sx:,.0f} ({top:,}) "
              f"| {flags:.0%} | {gain:,.0f} |")  # fmt: skip
