"""Online and causal estimators: least mean squares (the delta rule over the context) and the
mesa layer's causal ridge regression at every prefix."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, check_positive
from attnreg.estimators.least_squares import Ridge
from attnreg.sequence import delta_rule

RECURRENT_BELOW = 64  # LMS runs the delta rule token by token up to this many tokens


@dataclass
class LMS:
    """Least mean squares (Widrow & Hoff 1960), the online estimator: one pass over the context
    in order, ``W_i = W_{i−1} + β (y_i − W_{i−1} x_i) x_iᵀ`` from ``W_0 = 0``; ``ŷ* = W_N x*``.

    It is the delta rule with keys ``x_i``, values ``y_i`` and step ``β``
    (:func:`attnreg.sequence.delta_rule`, computed by its chunked form: DeltaNet with
    ``W_Q = W_K = I`` *is* LMS). Stable when ``β ‖x_i‖² ≤ 2`` for every i. Unlike the other
    estimators its answer depends on the order of the context pairs.
    """

    beta: float = 0.1

    def __post_init__(self) -> None:
        check_positive("beta", self.beta)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` after one LMS pass over each task's context. The queries are read out as
        tokens with zero key and value written after the context (a zero key leaves the state
        unchanged)."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        n, m = xc.shape[1], xq.shape[1]
        mode = "recurrent" if xc.shape[1] + m <= RECURRENT_BELOW else "chunk"  # the faster one

        def run(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
            keys = torch.cat([xc, torch.zeros_like(xq)], dim=1).unsqueeze(1)
            zeros = yc.new_zeros(yc.shape[0], m, yc.shape[-1])
            values = torch.cat([yc, zeros], dim=1).unsqueeze(1)
            queries = torch.cat([torch.zeros_like(xc), xq], dim=1).unsqueeze(1)
            return delta_rule(queries, keys, values, self.beta, mode=mode)[:, 0, n:]

        out = check_finite_result(run(xc, yc, xq))
        return check_underflow(out, run, xc, yc, xq).reshape(shape)


def causal_ridge(
    keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor, lam: float
) -> torch.Tensor:
    """``o_t = W_t q_t`` with ``W_t = argmin Σ_{i≤t} ‖W k_i − v_i‖² + λ‖W‖²`` for every t, by a
    direct batched solve per prefix: ``W_t = (Σ_{i≤t} v_i k_iᵀ)(Σ_{i≤t} k_i k_iᵀ + λI)⁻¹``.
    """
    check_positive("lam", lam)
    outer = torch.cumsum(keys.unsqueeze(-1) * keys.unsqueeze(-2), dim=1)
    eye = torch.eye(keys.shape[-1], dtype=keys.dtype, device=keys.device)
    cross = torch.cumsum(keys.unsqueeze(-1) * values.unsqueeze(-2), dim=1)  # Σ k vᵀ
    # W_tᵀ = (S_t + λI)⁻¹ Σ k vᵀ ; o_t = W_t q_t = (W_tᵀ)ᵀ q_t
    wt = torch.linalg.solve(outer + lam * eye, cross)
    return (queries.unsqueeze(-2) @ wt).squeeze(-2)


@dataclass
class Mesa:
    """The mesa layer's estimator (von Oswald et al. 2023, arXiv 2309.05858): causal ridge
    regression. ``predict`` fits ``W_N`` on the whole context (= ridge with λ, with
    :class:`Ridge`'s contract at extreme magnitudes); :meth:`causal` returns ``W_t q_t`` at
    every prefix t.
    """

    lam: float = 1.0

    def __post_init__(self) -> None:
        self.lam = check_positive("lam", self.lam)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Queries predicted with the ridge solution on the full context."""
        return Ridge(self.lam).predict(x_ctx, y_ctx, x_query)

    def causal(self, keys: ArrayLike, values: ArrayLike, queries: ArrayLike) -> torch.Tensor:
        """``(B, T, d), (B, T, dv), (B, T, d) -> (B, T, dv)``: causal ridge at every prefix."""
        k, v, q, _ = check_tasks(keys, values, queries)
        if q.shape[1] != k.shape[1]:
            raise ValueError(
                f"queries must have one row per key: keys {tuple(k.shape)}, "
                f"queries {tuple(q.shape)}"
            )
        return causal_ridge(k, v, q, self.lam)
