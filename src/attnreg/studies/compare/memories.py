"""Slow and fast memory of the OLS-Transformer, separated by swapping one of them.

The compare study's section ``memories``. The constructed OLS-Transformer (Tan & Zhao, arXiv
2604.13656; :class:`attnreg.OLSTransformer`, ``covariance="mean"``, no ridge) fitted on a
context ``(X, Y)`` holds

* slow memory — the weights ``W_Q = W_K = W_V = L`` (``L Lᵀ = S⁻¹``, ``S = XᵀX/N``) and
  ``W_P = P = Lᵀ XᵀY / N``;
* fast memory — the context tokens ``X`` its queries attend to (keys ``X L``, values ``X L``).

Its output on queries ``X*`` is ``(X* L)(X L)ᵀ(X L) P / N``. Each data mode's training rows are
split by a seeded permutation into two disjoint contexts ``A`` and ``B`` of ``⌊N/2⌋`` rows
each (scenario ``"same task"``); on the synthetic mode also ``"different w"``: ``B``'s inputs
with new targets ``y = xᵀw' + σε`` from a fresh ``w' ~ N(0, I)`` (``σ`` = ``config.noise``).
For slow ∈ {A, B} and fast ∈ {A, B} the layer fitted on the slow context gets the fast
context's tokens (:func:`swap_fast_memory`), so its output is

``ŷ* = X* S_slow⁻¹ S_fast β̂_slow``   (``β̂_slow`` the OLS coefficients of the slow context),

(pseudo-inverses when a half has fewer rows than features) and is measured against OLS fitted
on B (and on A) on the test rows as queries: MSE and relative MSE
``mean((ŷ − ŷ_OLS)²) / mean(ŷ_OLS²)``. Also reported: ``‖S_slow⁻¹ S_fast − I‖_F / √d``, the
part of the output the fast memory changes. The targets enter only through ``P``: the slow
memory carries them; the fast memory carries the input geometry ``S_fast``.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import numpy as np
import torch

from attnreg.constructions import OLSTransformer
from attnreg.data.regression import RegressionData
from attnreg.estimators import OLS
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.metrics import mse

SECTION = "memories"
SEED_TAG = 3  # the section's stream: numpy SeedSequence([config.seed, SEED_TAG])
QUESTION = "OLS-Transformer: which memory holds the targets, slow (weights) or fast (context)?"


def fit_layer(x: torch.Tensor, y: torch.Tensor) -> OLSTransformer:
    """The OLS-Transformer (``covariance="mean"``) fitted on the context ``X (N, d)``, ``Y``."""
    return OLSTransformer(covariance="mean").fit(x, y)


def swap_fast_memory(layer: OLSTransformer, x_ctx: torch.Tensor) -> OLSTransformer:
    """A copy of the fitted ``layer`` with its slow weights ``L, P`` and its fast memory (the
    context tokens, ``(N, d)`` or ``(1, N, d)``) replaced by ``x_ctx``; the keys ``X W_K`` are
    recomputed on the next forward pass. The attention's ``1/N`` stays that of the fit, so
    ``x_ctx`` should have as many rows as the fitted context."""
    swapped = copy.deepcopy(layer)
    x = x_ctx if x_ctx.ndim == 3 else x_ctx.unsqueeze(0)
    swapped.context = swapped.rescaling.queries(x.to(layer.context.dtype))
    swapped.keys = None
    return swapped


def swapped_prediction(
    slow: tuple[torch.Tensor, torch.Tensor], fast: torch.Tensor, x_query: torch.Tensor
) -> torch.Tensor:
    """``X* S_slow⁻¹ S_fast β̂_slow`` through the layer: fit on ``slow = (X, Y)``, swap the fast
    memory for ``fast``, run the queries ``(M, d)`` → ``(M, dy)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rank warnings of a context with fewer rows than d
        layer = swap_fast_memory(fit_layer(*slow), fast)
        with torch.no_grad():
            return layer(x_query)[0]


def contexts(
    data: RegressionData, noise: float, rng: np.random.Generator
) -> dict[str, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """Per scenario the contexts ``{"A": (X, Y), "B": (X, Y)}`` (module docstring)."""
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    half = x.shape[0] // 2
    perm = torch.as_tensor(rng.permutation(x.shape[0]))
    a, b = perm[:half], perm[half : 2 * half]
    out = {"same task": {"A": (x[a], y[a]), "B": (x[b], y[b])}}
    if data.true_weights is not None:
        w_new = rng.standard_normal(data.d)
        xb = x[b].numpy()
        yb = xb @ w_new + noise * rng.standard_normal(half)
        out["different w"] = {"A": (x[a], y[a]), "B": (x[b], torch.from_numpy(yb[:, None]))}
    return out


def _rel(pred: torch.Tensor, ref: torch.Tensor) -> float:
    """``mean((ŷ − ŷ_ref)²) / mean(ŷ_ref²)``."""
    return mse(pred, ref) / float((ref**2).mean())


def measure_mode(
    data: RegressionData, cfg: CompareConfig, rng: np.random.Generator
) -> list[dict[str, Any]]:
    """Four rows (slow × fast) per scenario on one data mode."""
    xq = torch.from_numpy(data.x_test)
    rows = []
    for scenario, ctx in contexts(data, cfg.noise, rng).items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rank warnings of a context with fewer rows than d
            ols = {k: OLS().predict(xc, yc, xq) for k, (xc, yc) in ctx.items()}
        cov = {k: xc.mT @ xc / xc.shape[0] for k, (xc, _) in ctx.items()}
        d = data.d
        for slow in ("A", "B"):
            for fast in ("A", "B"):
                pred = swapped_prediction(ctx[slow], ctx[fast][0], xq)
                mix = torch.linalg.pinv(cov[slow], hermitian=True) @ cov[fast]
                rows.append(
                    {
                        "section": SECTION,
                        "data": data.name,
                        "scenario": scenario,
                        "slow": slow,
                        "fast": fast,
                        "n_context": ctx[slow][0].shape[0],
                        "rel_mse_to_ols_b": _rel(pred, ols["B"]),
                        "rel_mse_to_ols_a": _rel(pred, ols["A"]),
                        "mse_to_ols_b": mse(pred, ols["B"]),
                        "fast_mismatch": float(
                            (mix - torch.eye(d, dtype=mix.dtype)).norm() / math.sqrt(d)
                        ),
                    }
                )
    return rows


def _pick(rows: list[dict[str, Any]], mode: str, scenario: str, slow: str, fast: str) -> Any:
    return next(
        r
        for r in rows
        if (r["data"], r["scenario"], r["slow"], r["fast"]) == (mode, scenario, slow, fast)
    )


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    table = []
    for mode, scenario in dict.fromkeys((r["data"], r["scenario"]) for r in rows):
        ab = _pick(rows, mode, scenario, "A", "B")
        ba = _pick(rows, mode, scenario, "B", "A")
        aa = _pick(rows, mode, scenario, "A", "A")
        table.append(
            [
                mode,
                scenario,
                float(ab["rel_mse_to_ols_b"]),
                float(ba["rel_mse_to_ols_b"]),
                float(aa["rel_mse_to_ols_b"]),
                float(ab["fast_mismatch"]),
            ]
        )
    note = ""
    diff = [r for r in rows if r["scenario"] == "different w"]
    if diff:
        mode = diff[0]["data"]
        ab = _pick(rows, mode, "different w", "A", "B")
        ba = _pick(rows, mode, "different w", "B", "A")
        holder = "slow" if ba["mse_to_ols_b"] < ab["mse_to_ols_b"] else "fast"
        note = (
            f"When B's targets come from a different w, the predictions follow the {holder} "
            f"memory (relative MSE {ba['rel_mse_to_ols_b']:.3g} with B's weights and A's context, "
            f"{ab['rel_mse_to_ols_b']:.3g} with A's weights and B's context): the targets are in "
            "W_P = P, the context brings only its covariance, ŷ = X* S_slow⁻¹ S_fast β̂_slow."
        )
    return summary_table(
        "Relative MSE (/ mean ŷ_OLS,B²) of the swapped layer's test predictions to OLS fitted "
        "on B; A and B are disjoint halves of the training rows.",
        [
            "data",
            "scenario",
            "slow A + fast B",
            "slow B + fast A",
            "OLS on A",
            "‖S_slow⁻¹S_fast − I‖_F/√d",
        ],
        table,
        note=note,
    )


def figure(rows: list[dict[str, Any]]) -> FigureRecord:
    """Grouped bars: relative MSE to OLS on B (log scale) per scenario for slow A + fast A
    (= OLS on A), slow A + fast B and slow B + fast A (slow B + fast B is OLS on B: 0)."""
    from attnreg.output import new_figure

    groups = list(dict.fromkeys((r["data"], r["scenario"]) for r in rows))
    pairs = [("A", "A"), ("A", "B"), ("B", "A")]
    fig, ax = new_figure(figsize=(1.8 * len(groups) + 3, 3.6), layout="constrained")
    idx = np.arange(len(groups))
    width = 0.27
    for i, (slow, fast) in enumerate(pairs):
        values = [_pick(rows, m, s, slow, fast)["rel_mse_to_ols_b"] for m, s in groups]
        label = f"slow {slow} + fast {fast}" + (" (= OLS on A)" if slow == fast else "")
        ax.bar(idx + (i - 1) * width, values, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(idx, [f"{m}\n{s}" for m, s in groups], fontsize=8)
    ax.set_ylabel("relative MSE to OLS on B")
    ax.legend(fontsize=9)
    ax.set_title("OLS-Transformer: slow memory (L, P) and fast memory (context) swapped")
    return FigureRecord(
        name="compare_memories",
        figure=fig,
        caption=(
            "The constructed OLS-Transformer with its weights from one half of the training rows "
            "and its context from the other, against OLS fitted on B (slow B + fast B is OLS on "
            "B exactly; compare config, first seed)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The memories section (module docstring); empty when ``cfg.memories`` is off."""
    if not cfg.memories or not datasets:
        return Section()
    rng = np.random.default_rng([cfg.seed, SEED_TAG])
    rows = [row for data in datasets.values() for row in measure_mode(data, cfg, rng)]
    return Section(rows=rows, summary={QUESTION: _summary(rows)}, figures=[figure(rows)])
