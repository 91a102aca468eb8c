"""The mesa layer: causal ridge regression inside an attention layer, by recursive least squares."""

from __future__ import annotations

import torch

from attnreg.constructions._cache import RecordsAttention
from attnreg.core.validation import ArrayLike, check_positive, check_tasks


class MesaLayer(RecordsAttention):
    """von Oswald et al. (2023), "Uncovering mesa-optimization algorithms in Transformers"
    (arXiv 2309.05858). Keys ``k_t = x_t``, values ``v_t = y_t`` and queries ``q_t = x_t`` are read
    from the tokens; the output at every position is ``W_t q_t`` with

    ``W_t = argmin_W Σ_{i≤t} ‖W k_i − v_i‖² + λ‖W‖²``

    computed by recursive least squares: ``R_0 = λ⁻¹ I``,
    ``R_t = R_{t−1} − (R_{t−1} k_t)(R_{t−1} k_t)ᵀ / (1 + k_tᵀ R_{t−1} k_t)`` (Sherman–Morrison),
    ``W_t = W_{t−1} + (v_t − W_{t−1} k_t) k_tᵀ R_t``. Only the first ``n_ctx`` tokens update
    ``W``; later (query) tokens read out with ``W_{n_ctx}``.
    """

    def __init__(self, lam: float = 1.0) -> None:
        super().__init__()
        self.lam = check_positive("lam", lam)

    def forward(
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        queries: torch.Tensor,
        n_ctx: int | None = None,
    ) -> torch.Tensor:
        """``(B, T, d), (B, T, dv), (B, T', d) -> (B, T', dv)``; position t reads ``W_t``
        (``W_{n_ctx}`` past the context)."""
        b, t_len, d = keys.shape
        n = t_len if n_ctx is None else n_ctx
        inv = torch.eye(d, dtype=keys.dtype, device=keys.device).expand(b, d, d) / self.lam
        w = torch.zeros(b, values.shape[-1], d, dtype=keys.dtype, device=keys.device)
        outputs = []
        for t in range(queries.shape[1]):
            if t < n:
                k, v = keys[:, t].unsqueeze(-1), values[:, t].unsqueeze(-1)
                rk = inv @ k
                inv = inv - (rk @ rk.mT) / (1.0 + k.mT @ rk)
                w = w + (v - w @ k) @ (k.mT @ inv)
            outputs.append((w @ queries[:, t].unsqueeze(-1)).squeeze(-1))
        if self.record:
            self.cache["weights"] = w.detach()
        return torch.stack(outputs, dim=1)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """Run the layer over the context tokens, then read the queries out with ``W_N``."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        n = xc.shape[1]
        keys = torch.cat([xc, xq], dim=1)
        values = torch.cat(
            [yc, torch.zeros(yc.shape[0], xq.shape[1], yc.shape[2], dtype=yc.dtype)], dim=1
        )
        return self(keys, values, keys, n_ctx=n)[:, n:].reshape(shape)
