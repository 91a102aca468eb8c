"""The mesa layer: causal ridge regression inside an attention layer, by recursive least squares."""

from __future__ import annotations

import torch

from attnreg.core.attention import Attention
from attnreg.core.hooks import Hooked
from attnreg.core.results import check_finite_result
from attnreg.core.scaling import rescale_tasks
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike, check_positive


def rls_inverse(keys: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """``R_N = (Σ_{i≤N} k_i k_iᵀ + λI)⁻¹`` (``(B, d, d)``) by recursive least squares:
    ``R_0 = λ⁻¹ I``, ``R_t = R_{t−1} − (R_{t−1} k_t)(R_{t−1} k_t)ᵀ / (1 + k_tᵀ R_{t−1} k_t)``
    (Sherman–Morrison). ``lam``: one λ or one per task."""
    b, n, d = keys.shape
    lam_t = torch.as_tensor(lam, dtype=keys.dtype, device=keys.device).reshape(-1, 1, 1)
    inv = torch.eye(d, dtype=keys.dtype, device=keys.device).expand(b, d, d) / lam_t
    for t in range(n):
        k = keys[:, t].unsqueeze(-1)
        rk = inv @ k
        inv = inv - (rk @ rk.mT) / (1.0 + k.mT @ rk)
    return inv


def _recursion_unstable(keys: torch.Tensor, lam: torch.Tensor) -> bool:
    """Whether recursive least squares would lose more than half the digits: starting from
    ``R_0 = λ⁻¹I`` its updates cancel terms of size ``‖k‖²/λ``, so its relative error is about
    ``u · ‖K‖²/λ``; past ``√u`` the layer solves each prefix directly instead."""
    unit = torch.finfo(keys.dtype).eps / 2
    size = keys.square().sum((-2, -1), keepdim=True)
    return bool((unit * size > unit**0.5 * lam).any())


def _prefix_solutions(
    keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor, lam: torch.Tensor, n: int
) -> torch.Tensor:
    """``W_t q_t`` with ``W_t = (Σ_{i≤t} v_i k_iᵀ)(Σ_{i≤t} k_i k_iᵀ + λI)⁺`` for every position
    (``W_n`` past ``n``), by one symmetric pseudo-inverse per prefix (minimum norm for t < d)."""
    t_len, d = queries.shape[1], keys.shape[-1]
    steps = torch.arange(t_len, device=keys.device).clamp(max=n - 1)
    grams = torch.cumsum(keys[:, :n].unsqueeze(-1) * keys[:, :n].unsqueeze(-2), dim=1)[:, steps]
    cross = torch.cumsum(keys[:, :n].unsqueeze(-1) * values[:, :n].unsqueeze(-2), dim=1)[:, steps]
    eye = torch.eye(d, dtype=keys.dtype, device=keys.device)
    w_t = torch.linalg.pinv(grams + lam.unsqueeze(1) * eye, hermitian=True) @ cross
    return (queries.unsqueeze(-2) @ w_t).squeeze(-2)


class MesaLayer(Hooked):
    """von Oswald et al. (2023), "Uncovering mesa-optimization algorithms in Transformers"
    (arXiv 2309.05858). Keys ``k_t = x_t``, values ``v_t = y_t`` and queries ``q_t = x_t`` are read
    from the tokens; the output at every position is ``W_t q_t`` with

    ``W_t = argmin_W Σ_{i≤t} ‖W k_i − v_i‖² + λ‖W‖² = (Σ_{i≤t} v_i k_iᵀ) R_t``

    and ``R_t = (Σ_{i≤t} k_i k_iᵀ + λI)⁻¹`` computed by recursive least squares
    (:func:`rls_inverse`) — or, when λ is so small next to ``‖K‖²`` that the recursion would lose
    more than half the digits, by a symmetric pseudo-inverse per prefix. Only the first
    ``n_ctx`` tokens update ``W``; later (query) tokens read out with ``W_{n_ctx}``:
    ``W_N q = Σ_i v_i (k_iᵀ R_N q)`` — linear attention with the metric ``R_N``, computed by the
    attention core (hook points ``attn.hook_q`` …).
    """

    def __init__(self, lam: float = 1.0) -> None:
        super().__init__()
        self.lam = check_positive("lam", lam)
        self.attn = Attention("dot", "identity")

    def forward(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        queries: torch.Tensor,
        n_ctx: int | None = None,
    ) -> torch.Tensor:
        """``(B, T, d), (B, T, dv), (B, T', d) -> (B, T', dv)``: position t reads ``W_t``
        (``W_{n_ctx}`` past the context), updated by the recursion token by token. Each task is
        rescaled by powers of two as in :meth:`predict` (``W_t q_t`` is scale-equivariant)."""
        keys, values, rescaling = rescale_tasks(keys, values, self.lam)
        lam = torch.as_tensor(rescaling.ridge, dtype=keys.dtype).reshape(-1, 1, 1)
        b, t_len, d = keys.shape
        n = t_len if n_ctx is None else n_ctx
        if _recursion_unstable(keys, lam):
            out = rescaling.answer(
                queries, lambda q: _prefix_solutions(keys, values, q, lam, n), "forward"
            )
            return check_finite_result(out, "forward")

        def run(queries: torch.Tensor) -> torch.Tensor:
            inv = torch.eye(d, dtype=keys.dtype, device=keys.device).expand(b, d, d) / lam
            w = torch.zeros(b, values.shape[-1], d, dtype=keys.dtype, device=keys.device)
            outputs = []
            for t in range(queries.shape[1]):
                if t < n:
                    k, v = keys[:, t].unsqueeze(-1), values[:, t].unsqueeze(-1)
                    rk = inv @ k
                    inv = inv - (rk @ rk.mT) / (1.0 + k.mT @ rk)
                    w = w + (v - w @ k) @ (k.mT @ inv)
                outputs.append((w @ queries[:, t].unsqueeze(-1)).squeeze(-1))
            return torch.stack(outputs, dim=1)

        return check_finite_result(rescaling.answer(queries, run, "forward"), "forward")

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """``W_N x*`` for every query: ``R_N`` by the recursion over the context, then the core's
        linear attention ``x* R_N Xᵀ Y``. Each task is rescaled by powers of two when its
        magnitude would over- or underflow (ridge on ``X/s`` is ridge with ``λ/s²``): the
        answer is the given problem's at any magnitude, or a ``ValueError`` where it lies
        outside the float range (:class:`attnreg.estimators.Ridge`'s contract)."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        xc, yc, rescaling = rescale_tasks(xc, yc, self.lam)
        lam = torch.as_tensor(rescaling.ridge, dtype=xc.dtype).reshape(-1, 1, 1)
        if _recursion_unstable(xc, lam):
            eye = torch.eye(xc.shape[-1], dtype=xc.dtype, device=xc.device)
            metric = torch.linalg.pinv(xc.mT @ xc + lam * eye, hermitian=True)
        else:
            metric = rls_inverse(xc, rescaling.ridge)
        out = rescaling.answer(xq, lambda q: self.attn(q, xc, yc, metric=metric))
        return check_finite_result(out).reshape(shape)
