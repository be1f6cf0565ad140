"""The actor-critic network shared by actor (CPU inference) and learner (training).

Input: uint8 stacked frames [B, S, H, W] (S = 4, H = W = 84) and, as in IMPALA (Espeholt et al.
2018, Sec. 5), the previous action [B] int64 in [0, A], where A stands for "none" (the step starts
an episode). Output: policy logits [B, A] and state value [B], and with a recurrent core its new
state [B, C]. The recurrent core (`ModelSpec.core`, "none" by default): an LSTM or GRU cell of
`core_size` units between the trunk and the heads, its state [B, C] (C = `state_size`) zero at an
episode's first step and unrolled by the learner from each chunk's (`core_unroll`). The previous
action's embedding is added to the trunk's hidden layer before the ReLU. Input normalisation
standardises each pixel by its running moments over the frames trained on (buffers that travel
with the weights). docs/DESIGN.md ("Network") says why each is there. Trunks: "small" (default;
Mnih et al. 2013 / A3C), "nature" (Mnih et al. 2015; ~2.5x its CPU time) and "resnet" (the IMPALA
deep ResNet, Espeholt et al. 2018, Fig. 3; ~13x).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal, NamedTuple, get_args

import torch
from torch import nn
from torch.nn import functional as F

Arch = Literal["small", "nature", "resnet"]
ARCHS = get_args(Arch)
Core = Literal["none", "lstm", "gru"]
CORES = get_args(Core)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the network is; actor, learner and checkpoints must agree on it."""

    arch: Arch = "small"
    num_actions: int = 7
    stack: int = 4
    frame_size: int = 84
    core: Core = "none"  # recurrent core between trunk and heads
    core_size: int = 256  # its units

    @property
    def state_size(self) -> int:
        """C, the width of the recurrent state [B, C] (0 without a core)."""
        return {"none": 0, "lstm": 2 * self.core_size, "gru": self.core_size}[self.core]

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        """A spec as `to_wire` wrote it; FormerNetwork for a former release's network without the
        previous action or input normalisation (one naming either as false, or older than both),
        or with a value head per level (per-level PopArt's). A spec naming one value head is the
        network this release builds."""
        d = dict(d)
        if "core" not in d:  # before the core, a spec lacking the two was built without them
            d = {"last_action": False, "input_norm": False, **d}
        lacks = [what for name, what in FORMER_SWITCHES.items() if d.pop(name, True) is not True]
        if lacks:
            raise FormerNetwork(
                f"its network lacks {' and '.join(lacks)}, which this release always has"
            )
        if (heads := d.pop(FORMER_VALUE_HEADS, 1)) != 1:
            raise FormerNetwork(
                f"its network has a value head for each of its {heads} levels, per-level "
                "PopArt's, which this release no longer builds"
            )
        return cls(**d)

    def problems(self) -> list[str]:
        out = []
        if self.arch not in ARCHS:
            out.append(f"arch must be one of {list(ARCHS)}, got {self.arch!r}")
        if self.num_actions < 1:
            out.append(f"num_actions must be >= 1, got {self.num_actions}")
        if self.stack < 1:
            out.append(f"stack must be >= 1, got {self.stack}")
        if self.frame_size < 36:
            out.append(f"frame_size must be >= 36 for the conv trunk, got {self.frame_size}")
        if self.core not in CORES:
            out.append(f"core must be one of {list(CORES)}, got {self.core!r}")
        if self.core_size < 1:
            out.append(f"core_size must be >= 1, got {self.core_size}")
        return out

    def to_wire(self) -> dict[str, str | int | float | bool]:
        return dataclasses.asdict(self)


# Switches of former releases' networks, both always on since, by their key in a saved spec
FORMER_SWITCHES = {
    "last_action": "the previous action as an input",
    "input_norm": "input normalisation",
}
# A former release's per-level PopArt (--popart-per-level) gave its network one value head per
# level of the set, saved as this key (1 otherwise: this release's network)
FORMER_VALUE_HEADS = "value_heads"


class FormerNetwork(ValueError):
    """A network spec of a former release that this release's network cannot load."""


# Input normalisation: per-pixel moments counted up to this many frames, then an exponential average
# (new parts of a level change them); the std floor keeps rare changes of still pixels (HUD) small.
INPUT_NORM_MAX_COUNT = 100_000.0
INPUT_NORM_STD_FLOOR = 0.02


class Moments(NamedTuple):
    count: torch.Tensor  # [] frames folded in (capped)
    mean: torch.Tensor  # [1, 1, H, W]
    var: torch.Tensor  # [1, 1, H, W] population variance


def merge_moments(a: Moments, b: Moments, max_count: float) -> Moments:
    """Moments of the union of two sets (Chan et al. 1979, the pairwise update), with a's count
    capped at `max_count` first so old data fades once that many frames were seen."""
    na = torch.minimum(a.count, (max_count - b.count).clamp(min=0.0))  # no host sync
    n = na + b.count
    delta = b.mean - a.mean
    mean = a.mean + delta * (b.count / n)
    var = (a.var * na + b.var * b.count + delta**2 * na * b.count / n) / n
    return Moments(n, mean, var)


class PolicyOutput(NamedTuple):
    logits: torch.Tensor  # [B, A]
    value: torch.Tensor  # [B]
    state: torch.Tensor  # [B, C] the core's state after this step ([B, 0] without a core)


class _Trunk(nn.Module):
    """Conv layers, flattened, then one ReLU FC layer of `hidden` units (plus `extra`, [B, hidden],
    the previous action's embedding, added before the ReLU)."""

    def __init__(self, convs: list[nn.Module], stack: int, size: int, hidden: int):
        super().__init__()
        self.convs = nn.Sequential(*convs, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, stack, size, size)).shape[1]
        self.fc = nn.Linear(flat, hidden)
        self.out_features = hidden

    def forward(self, x: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(self.convs(x)) + extra)


def _small(stack: int, size: int) -> _Trunk:
    convs = [
        nn.Conv2d(stack, 16, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(16, 32, 4, stride=2),
        nn.ReLU(),
    ]
    return _Trunk(convs, stack, size, 256)


def _nature(stack: int, size: int) -> _Trunk:
    convs = [
        nn.Conv2d(stack, 32, 8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),
    ]
    return _Trunk(convs, stack, size, 512)


class _ResidualBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


def _resnet(stack: int, size: int, channels: tuple[int, ...] = (16, 32, 32)) -> _Trunk:
    layers: list[nn.Module] = []
    inp = stack
    for ch in channels:
        layers += [
            nn.Conv2d(inp, ch, 3, padding=1),
            nn.MaxPool2d(3, stride=2, padding=1),
            _ResidualBlock(ch),
            _ResidualBlock(ch),
        ]
        inp = ch
    return _Trunk([*layers, nn.ReLU()], stack, size, 256)


class ActorCritic(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        problems = spec.problems()
        if problems:
            raise ValueError("invalid model spec: " + "; ".join(problems))
        self.spec = spec
        build = {"small": _small, "nature": _nature, "resnet": _resnet}[spec.arch]
        self.trunk = build(spec.stack, spec.frame_size)
        # the previous action's embedding, row A = none; zero, so an untrained network ignores it
        self.last_action = nn.Embedding(spec.num_actions + 1, self.trunk.out_features)
        nn.init.zeros_(self.last_action.weight)
        self.core: nn.LSTMCell | nn.GRUCell | None = None
        width = self.trunk.out_features  # of the heads' input
        if spec.core != "none":
            cell = nn.LSTMCell if spec.core == "lstm" else nn.GRUCell
            self.core = cell(self.trunk.out_features, spec.core_size)
            width = spec.core_size
        self.policy = nn.Linear(width, spec.num_actions)
        self.value = nn.Linear(width, 1)
        # input normalisation's moments, in [0, 1] pixel units: mean 0, variance 1 until data
        size = (1, 1, spec.frame_size, spec.frame_size)
        self.register_buffer("input_mean", torch.zeros(size))
        self.register_buffer("input_var", torch.ones(size))
        self.register_buffer("input_count", torch.zeros(()))

    @torch.no_grad()
    def observe_frames(self, frames: torch.Tensor, max_count: float = INPUT_NORM_MAX_COUNT) -> None:
        """Fold frames [..., H, W] uint8 into the per-pixel running moments (learner only; the
        actors receive the moments with the weights)."""
        x = frames.reshape(-1, 1, *frames.shape[-2:]).float() * (1.0 / 255.0)  # [n, 1, H, W]
        m = merge_moments(
            Moments(self.input_count, self.input_mean, self.input_var),
            Moments(
                torch.tensor(float(x.shape[0]), device=x.device),
                x.mean(0, keepdim=True),
                x.var(0, unbiased=False, keepdim=True),
            ),
            max_count,
        )
        self.input_count.copy_(m.count)
        self.input_mean.copy_(m.mean)
        self.input_var.copy_(m.var)

    def forward(
        self,
        frames: torch.Tensor,
        last_action: torch.Tensor | None = None,
        state: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """One step: frames [B, S, H, W] uint8 (or float in [0, 1]); last_action [B] int64 in
        [0, A] (A or None: none); state [B, C] before this step (None: zeros, an episode's first
        step). Resetting the state where an episode starts is the caller's."""
        x = self.features(frames, last_action)  # [B, F]
        if state is None:
            state = self.initial_state(x.shape[0], x.device)
        h, state = self.core_step(x, state)  # [B, F'], [B, C]
        return PolicyOutput(self.policy(h), self.value(h).squeeze(-1), state)

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The core's state at an episode's first step: zeros [B, C]."""
        return torch.zeros(batch, self.spec.state_size, device=device)

    def core_step(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The core on one step: trunk output x [B, F] and state [B, C] -> the heads' input
        [B, F'] and the new state [B, C]. Without a core: x and the state unchanged."""
        if self.core is None:
            return x, state
        if isinstance(self.core, nn.LSTMCell):
            h, c = self.core(x, state.chunk(2, dim=-1))
            return h, torch.cat([h, c], dim=-1)
        h = self.core(x, state)
        return h, h

    def core_unroll(
        self, x: torch.Tensor, starts: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The core over L steps of N sequences, as the actor ran it: x [L, N, F], starts [L, N]
        bool (the state is zeroed before such a step), state [N, C] before step 0 -> the heads'
        input [L, N, F'] and the state after each step [L, N, C]."""
        if self.core is None:
            return x, x.new_zeros(*x.shape[:2], 0)
        outs, states = [], []
        for l in range(x.shape[0]):  # noqa: E741
            state = torch.where(starts[l, :, None], torch.zeros_like(state), state)
            h, state = self.core_step(x[l], state)
            outs.append(h)
            states.append(state)
        return torch.stack(outs), torch.stack(states)

    def features(
        self, frames: torch.Tensor, last_action: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The trunk's output [B, F] (arguments as in `forward`): the heads' input without a
        core, the core's input with one."""
        x = frames.float() * (1.0 / 255.0) if frames.dtype == torch.uint8 else frames.float()
        # the static background goes to ~0; what moves stands out
        x = (x - self.input_mean) / (self.input_var.sqrt() + INPUT_NORM_STD_FLOOR)
        if last_action is None:
            last_action = torch.full(
                (x.shape[0],), self.spec.num_actions, dtype=torch.long, device=x.device
            )
        return self.trunk(x, self.last_action(last_action))  # [B, F]


class DeviceUnavailable(RuntimeError):
    """--device names a CUDA device that torch does not see."""


_DEVICE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def device_problem(name: str) -> str | None:
    """What is wrong with a --device value, if anything (whether torch sees it is asked later,
    by `resolve_device`)."""
    if _DEVICE.match(name):
        return None
    return f"device must be auto, cpu, cuda or cuda:N (N: a GPU's index, from 0), got {name!r}"


def resolve_device(name: str) -> torch.device:
    """The torch device of a --device value: `auto` is CUDA when torch sees it, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if problem := device_problem(name):
        raise DeviceUnavailable(problem)
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable(
            f"--device {name} asked for, but torch sees no CUDA device; pass --device cpu"
        )
    count = torch.cuda.device_count() if device.type == "cuda" else 0
    if device.index is not None and device.index >= count:
        raise DeviceUnavailable(
            f"--device {name} asked for, but torch sees {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}; pass one of those, or --device cuda"
        )
    return device
