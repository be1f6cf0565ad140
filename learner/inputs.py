"""What the network sees of a learner batch, on the learner's device: the T+1 stacks of each
sequence and the stack of its final frame, rebuilt with the actor's own function
(common.stacking), the previous-action input at each of them, and the recurrent core unrolled
over the trunk's outputs.

Shapes are time-major: T = unroll length, N = sequences in the batch, H x W the frame size,
F the trunk's features.
"""

from __future__ import annotations

import torch

from common.model import ActorCritic
from common.stacking import STACK, stack_frames
from learner.batching import Batch


def final_stacks(batch: Batch) -> torch.Tensor:
    """Stacks ending in each sequence's final frame: [N, 4, H, W] (junk where final_t == -1).

    The stack of the real next observation after truncated step t is frames[3+t-2 .. 3+t] plus
    the final frame, i.e. frames[t+1 : t+4] then final_frames.
    """
    n = batch.num_sequences
    t = batch.final_t.clamp(min=0)  # [N]
    rows = t[None, :] + torch.arange(1, STACK, device=t.device)[:, None]  # [3, N]
    cols = torch.arange(n, device=t.device)[None, :].expand_as(rows)  # [3, N]
    frames = torch.cat([batch.frames[rows, cols], batch.final_frames[None]], dim=0)  # [4, N, H, W]
    no_start = torch.zeros_like(batch.first[:1])  # [1, N]: the final frame starts nothing
    first = torch.cat([batch.first[rows, cols], no_start], dim=0)  # [4, N]
    return stack_frames(frames, first)[0]  # [N, 4, H, W]


def previous_actions(batch: Batch, num_actions: int) -> torch.Tensor:
    """The policy's previous-action input at each of the T+1 stacks: [T+1, N] int64.

    Step t's is actions[t-1] (last_actions for t = 0), or A = none where frames[3+t] starts an
    episode; the actor's `Lane.last_action` is the step-by-step reference.
    """
    prev = torch.cat([batch.last_actions[None], batch.actions], dim=0)  # [T+1, N]
    none = torch.full_like(prev, num_actions)
    return torch.where(batch.first[STACK - 1 :], none, prev)


def final_previous_actions(batch: Batch) -> torch.Tensor:
    """Previous-action input of each sequence's final stack: the truncated step's action, [N]."""
    t = batch.final_t.clamp(min=0)  # [N]
    return batch.actions.gather(0, t[None]).squeeze(0)


def heads_input(model: ActorCritic, batch: Batch, x: torch.Tensor, steps: int) -> torch.Tensor:
    """The recurrent core over the trunk's outputs x [S*N (+ N), F]: the first S = `steps` stacks
    of each sequence, time-major (S is T+1, or T where nothing bootstraps), then, for S = T+1,
    the N final stacks. Returns the heads' input, shaped as x. Without a core, x itself.

    Each sequence's core starts from its chunk's `core_state` [N, C] and is reset where frames[3+t]
    starts an episode; a final stack (the real observation after truncated step t) continues
    from the state after step t. Where final_t == -1 its row is junk, as its stack is.
    """
    if model.core is None:
        return x
    T, N = batch.unroll_length, batch.num_sequences
    seq, after = model.core_unroll(
        x[: steps * N].view(steps, N, -1),
        batch.first[STACK - 1 : STACK - 1 + steps],
        batch.core_state,
    )  # [S, N, F'], [S, N, C]
    if steps == T:
        return seq.flatten(0, 1)
    t = batch.final_t.clamp(min=0)  # [N]
    final, _ = model.core_step(x[steps * N :], after[t, torch.arange(N, device=t.device)])
    return torch.cat([seq.flatten(0, 1), final])
