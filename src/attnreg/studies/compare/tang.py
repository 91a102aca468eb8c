"""Tang's remaining claims: whitening handles correlated features; √d_k handles only scale.

The compare study's section ``tang``, two measurements.

(a) Retrieval of correlated patterns. ``N`` patterns ``x_μ ~ N(0, Σ_ρ)`` in ``d`` dimensions
with the equicorrelated covariance ``Σ_ρ = (1 − ρ) I + ρ 11ᵀ`` (drawn as ``x = √(1−ρ) z +
√ρ c 1``, ``z ~ N(0, I_d)``, ``c ~ N(0, 1)``), stored as keys and values of one memory
(auto-association, Millidge et al. 2022's ``retrieve(q) = Xᵀ sep(sim(X, q))``). Each stored
pattern is queried once with ``q = x_μ + σ ε`` (``σ`` = ``config.tang_query_noise``,
``ε ~ N(0, I_d)``). Similarities: plain dot ``x_νᵀ q`` and whitened dot ``x_νᵀ M q`` with
``M = (XᵀX)⁺`` (:func:`attnreg.core.whitening.whitening_matrix`, ``M = L Lᵀ``). Separations:
identity (``w = sim``) and softmax (``w = softmax(β sim)`` with ``β = config.tang_beta / s̄``,
``s̄`` the memory's mean self-similarity ``mean_μ x_μᵀ M x_μ`` — the same effective
temperature for both similarities). A query is retrieved when the stored pattern with the
largest cosine to the retrieved vector ``r = Σ_ν w_ν x_ν`` is the queried one (scale-free, so the
unnormalised identity separation is judged on direction). Accuracy is over
``config.tang_memories`` memories × ``N`` queries per ``(ρ, N)``; a combination fails at the
first ``ρ`` of ``config.tang_rhos`` with accuracy below ``config.tang_accuracy``.

(b) Scale vs correlation in attention regression. Inputs ``x ~ N(0, D R D)`` in
``d = config.tang_scale_d`` dimensions, four scenarios: ``iid`` (``D = R = I``), ``unequal
variances`` (variances geometric from ``1/√r`` to ``√r``, ``r`` = ``config.tang_variance_ratio``,
``R = I``), ``correlated`` (``D = I``, ``R`` equicorrelated with ``ρ`` = ``config.tang_rho``),
``both``. Targets ``y = Σ_j u_j x_j / D_jj + σ ε`` (``u ~ N(0, I_d)``, ``σ`` =
``config.noise``); ``config.tang_scale_n_train`` training and ``config.n_test`` test rows, the
same standard-normal draws in every scenario (they differ only in ``D`` and ``R``). The inputs
are preprocessed by training statistics: ``none``; ``standardised`` (per feature
``(x − μ_j)/σ_j``); ``whitened`` (``(x − μ) S^{-1/2}``, ZCA, ``S`` the training covariance).
Two attention regressors with the inputs as queries and keys, the targets as values and no
learned projection (``d_k = d``):

* identity separation (regression-like), ``ŷ* = c · x̃*ᵀ X̃ᵀ Y / N`` with ``c = 1`` and with the
  best global scale ``c`` (least squares on a validation split of the training rows);
* softmax, ``ŷ* = softmax(β x̃*ᵀ X̃ᵀ) Y`` with ``β = 1/√d_k`` as written (Vaswani et al. 2017)
  and with the best single ``β = m/√d_k`` on the validation split (``m`` in
  ``config.beta_multipliers``).

No global scale can do better than the validated one. The identity operator is
``ŷ* = c x*ᵀ Σ̂ w`` with ``Σ̂`` the preprocessed inputs' covariance, and for Gaussian inputs the
softmax average tilts the input distribution, ``E_w[x] ≈ β Σ x*``, so ``ŷ ≈ β x*ᵀ Σ w``: one
scalar can undo a global scale of ``Σ`` but not unequal variances or correlations;
standardising makes the variances equal, whitening makes ``Σ = I``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attnreg.core.whitening import whitening_matrix
from attnreg.data.regression import RegressionData
from attnreg.estimators import Ridge
from attnreg.models.regressors import symmetric_whitening
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.density import validated_beta, validation_split
from attnreg.studies.compare.metrics import mse

SECTION = "tang"
SEED_TAG = 4  # the section's stream: numpy SeedSequence([config.seed, SEED_TAG, part])
QUESTION_A = "Tang: does whitening keep correlated patterns apart where the dot product fails?"
QUESTION_B = "Tang: does 1/√d_k scaling handle feature scale and correlation?"
SIMILARITIES = ("dot", "whitened dot")
SEPARATIONS = ("identity", "softmax")
SCENARIOS = ("iid", "unequal variances", "correlated", "both")
PREPROCESSING = ("none", "standardised", "whitened")


# ----------------------------------------------------------------------------- (a) retrieval
def correlated_patterns(
    rng: np.random.Generator, memories: int, n: int, d: int, rho: float
) -> torch.Tensor:
    """``(memories, n, d)`` patterns ``x = √(1−ρ) z + √ρ c 1`` (covariance ``Σ_ρ``)."""
    z = rng.standard_normal((memories, n, d))
    c = rng.standard_normal((memories, n, 1))
    return torch.from_numpy(math.sqrt(1 - rho) * z + math.sqrt(rho) * c)


def retrieval_accuracy(
    patterns: torch.Tensor,
    queries: torch.Tensor,
    similarity: str,
    separation: str,
    beta: float,
) -> float:
    """Fraction of queries ``queries[:, μ]`` (one per stored pattern ``patterns[:, μ]``,
    ``(T, N, d)`` each) whose retrieval ``r = Xᵀ sep(sim(X, q))`` has its largest cosine with
    the queried pattern (module docstring; ``beta`` in units of the mean self-similarity)."""
    x, q = patterns, queries
    if similarity == "dot":
        metric = torch.eye(x.shape[-1], dtype=x.dtype).expand(x.shape[0], -1, -1)
    elif similarity == "whitened dot":
        lmat = whitening_matrix(x, warn=False).matrix
        metric = lmat @ lmat.mT
    else:
        raise ValueError(f"similarity: unknown value {similarity!r}; valid: {SIMILARITIES}")
    scores = q @ metric @ x.mT  # (T, N queries, N patterns)
    if separation == "softmax":
        self_sim = torch.einsum("tnd,tde,tne->t", x, metric, x) / x.shape[1]
        weights = torch.softmax(beta / self_sim[:, None, None] * scores, dim=-1)
    elif separation == "identity":
        weights = scores
    else:
        raise ValueError(f"separation: unknown value {separation!r}; valid: {SEPARATIONS}")
    r = weights @ x
    cos = (r @ x.mT) / (r.norm(dim=-1, keepdim=True) * x.norm(dim=-1)[:, None, :]).clamp_min(
        torch.finfo(x.dtype).tiny
    )
    target = torch.arange(x.shape[1])
    return float((cos.argmax(-1) == target).double().mean())


def retrieval_rows(cfg: CompareConfig) -> list[dict[str, Any]]:
    """One row per ``N`` × ``ρ`` × similarity × separation (part (a))."""
    rows = []
    for n in cfg.tang_patterns:
        for i, rho in enumerate(cfg.tang_rhos):
            rng = np.random.default_rng([cfg.seed, SEED_TAG, 0, int(n), i])
            x = correlated_patterns(rng, cfg.tang_memories, int(n), cfg.tang_d, rho)
            q = x + cfg.tang_query_noise * torch.from_numpy(rng.standard_normal(tuple(x.shape)))
            for sim in SIMILARITIES:
                for sep in SEPARATIONS:
                    rows.append(
                        {
                            "section": SECTION,
                            "part": "retrieval",
                            "d": cfg.tang_d,
                            "n_patterns": int(n),
                            "rho": float(rho),
                            "similarity": sim,
                            "separation": sep,
                            "accuracy": retrieval_accuracy(x, q, sim, sep, cfg.tang_beta),
                            "queries": cfg.tang_memories * int(n),
                        }
                    )
    return rows


def failure_rho(rows: list[dict[str, Any]], threshold: float) -> float | None:
    """The smallest ``ρ`` of the rows (one combination) with accuracy below ``threshold``."""
    failed = [r["rho"] for r in rows if r["accuracy"] < threshold]
    return min(failed) if failed else None


def _summary_a(rows: list[dict[str, Any]], cfg: CompareConfig) -> str:
    parts = []
    for n in cfg.tang_patterns:
        cells = []
        for sim in SIMILARITIES:
            for sep in SEPARATIONS:
                sel = [
                    r
                    for r in rows
                    if (r["n_patterns"], r["similarity"], r["separation"]) == (n, sim, sep)
                ]
                rho = failure_rho(sel, cfg.tang_accuracy)
                last = max(sel, key=lambda r: r["rho"])
                first = min(sel, key=lambda r: r["rho"])
                where = f"fails at ρ = {rho:g}" if rho is not None else "never fails"
                cells.append(
                    f"{sim} × {sep} {where} (accuracy {first['accuracy']:.3f} at ρ = "
                    f"{first['rho']:g}, {last['accuracy']:.3f} at ρ = {last['rho']:g})"
                )
        note = ""
        if n >= cfg.tang_d:
            note = (
                " (N ≥ d: the whitened scores X(XᵀX)⁺q = e_μ + X(XᵀX)⁺ε amplify the query "
                "noise by the inverse of X's smallest singular value)"
            )
        parts.append(f"N = {n}{note}: " + "; ".join(cells))
    return (
        f"retrieval of N equicorrelated Gaussian patterns in d = {cfg.tang_d} from queries with "
        f"noise σ = {cfg.tang_query_noise:g} per coordinate, {cfg.tang_memories} memories per "
        f"cell; 'fails' = first ρ with accuracy < {cfg.tang_accuracy:g} — " + " | ".join(parts)
    )


# ------------------------------------------------------------------- (b) scale vs correlation
def scenario_data(
    scenario: str, cfg: CompareConfig, draws: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> RegressionData:
    """The scenario's training and test rows (module docstring, part (b)) from the common
    draws ``(z (n, d), ε (n,), u (d,))``: ``x = z Cᵀ`` with ``C Cᵀ = D R D``, ``y = (x / D) u +
    σ ε``. Every scenario uses the same draws, so they differ only in ``D`` and ``R``."""
    z, eps, u = draws
    d = z.shape[1]
    ratio = cfg.tang_variance_ratio if scenario in ("unequal variances", "both") else 1.0
    rho = cfg.tang_rho if scenario in ("correlated", "both") else 0.0
    sd = np.sqrt(ratio ** np.linspace(-0.5, 0.5, d))
    sigma = ((1 - rho) * np.eye(d) + rho * np.ones((d, d))) * np.outer(sd, sd)
    x = z @ np.linalg.cholesky(sigma).T
    y = (x / sd) @ u + cfg.noise * eps
    n = cfg.tang_scale_n_train
    return RegressionData(
        scenario,
        x[:n],
        y[:n, None],
        x[n:],
        y[n:, None],
        [f"x{i}" for i in range(d)],
        true_weights=u / sd,
        covariance=sigma,
    )


def preprocess(kind: str, x_train: torch.Tensor, *others: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``x_train`` and ``others`` preprocessed by the training rows' statistics: ``none``,
    ``standardised`` (``(x − μ)/σ`` per feature) or ``whitened`` (``(x − μ) S^{-1/2}``,
    :func:`attnreg.models.regressors.symmetric_whitening` of the centred rows)."""
    if kind == "none":
        return (x_train, *others)
    mu = x_train.mean(0)
    if kind == "standardised":
        sd = x_train.std(0, unbiased=False)
        return tuple((t - mu) / sd for t in (x_train, *others))
    if kind == "whitened":
        lmat = symmetric_whitening((x_train - mu)[None])[0]
        return tuple((t - mu) @ lmat for t in (x_train, *others))
    raise ValueError(f"kind: unknown value {kind!r}; valid: {PREPROCESSING}")


def softmax_regression(
    x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor, beta: float
) -> torch.Tensor:
    """``softmax(β X* Xᵀ) Y``: ``(N, d)``, ``(N, dy)``, ``(M, d)`` → ``(M, dy)``."""
    return torch.softmax(beta * x_query @ x_ctx.mT, dim=-1) @ y_ctx


def linear_regression_attention(
    x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """Regression-like attention without projections, ``c · X* Xᵀ Y / N`` → ``(M, dy)``."""
    return scale * x_query @ (x_ctx.mT @ y_ctx) / x_ctx.shape[0]


def best_scale(x: torch.Tensor, y: torch.Tensor, fit: Any, val: Any) -> float:
    """The least-squares global scale ``c* = ⟨p, y_val⟩ / ⟨p, p⟩`` of
    ``p = linear_regression_attention(X_fit, Y_fit, X_val)`` on the validation rows."""
    p = linear_regression_attention(x[fit], y[fit], x[val])
    return float((p * y[val]).sum() / (p * p).sum())


def scaling_rows(cfg: CompareConfig) -> list[dict[str, Any]]:
    """Rows of part (b): scenario × preprocessing × (separation, scale rule)."""
    rng = np.random.default_rng([cfg.seed, SEED_TAG, 1])
    d, n = cfg.tang_scale_d, cfg.tang_scale_n_train + cfg.n_test
    draws = (rng.standard_normal((n, d)), rng.standard_normal(n), rng.standard_normal(d))
    rows = []
    for scenario in SCENARIOS:
        data = scenario_data(scenario, cfg, draws)
        x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
        xt, yt = torch.from_numpy(data.x_test), torch.from_numpy(data.y_test)
        ridge = mse(Ridge(cfg.ridge).predict(x, y, xt), yt)
        split = [cfg.seed, SEED_TAG, 2]  # one validation split for every cell
        fit, val = validation_split(
            x.shape[0], cfg.validation_fraction, np.random.default_rng(split)
        )
        for kind in PREPROCESSING:
            xp, xtp = preprocess(kind, x, xt)
            beta, _ = validated_beta(
                xp,
                y,
                softmax_regression,
                cfg.beta_multipliers,
                cfg.validation_fraction,
                np.random.default_rng(split),
            )
            cells = (
                ("identity", "1/N", 1.0, linear_regression_attention),
                ("identity", "validated", best_scale(xp, y, fit, val), linear_regression_attention),
                ("softmax", "1/sqrt(d_k)", 1 / math.sqrt(d), softmax_regression),
                ("softmax", "validated", beta, softmax_regression),
            )
            for separation, rule, value, fn in cells:
                test = mse(fn(xp, y, xtp, value), yt)
                rows.append(
                    {
                        "section": SECTION,
                        "part": "scaling",
                        "scenario": scenario,
                        "preprocessing": kind,
                        "separation": separation,
                        "scale_rule": rule,
                        "scale": value,
                        "test_mse": test,
                        "ridge_test_mse": ridge,
                        "test_mse_vs_ridge": test / ridge,
                    }
                )
    return rows


def _get(rows: list[dict[str, Any]], scenario: str, kind: str, sep: str, rule: str) -> float:
    return float(
        next(
            r["test_mse"]
            for r in rows
            if (r["scenario"], r["preprocessing"], r["separation"], r["scale_rule"])
            == (scenario, kind, sep, rule)
        )
    )


def _summary_b(rows: list[dict[str, Any]], cfg: CompareConfig) -> str:
    parts = []
    ratios: dict[str, list[float]] = {kind: [] for kind in PREPROCESSING}
    soft: dict[str, list[float]] = {kind: [] for kind in PREPROCESSING}
    for r in rows:
        if r["separation"] == "identity" and r["scale_rule"] == "validated":
            ratios[r["preprocessing"]].append(r["test_mse_vs_ridge"])
        if r["separation"] == "softmax" and r["scale_rule"] == "1/sqrt(d_k)":
            soft[r["preprocessing"]].append(r["test_mse_vs_ridge"])
    for scenario in SCENARIOS:
        sel = [r for r in rows if r["scenario"] == scenario]
        cells = []
        for sep, rules in (("identity", ("validated",)), ("softmax", ("1/sqrt(d_k)", "validated"))):
            vals = ", ".join(
                f"{kind} " + " / ".join(f"{_get(sel, scenario, kind, sep, r):.3f}" for r in rules)
                for kind in PREPROCESSING
            )
            cells.append(f"{sep}: {vals}")
        parts.append(f"{scenario} (ridge {sel[0]['ridge_test_mse']:.3f}) — " + "; ".join(cells))
    return (
        f"attention regression on d_k = {cfg.tang_scale_d} inputs, {cfg.tang_scale_n_train} "
        "training rows, test MSE per preprocessing — identity separation c·X*XᵀY/N with the "
        "best global scale c; softmax(β X*Xᵀ)Y with β = 1/√d_k / the best global β (validation "
        f"split); variance ratio {cfg.tang_variance_ratio:g}, correlation ρ = {cfg.tang_rho:g}: "
        + " | ".join(parts)
        + ". Test MSE / ridge's over the four scenarios, identity with the best scale: "
        + ", ".join(
            f"{kind} {min(ratios[kind]):.2f}–{max(ratios[kind]):.2f}" for kind in PREPROCESSING
        )
        + "; softmax with β = 1/√d_k: "
        + ", ".join(f"{kind} {min(soft[kind]):.2f}–{max(soft[kind]):.2f}" for kind in PREPROCESSING)
        + ". A global scale acts on every direction alike (ŷ ≈ β x*ᵀΣw for Gaussian inputs), "
        "so it cannot undo unequal variances or correlation."
    )


# --------------------------------------------------------------------------------- figures
def retrieval_figure(rows: list[dict[str, Any]], cfg: CompareConfig) -> FigureRecord:
    """Accuracy against ρ per similarity × separation, one panel per N."""
    from attnreg.output import new_figure

    ns = list(dict.fromkeys(r["n_patterns"] for r in rows))
    fig, axes = new_figure(1, len(ns), figsize=(4.5 * len(ns), 3.6), squeeze=False)
    styles = {"dot": "--", "whitened dot": "-"}
    colours = {"identity": "tab:blue", "softmax": "tab:orange"}
    for ax, n in zip(axes[0], ns, strict=True):
        for sim in SIMILARITIES:
            for sep in SEPARATIONS:
                sel = [
                    r
                    for r in rows
                    if (r["n_patterns"], r["similarity"], r["separation"]) == (n, sim, sep)
                ]
                ax.plot(
                    [r["rho"] for r in sel],
                    [r["accuracy"] for r in sel],
                    styles[sim],
                    color=colours[sep],
                    marker="o",
                    markersize=3,
                    label=f"{sim} × {sep}",
                )
        ax.axhline(cfg.tang_accuracy, color="black", linewidth=0.5, linestyle=":")
        ax.set(xlabel="equicorrelation ρ", ylabel="retrieval accuracy", ylim=(0, 1.02))
        ax.set_title(f"N = {n} patterns, d = {cfg.tang_d}")
        ax.legend(fontsize=7)
    fig.suptitle("Correlated patterns: plain vs whitened dot similarity")
    return FigureRecord(
        name="compare_tang_retrieval",
        figure=fig,
        caption=(
            "Retrieval accuracy of equicorrelated Gaussian patterns against ρ (dotted: the "
            "failure threshold), plain and whitened dot, identity and softmax separation "
            "(compare config: tang_d, tang_patterns, tang_rhos, tang_memories, tang_query_noise, "
            "tang_beta)."
        ),
    )


def scaling_figure(rows: list[dict[str, Any]]) -> FigureRecord:
    """Test MSE / ridge's per scenario and preprocessing, one panel per (separation, rule)."""
    from attnreg.output import new_figure

    panels = [
        ("identity", "validated", "identity, best global scale c"),
        ("softmax", "1/sqrt(d_k)", "softmax, β = 1/√d_k"),
        ("softmax", "validated", "softmax, best global β"),
    ]
    fig, axes = new_figure(1, 3, figsize=(13, 3.6), squeeze=False, sharey=True)
    idx = np.arange(len(SCENARIOS))
    width = 0.27
    for ax, (sep, rule, title) in zip(axes[0], panels, strict=True):
        for i, kind in enumerate(PREPROCESSING):
            values = [
                next(
                    r["test_mse_vs_ridge"]
                    for r in rows
                    if (r["scenario"], r["preprocessing"], r["separation"], r["scale_rule"])
                    == (s, kind, sep, rule)
                )
                for s in SCENARIOS
            ]
            ax.bar(idx + (i - 1) * width, values, width, label=kind)
        ax.axhline(1, color="black", linewidth=0.6)
        ax.set_xticks(idx, [sc.replace(" ", "\n") for sc in SCENARIOS], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("test MSE / ridge's")
    fig.suptitle("Attention regression: what a global scale, standardising and whitening fix")
    return FigureRecord(
        name="compare_tang_scaling",
        figure=fig,
        caption=(
            "Test MSE of attention regression (no learned projections) relative to ridge's, per "
            "input scenario and preprocessing (compare config: tang_scale_d, "
            "tang_scale_n_train, tang_variance_ratio, tang_rho, noise, beta_multipliers)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The tang section (module docstring); empty when ``cfg.tang`` is off. Its data are its
    own (``datasets`` is not used)."""
    del datasets
    if not cfg.tang:
        return Section()
    retrieval = retrieval_rows(cfg)
    scaling = scaling_rows(cfg)
    return Section(
        rows=retrieval + scaling,
        summary={QUESTION_A: _summary_a(retrieval, cfg), QUESTION_B: _summary_b(scaling, cfg)},
        figures=[retrieval_figure(retrieval, cfg), scaling_figure(scaling)],
    )
