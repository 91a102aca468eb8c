"""One trainable causal sequence layer over in-context regression tokens.

Token layout (causal, "predict ``y_{t+1}`` from ``(x_i, y_i)_{i≤t}`` and ``x_{t+1}``"): for
examples ``(x_1, y_1), …, (x_{N+1}, y_{N+1})`` position ``t = 1 … N`` writes the pair
``k_t = W_K x_t``, ``v_t = y_t`` and reads out at the next input, ``q_t = W_Q x_{t+1}``; so
``o_t = f̂_t(W_Q x_{t+1})``, the layer's regression fitted to the first t pairs
(:mod:`attnreg.sequence`). Trained: ``W_Q``, ``W_K`` (``d × d``) and the layer's scalar —
DeltaNet's and Longhorn's step β and Mesa's ridge λ (each the softplus of a free parameter);
linear and softmax attention have none (their scale lives in ``W_Q``); local linear attention's
λ is a plain number in :func:`attnreg.sequence.local_linear_attention` (not differentiable), so
it stays at :data:`LOCAL_LINEAR_LAM`. ``W_Q``, ``W_K`` start at the identity plus
``N(0, init_noise²)`` noise. Any other registered layer (:data:`attnreg.sequence.registry.
REGISTRY`, :func:`registered_layers`) trains ``W_Q``, ``W_K`` alone, its own arguments — steps,
gates, decays — drawn by its :class:`~attnreg.sequence.registry.Example` from the model's seed
(the same numbers at every call of one shape), not learned. The 2025 layers the study gives
scalars of their own: the momentum delta rule (``p = k``, ``η = 1``; learned step β and
momentum μ, the sigmoid of a free parameter), TTT-Linear without its LayerNorm (batches of
:data:`MINIBATCH`, learned rate η) and DeltaProduct on :data:`STEPS` copies of each pair
(learned β): momentum, mini-batch and multi-step LMS.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attnreg.estimators.lms_variants import mini_batch_layer, momentum_layer, multi_step_layer
from attnreg.sequence import (
    delta_rule,
    linear_attention,
    local_linear_attention,
    longhorn,
    mesa,
    softmax_attention,
)

REGISTERED_AS = {
    "linear": "linear_attention",
    "delta": "delta_rule",
    "longhorn": "longhorn",
    "mesa": "mesa",
    "softmax": "softmax_attention",
    "local_linear": "local_linear_attention",
    "momentum": "momentum_delta_rule",
    "minibatch": "ttt_linear",
    "multistep": "delta_product",
}
"""The registered layer (``attnreg.sequence.registry``) each of the study's own layers
(``attnreg.studies.layers.config.LAYERS``) is."""


def registered_layers() -> dict[str, str]:
    """The registered layers the study can train beside its own (:data:`REGISTERED_AS`, trained
    with their scalars learned): those whose example keys have the contract's shape
    ``(B, H, T, d_k)``, by name, each described by its first reading's source."""
    from attnreg.sequence.registry import REGISTRY

    out = {}
    for name, entry in REGISTRY.items():
        if name in REGISTERED_AS.values() or entry.example is None:
            continue
        x = entry.example.draw(torch.Generator().manual_seed(0), (1, 1, 2, 2, 1), torch.float64)
        if x["k"].shape == x["q"].shape:
            out[name] = f"{entry.readings[0].source} (registered; its example's arguments)"
    return out


SCALAR = {  # the initial values of the learned scalars (β, λ or η)
    "delta": 0.5,
    "longhorn": 1.0,
    "mesa": 0.1,
    "momentum": 0.25,
    "minibatch": 0.25,
    "multistep": 0.25,
}
MOMENTUM = 0.5  # the momentum layer's initial μ (the sigmoid of a free parameter)
MINIBATCH = 4  # the mini-batch layer's batch size
STEPS = 2  # the multi-step layer's steps per pair
LOCAL_LINEAR_LAM = 0.1


def _softplus_inverse(value: float) -> float:
    return float(torch.log(torch.expm1(torch.tensor(value, dtype=torch.float64))))


class InContextLayer(nn.Module):
    """A causal layer of ``kind`` (a key of :data:`attnreg.studies.layers.config.LAYERS`) on
    in-context tokens of width ``d`` (see the module docstring)."""

    def __init__(self, kind: str, d: int, init_noise: float, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.kind = kind
        self.seed = seed
        eye = torch.eye(d)
        self.w_q = nn.Parameter(eye + init_noise * torch.randn(d, d, generator=gen))
        self.w_k = nn.Parameter(eye + init_noise * torch.randn(d, d, generator=gen))
        start = SCALAR.get(kind)
        self.raw = None if start is None else nn.Parameter(torch.tensor(_softplus_inverse(start)))
        mu = math.log(MOMENTUM / (1 - MOMENTUM))
        self.raw_mu = nn.Parameter(torch.tensor(mu)) if kind == "momentum" else None

    def scalar(self) -> float | None:
        """The learned β (DeltaNet, Longhorn, the momentum and multi-step layers), λ (Mesa) or
        η (the mini-batch layer), else ``None``."""
        return None if self.raw is None else float(nn.functional.softplus(self.raw.detach()))

    def momentum(self) -> float | None:
        """The momentum layer's learned μ, else ``None``."""
        return None if self.raw_mu is None else float(torch.sigmoid(self.raw_mu.detach()))

    def layer(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The sequence layer on ``(B, H, T, ·)`` inputs, in its default form (the fused
        recurrence on the CPU; Mesa's token loop, the fastest of its forms at these T)."""
        s = None if self.raw is None else nn.functional.softplus(self.raw).to(q.dtype)
        if self.kind == "linear":
            return linear_attention(q, k, v)
        if self.kind == "delta":
            return delta_rule(q, k, v, s)
        if self.kind == "longhorn":
            return longhorn(q, k, v, s)
        if self.kind == "mesa":
            return mesa(q, k, v, 1.0, lam=s, mode="recurrent")
        if self.kind == "softmax":
            return softmax_attention(q, k, v)
        if self.kind == "local_linear":
            return local_linear_attention(q, k, v, lam=LOCAL_LINEAR_LAM)
        if self.kind == "momentum":
            assert s is not None and self.raw_mu is not None
            return momentum_layer(q, k, v, s, torch.sigmoid(self.raw_mu).to(q.dtype))
        if self.kind == "minibatch":
            assert s is not None
            return mini_batch_layer(q, k, v, s, MINIBATCH)
        if self.kind == "multistep":
            assert s is not None
            return multi_step_layer(q, k, v, s, STEPS)
        return self._registered(q, k, v)

    def _registered(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """A registered layer at its example's arguments for this shape, drawn from the
        model's seed (see the module docstring)."""
        from attnreg.sequence.registry import REGISTRY

        entry = REGISTRY[self.kind]
        assert entry.example is not None
        gen = torch.Generator().manual_seed(self.seed)
        drawn = entry.example.draw(gen, (*q.shape, v.shape[-1]), q.dtype)
        return entry.function(**(drawn | {"q": q, "k": k, "v": v}))

    def positions(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Read-out at every position: ``x (B, N+1, d)``, ``y (B, N+1 or N, dy)`` ->
        ``(B, N, dy)``, the prediction of ``y_{t+1}`` from the first t pairs."""
        n = x.shape[1] - 1
        wq, wk = self.w_q.to(x.dtype), self.w_k.to(x.dtype)
        q, k = (x[:, 1:] @ wq).unsqueeze(1), (x[:, :n] @ wk).unsqueeze(1)
        return self.layer(q, k, y[:, :n].unsqueeze(1))[:, 0]

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """:meth:`positions`."""
        return self.positions(x, y)


def as_predictor(model: InContextLayer) -> Callable[..., torch.Tensor]:
    """The layer read out after the whole context, with the one signature: ``(x_ctx (B, N, d),
    y_ctx (B, N, dy), x_query (B, M, d)) -> (B, M, dy)``; the M queries go in as M heads, each
    the context followed by one query."""

    def predict(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        m = xq.shape[1]
        wq, wk = model.w_q.to(xc.dtype), model.w_k.to(xc.dtype)
        ctx_q = (xc[:, 1:] @ wq).unsqueeze(1).expand(-1, m, -1, -1)
        q = torch.cat([ctx_q, (xq @ wq).unsqueeze(2)], dim=2)
        k = (xc @ wk).unsqueeze(1).expand(-1, m, -1, -1)
        v = yc.unsqueeze(1).expand(-1, m, -1, -1)
        with torch.no_grad():
            return model.layer(q, k, v)[:, :, -1]

    return predict
