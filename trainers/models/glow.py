"""BERT-flow's Glow (Li et al. 2020): an invertible map from sentence vectors u to a standard Gaussian latent z.

The architecture is the authors' (github.com/bohanli/BERT-flow, ``flow/glow_ops_1x1.py``, ``flow/glow_1x1.py``),
Glow (Kingma & Dhariwal 2018) on a 1 x 1 "image" whose channels are the vector's dimensions:

- ``levels`` levels of ``depth`` steps; after every level but the last, the second half of the channels leaves
  as a latent (prior N(0, I)) and the first half flows on; the top prior is N(0, I) too. The embedding is the
  latents in order (the first level's first) followed by the top's: ``tf.concat(eps + [z])``.
- a step is actnorm, an invertible 1 x 1 convolution, a coupling;
- actnorm: ``(x + b) * exp(3 s)``, both initialised from the first batch so that its output has zero mean and
  unit variance per channel (Glow's data-dependent initialisation, :meth:`Glow.initialize`), or, as the authors'
  released code runs, from TensorFlow's default draw (:meth:`Glow.initialize_as_released`);
- the 1 x 1 convolution is, with ``permutation`` (the authors' configs), the fixed reversal of the channels
  (log-det 0); without, Glow's LU-parametrised matrix ``P L (U + diag(sign(s) exp(log s)))`` started from a
  random rotation;
- additive coupling: ``x2 + NN(x1)``; affine: ``(x2 + shift) * sigmoid(raw_scale + 2)``; NN is a dense layer
  (no bias) + actnorm + ReLU, another, and a zero-initialised dense layer scaled by ``exp(3 logs)``: the
  1 x 1 convolutions of ``conv_stack``; the dense layers start from N(0, 0.05).

This module imports nothing but torch: an exported encoder carries it (:mod:`trainers.models.sentence_modules`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

LOGSCALE_FACTOR = 3.0  # actnorm's and the zero layer's log-scales are learned divided by 3 (glow_ops: logscale_factor)


class ActNorm(nn.Module):
    """Per-channel ``(x + bias) * exp(3 logs)``, data-dependently initialised; returns (y, log-det per sample)."""

    def __init__(self, channels: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))
        self.logs = nn.Parameter(torch.zeros(channels))
        self.initializing = False

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.initializing:  # glow_ops.actnorm_center / actnorm_scale with init=True
            self.bias.data.copy_(-x.mean(0))
            centered_var = ((x + self.bias) ** 2).mean(0)
            self.logs.data.copy_(torch.log(1.0 / (centered_var.sqrt() + 1e-6)) / LOGSCALE_FACTOR)
        logs = self.logs * LOGSCALE_FACTOR
        return (x + self.bias) * logs.exp(), logs.sum().expand(x.shape[0])


class InvertibleLinear(nn.Module):
    """The invertible 1 x 1 convolution: ``x @ W``; returns (y, log|det W| per sample)."""

    def __init__(self, channels: int, permutation: bool):
        super().__init__()
        self.permutation = permutation
        if permutation:
            return
        rotation = torch.linalg.qr(torch.rand(channels, channels, dtype=torch.float64))[0]
        p, lower, upper = torch.linalg.lu(rotation)
        s = torch.diagonal(upper)
        self.register_buffer("p", p.float())
        self.register_buffer("sign_s", torch.sign(s).float())
        self.lower = nn.Parameter(lower.float())
        self.upper = nn.Parameter(torch.triu(upper, 1).float())
        self.log_s = nn.Parameter(s.abs().log().float())

    def weight(self) -> Tensor:
        mask = torch.tril(torch.ones_like(self.lower), -1)
        lower = self.lower * mask + torch.eye(len(mask), device=mask.device)
        upper = self.upper * mask.T + torch.diag(self.sign_s * self.log_s.exp())
        return self.p @ lower @ upper

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.permutation:  # w[i][C-1-i] = 1: the channels reversed
            return x.flip(-1), x.new_zeros(x.shape[0])
        return x @ self.weight(), self.log_s.sum().expand(x.shape[0])


class DenseActNorm(nn.Module):
    """glow_ops.conv with a 1 x 1 filter and actnorm: a dense layer without bias, then actnorm (log-det unused)."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs, bias=False)
        nn.init.normal_(self.linear.weight, 0.0, 0.05)
        self.actnorm = ActNorm(outputs)

    def forward(self, x: Tensor) -> Tensor:
        return self.actnorm(self.linear(x))[0]


class ZeroDense(nn.Module):
    """glow_ops.conv "zeros": a zero-initialised dense layer, its output scaled by ``exp(3 logs)``."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.linear = nn.Linear(inputs, outputs)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)
        self.logs = nn.Parameter(torch.zeros(outputs))

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x) * (self.logs * LOGSCALE_FACTOR).exp()


class Coupling(nn.Module):
    """Additive or affine coupling: the second half of the channels moved (and scaled) by a net of the first."""

    def __init__(self, channels: int, width: int, affine: bool):
        super().__init__()
        self.half = channels // 2
        self.affine = affine
        outputs = channels if affine else channels - self.half
        self.net = nn.Sequential(DenseActNorm(self.half, width), nn.ReLU(), DenseActNorm(width, width), nn.ReLU(),
                                 ZeroDense(width, outputs))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x1, x2 = x[:, :self.half], x[:, self.half:]
        h = self.net(x1)
        if not self.affine:
            return torch.cat([x1, x2 + h], -1), x.new_zeros(x.shape[0])
        shift, scale = h[:, 0::2], torch.sigmoid(h[:, 1::2] + 2.0)
        return torch.cat([x1, (x2 + shift) * scale], -1), scale.log().sum(-1)


class FlowStep(nn.Module):
    def __init__(self, channels: int, width: int, affine: bool, permutation: bool):
        super().__init__()
        self.actnorm = ActNorm(channels)
        self.mix = InvertibleLinear(channels, permutation)
        self.coupling = Coupling(channels, width, affine)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        log_det = x.new_zeros(x.shape[0])
        for layer in (self.actnorm, self.mix, self.coupling):
            x, step_log_det = layer(x)
            log_det = log_det + step_log_det
        return x, log_det


class Glow(nn.Module):
    """Sentence vectors ``[batch, dim]`` -> latent ``[batch, dim]``; ``dim`` must be divisible by 2^levels."""

    def __init__(self, dim: int, levels: int = 3, depth: int = 3, width: int = 32, coupling: str = "additive",
                 permutation: bool = True):
        super().__init__()
        if dim % 2 ** levels:
            raise ValueError(f"a {levels}-level flow halves the vector's {dim} dimensions {levels} times: "
                             f"{dim} is not divisible by {2 ** levels}")
        if coupling not in ("additive", "affine"):
            raise ValueError(f"coupling must be 'additive' or 'affine', got {coupling!r}")
        self.settings = {"dim": dim, "levels": levels, "depth": depth, "width": width, "coupling": coupling,
                         "permutation": permutation}
        self.levels = nn.ModuleList(
            nn.ModuleList(FlowStep(dim // 2 ** level, width, coupling == "affine", permutation) for _ in range(depth))
            for level in range(levels))
        # Whether the actnorms were initialised from data: a checkpoint of a trained flow keeps it.
        self.register_buffer("initialized", torch.tensor(False))

    def latent_and_log_det(self, u: Tensor) -> tuple[Tensor, Tensor]:
        """The latent z = f^-1(u) (the split latents, then the top's) and log|det dz/du| per sample."""
        x, log_det, latents = u, u.new_zeros(u.shape[0]), []
        for index, steps in enumerate(self.levels):
            for step in steps:
                x, step_log_det = step(x)
                log_det = log_det + step_log_det
            if index < len(self.levels) - 1:
                half = x.shape[-1] // 2
                latents.append(x[:, half:])
                x = x[:, :half]
        return torch.cat(latents + [x], -1), log_det

    def forward(self, u: Tensor) -> Tensor:
        return self.latent_and_log_det(u.float())[0]

    @torch.no_grad()
    def initialize(self, u: Tensor) -> None:
        """Glow's data-dependent initialisation on the batch ``u``: each actnorm, in order, set from its input."""
        actnorms = [module for module in self.modules() if isinstance(module, ActNorm)]
        for actnorm in actnorms:
            actnorm.initializing = True
        try:
            self.latent_and_log_det(u.float())
        finally:
            for actnorm in actnorms:
                actnorm.initializing = False
        self.initialized.fill_(True)

    @torch.no_grad()
    def initialize_as_released(self) -> None:
        """The actnorms as the authors' released code leaves them: its data-dependent initialisation is built but
        never run (``run_siamese.py`` passes no ``GlowInitHook`` to ``estimator.train``), so each actnorm's bias
        and log-scale keep TensorFlow's default Glorot-uniform draw for their ``(1, 1, 1, C)`` variables,
        U(-sqrt(6 / (1 + C)), sqrt(6 / (1 + C))), here from torch's generator."""
        for actnorm in (module for module in self.modules() if isinstance(module, ActNorm)):
            limit = (6.0 / (1 + actnorm.bias.numel())) ** 0.5
            actnorm.bias.uniform_(-limit, limit)
            actnorm.logs.uniform_(-limit, limit)
        self.initialized.fill_(True)
