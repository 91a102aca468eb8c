"""Online least squares with more than one plain step per pair: heavy-ball momentum, mini-batches
and several steps per pair — the estimators that the momentum delta rule, TTT-Linear and
DeltaProduct compute (each predictor is its sequence layer run over the context with
``W_Q = W_K = I``, as :class:`~attnreg.estimators.LMS` is the delta rule).

All start from ``W_0 = 0``, pass over the context pairs ``(x_i, y_i)`` once in order, and
answer ``ŷ* = W_N x*``; their answers depend on the order of the pairs. Each query is read at
the last context position of a sequence of its own (one head per query), where the layer's
output is the map after every pair."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, check_positive, check_positive_int
from attnreg.sequence import delta_product, momentum_delta_rule, ttt_linear

Layer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Step = float | torch.Tensor
"""A step or a momentum: a number, or a 0-d tensor (the ``layers`` study learns them)."""


def momentum_layer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: Step, momentum: Step
) -> torch.Tensor:
    """Heavy-ball LMS as a sequence layer: the momentum delta rule on its own keys
    (``p = k``, ``η = 1``), step ``beta``, momentum ``momentum``."""
    return momentum_delta_rule(q, k, v, k, beta, 1.0, momentum=momentum)


def mini_batch_layer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, eta: Step, batch_size: int
) -> torch.Tensor:
    """Mini-batch LMS as a sequence layer: TTT-Linear without its LayerNorm, rate ``eta``."""
    return ttt_linear(q, k, v, eta, batch_size=batch_size)


def multi_step_layer(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: Step, steps: int
) -> torch.Tensor:
    """Multi-step LMS as a sequence layer: DeltaProduct on ``steps`` copies of each token's
    pair, step ``beta``."""
    keys = k.unsqueeze(3).expand(*k.shape[:3], steps, k.shape[-1])
    values = v.unsqueeze(3).expand(*v.shape[:3], steps, v.shape[-1])
    return delta_product(q, keys, values, beta)


def read_after_context(
    layer: Layer, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike
) -> torch.Tensor:
    """``W_N x*`` of an online sequence ``layer(q, k, v)`` (``(B, H, T, ·)``) run over each
    task's context: query ``m`` is the ``m``-th head, its keys and values the context pairs and
    its query ``x*_m`` at the last position (zero before). Overflow and underflow are refused as
    for every estimator."""
    xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)

    def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        m = xq.shape[1]
        if m == 0:  # no query: an empty answer (no sequence to run)
            return yc.new_zeros(yc.shape[0], 0, yc.shape[-1])
        keys = xc.unsqueeze(1).expand(-1, m, -1, -1)
        values = yc.unsqueeze(1).expand(-1, m, -1, -1)
        queries = torch.zeros_like(keys)
        queries[:, :, -1] = xq
        return layer(queries, keys, values)[:, :, -1]

    out = check_finite_result(run(xc, yc, xq))
    return check_underflow(out, run, xc, yc, xq).reshape(shape)


@dataclass
class MomentumLMS:
    """LMS by heavy-ball momentum: ``e_i = W_{i−1} x_i − y_i``, ``M_i = μ M_{i−1} + e_i x_iᵀ``,
    ``W_i = W_{i−1} − β M_i`` — ``torch.optim.SGD(lr=β, momentum=μ)`` stepping ``W`` on
    ``½‖W x_i − y_i‖²`` one pair at a time (Polyak 1964); the momentum delta rule
    (:func:`attnreg.sequence.momentum_delta_rule`, ``p = k``, ``η = 1``) and Titans' linear
    memory without its decay. ``μ = 0`` is :class:`~attnreg.estimators.LMS`."""

    beta: float = 0.1
    momentum: float = 0.5

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)
        if not 0.0 <= self.momentum <= 1.0:
            raise ValueError(f"momentum: must lie in [0, 1], got {self.momentum}")

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` (module docstring)."""
        layer = partial(momentum_layer, beta=self.beta, momentum=self.momentum)
        return read_after_context(layer, x_ctx, y_ctx, x_query)


@dataclass
class MiniBatchLMS:
    """Mini-batch LMS: the context in consecutive batches of ``batch_size`` pairs (the last one
    shorter), each one gradient step of size ``eta`` on the batch's summed loss
    ``½ Σ_{i∈b} ‖W x_i − y_i‖²`` at the map the batch starts from, ``W ← W − η Σ_{i∈b}
    (W x_i − y_i) x_iᵀ`` — TTT-Linear's inner loop without its LayerNorm
    (:func:`attnreg.sequence.ttt_linear`; Sun et al. 2024). ``batch_size = 1`` is
    :class:`~attnreg.estimators.LMS` with ``β = eta``."""

    eta: float = 0.1
    batch_size: int = 4

    def __post_init__(self) -> None:
        check_positive("eta", self.eta)
        check_positive_int("batch_size", self.batch_size)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` (module docstring)."""
        layer = partial(mini_batch_layer, eta=self.eta, batch_size=self.batch_size)
        return read_after_context(layer, x_ctx, y_ctx, x_query)


@dataclass
class MultiStepLMS:
    """LMS taking ``steps`` steps of size ``beta`` on each pair before the next,
    ``W ← W − β (W x_i − y_i) x_iᵀ`` repeated — DeltaProduct with the token's ``n_h`` keys all
    ``x_i`` (:func:`attnreg.sequence.delta_product`; Siems et al. 2025): on one pair the steps
    compound to one step of size ``(1 − (1 − β‖x_i‖²)^steps) / ‖x_i‖²``. ``steps = 1`` is
    :class:`~attnreg.estimators.LMS`."""

    beta: float = 0.1
    steps: int = 2

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)
        check_positive_int("steps", self.steps)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` (module docstring)."""
        layer = partial(multi_step_layer, beta=self.beta, steps=self.steps)
        return read_after_context(layer, x_ctx, y_ctx, x_query)
