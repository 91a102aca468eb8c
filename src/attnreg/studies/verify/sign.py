"""What the literal von Oswald construction returns, measured: the query's y-entry after one
layer of the summary "Self-Attention Mimicking Gradient Descent" (tokens ``(y_i, x_i)``, query
``(−W0 x_q, x_q)``, context sum not divided by N) is ``−(W0 + ΔW0) x_q`` with
``ΔW0 = η Σ_i (y_i − W0 x_i) x_iᵀ``; so the prediction (minus that entry) is the GD-updated
``W1 x_q`` and the summary's closing ``(W0 − ΔW0) x`` has the sign of ``ΔW0`` reversed."""

from __future__ import annotations

import numpy as np
import torch

from attnreg.constructions import VonOswaldSummaryLayer


def literal_sign_check(seed: int, d: int = 3, dy: int = 2, n: int = 7, eta: float = 0.1) -> str:
    """One task (float64, seeded): the y-entry's distance to ``−(W0 + ΔW0) x_q`` and to the
    summary's ``−(W0 − ΔW0) x_q``, each relative to ``‖ΔW0 x_q‖``, as one sentence."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, dy))
    xq, w0 = rng.standard_normal((1, d)), rng.standard_normal((dy, d))
    delta = eta * (y - x @ w0.T).T @ x  # η Σ_i (y_i − W0 x_i) x_iᵀ, by numpy
    layer = VonOswaldSummaryLayer(d, dy, eta=eta, w0=torch.from_numpy(w0))
    token = layer.query_tokens(*(torch.from_numpy(a) for a in (x, y, xq)))
    y_entry = token[0, :dy].numpy()
    scale = np.linalg.norm(delta @ xq[0])
    plus = np.linalg.norm(y_entry + (w0 + delta) @ xq[0]) / scale
    minus = np.linalg.norm(y_entry + (w0 - delta) @ xq[0]) / scale
    return (
        f"after one layer the query's y-entry is −(W0 + ΔW0) x_q (relative distance {plus:.1e}; "
        f"d = {d}, dy = {dy}, N = {n}, W0 ≠ 0), so the prediction is the GD step W1 x_q; the "
        f"summary's closing (W0 − ΔW0) x is off by {minus:.2f} ‖ΔW0 x_q‖ (sign of ΔW0 reversed)"
    )
