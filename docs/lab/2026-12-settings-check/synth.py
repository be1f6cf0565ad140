"""Synthetic chunks for the update check: the old side's 24 rolled-out chunks, with behaviour
logits perturbed (pi/mu != 1, so rho clipping and the PPO clip act) and truncations spliced in
(the no-progress cutoff did not fire in the rollout)."""

import numpy as np

src = np.load("/tmp/settings-check/old_rollout12.npz")
env = np.load("/tmp/settings-check/old_env.npz")
out = {k: src[k].copy() for k in src.files}
rng = np.random.default_rng(99)
n = int(src["n"])
for c in range(n):
    bl = out[f"c{c}/behaviour_logits"]
    out[f"c{c}/behaviour_logits"] = (bl + rng.normal(0, 0.5, bl.shape)).astype(bl.dtype)
# truncations: chunk c, env k, step t: the next frame is a reset frame; final frame = real next
for c, k, t in [(0, 0, 10), (4, 1, 31), (5, 0, 0), (9, 1, 20), (12, 0, 5), (17, 1, 15)]:
    a = {
        name: out[f"c{c}/{name}"]
        for name in ("frames", "first", "truncated", "terminated", "final_frames", "final_t")
    }
    if a["terminated"][t, k] or a["first"][3 + t + 1, k]:
        print("skip", c, k, t)
        continue
    a["final_frames"][k] = a["frames"][3 + t + 1, k]
    a["final_t"][k] = t
    a["truncated"][t, k] = True
    a["first"][3 + t + 1, k] = True
    a["frames"][3 + t + 1, k] = env["reset_frames"][0]
    print("truncation at chunk", c, "env", k, "step", t)
np.savez_compressed("/tmp/settings-check/synth_chunks.npz", **out)
