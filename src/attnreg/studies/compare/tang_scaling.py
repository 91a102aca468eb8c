"""Tang's √d_k remark, read as he wrote it: the division by √d_k handles the scale of
key/query pairs, and it does not handle correlated features the way whitening does.

The compare study's section ``tang``, part ``scaling`` (part ``retrieval``, the whitened dot
product, is :mod:`~attnreg.studies.compare.tang_retrieval`). Softmax attention regression
without learned projections, ``ŷ* = softmax(β x*ᵀ Xᵀ) Y`` (the inputs are queries and keys,
the targets values, ``d_k = d``; the attention core's :func:`attnreg.core.associate`), on
``config.tang_scale_n_train`` training rows and ``config.n_test`` test rows, repeated over
``config.tang_seeds`` seeds (every seed its own draws; all cells of a seed share them, so
comparisons are paired).

* **Part 1, the scale of key/query pairs.** iid inputs ``x ~ N(0, I_d)``, ``d = d_k`` in
  ``config.tang_dks``: the scores ``x*ᵀ x_i`` have standard deviation ``√d_k``. Targets
  ``y = uᵀx / √d + σ ε`` (``u ~ N(0, I_d)``, ``σ = config.noise``): the signal has the same
  variance at every ``d_k``. Three temperatures: ``β = 1/√d_k`` (as written, Vaswani et al.
  2017), ``β = 1``, and the best ``β = m/√d_k`` (``m`` in ``config.beta_multipliers``) on a
  validation split of the training rows.
* **Part 2, correlation.** Equicorrelated inputs ``x = Σ_ρ^{1/2} z``, ``Σ_ρ = (1 − ρ) I + ρ
  11ᵀ``, ``ρ`` in ``config.tang_scale_rhos``, ``d = config.tang_scale_d``, and the targets
  ``y = uᵀz / √d + σ ε`` of the *same* draws ``z``: in whitened coordinates every ``ρ`` is the
  same task, so any growth of the error with ``ρ`` is the similarity's. Cells: no
  preprocessing with ``β = 1/√d_k`` and with the best global ``β``; inputs whitened by the
  training rows' covariance (ZCA, ``(x − μ) S^{-1/2}``) with ``β = 1/√d_k``.

The remark's readings, each a paired comparison over the seeds (``z`` = mean paired
difference / its standard error, :func:`paired_z`): 1/√d_k's test MSE stays within two paired
standard errors of the best β's at every ``d_k``; β = 1's exceeds the best β's by more than two
at the larger half of the ``d_k`` sweep; with a global scale (no preprocessing) the
least-squares slope of test MSE in ``ρ`` exceeds zero by more than two standard errors. The
whitening half is an identity, not a measurement: the whitened dot product ``x_iᵀ S⁻¹ x_j`` is
invariant under ``x → A x`` for any invertible ``A`` (``S → A S Aᵀ``), so with whitened inputs
every ``ρ`` gives the same predictions up to rounding; the claim checks that the largest
relative change of the test MSE over ``ρ`` is within the float64 bound ``u · κ(Σ_ρ) · N · d``
(:func:`whitening_bound`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attnreg.core import Attention, associate
from attnreg.data.regression import RegressionData
from attnreg.models.regressors import symmetric_whitening
from attnreg.studies.answers import summary_table
from attnreg.studies.common import FigureRecord, Section
from attnreg.studies.compare.config import CompareConfig
from attnreg.studies.compare.density import validated_beta
from attnreg.studies.compare.metrics import mse
from attnreg.studies.compare.tang_retrieval import SECTION, SEED_TAG
from attnreg.studies.ledger import IDENTITY, REMARK, Claim
from attnreg.studies.paired import paired_z, standard_error
from attnreg.studies.quotes import TANG_SQRT_DK
from attnreg.thresholds import Threshold

QUESTION = "Tang: does 1/√d_k handle the scale of key/query pairs, and not correlation?"
QUESTION_RHO = "Tang: does correlation hurt softmax regression with a global scale, not whitened?"
PREPROCESSING = ("none", "standardised", "whitened")
RULES = ("1/sqrt(d_k)", "beta = 1", "best beta")
RHO_CELLS = (
    ("none", "1/sqrt(d_k)", "no preprocessing, β = 1/√d_k"),
    ("none", "best beta", "no preprocessing, best global β"),
    ("whitened", "1/sqrt(d_k)", "whitened, β = 1/√d_k"),
)
Z_LIMIT = 2.0
"""Two paired standard errors: a paired difference over the seeds counts as a difference when
its mean is more than this many standard errors from zero (about a 95 % two-sided band for a
normal mean; with few seeds a lenient one)."""


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
    """``softmax(β X* Xᵀ) Y``: ``(N, d)``, ``(N, dy)``, ``(M, d)`` → ``(M, dy)`` (the core's dot
    similarity with softmax separation)."""
    out = associate(x_query, x_ctx, y_ctx, separation="softmax", beta=beta)
    assert isinstance(out, torch.Tensor)
    return out


def linear_regression_attention(
    x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """Regression-like attention without projections, ``c · X* Xᵀ Y / N`` → ``(M, dy)``: the
    core's dot similarity, identity separation and context mean, times ``c`` (any sign)."""
    out = Attention("dot", "identity")(x_query[None], x_ctx[None], y_ctx[None], mean=True)[0]
    return out * scale if scale != 1.0 else out


def best_scale(x: torch.Tensor, y: torch.Tensor, fit: Any, val: Any) -> float:
    """The least-squares global scale ``c* = ⟨p, y_val⟩ / ⟨p, p⟩`` of
    ``p = linear_regression_attention(X_fit, Y_fit, X_val)`` on the validation rows."""
    p = linear_regression_attention(x[fit], y[fit], x[val])
    return float((p * y[val]).sum() / (p * p).sum())


def slope(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """The least-squares slope of ``y`` on ``x``."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    xc = xa - xa.mean()
    return float((xc * (ya - ya.mean())).sum() / (xc * xc).sum())


def _draws(cfg: CompareConfig, part: int, seed: int, d: int) -> tuple[np.ndarray, ...]:
    n = cfg.tang_scale_n_train + cfg.n_test
    rng = np.random.default_rng([cfg.seed, SEED_TAG, part, seed, d])
    return rng.standard_normal((n, d)), rng.standard_normal(n), rng.standard_normal(d)


def _cells(
    x: np.ndarray, y: np.ndarray, cfg: CompareConfig, seed: int, cells: tuple[tuple[str, str], ...]
) -> dict[tuple[str, str], tuple[float, float]]:
    """``(preprocessing, rule) → (β, test MSE)`` of softmax regression for the ``cells``
    asked (the best β is validated only where a cell asks for it)."""
    n = cfg.tang_scale_n_train
    xt = torch.from_numpy(x[:n])
    yt = torch.from_numpy(y[:n, None])
    xq, yq = torch.from_numpy(x[n:]), torch.from_numpy(y[n:, None])
    out = {}
    for kind in dict.fromkeys(k for k, _ in cells):
        xp, xqp = preprocess(kind, xt, xq)
        for rule in (r for k, r in cells if k == kind):
            if rule == "best beta":
                beta, _ = validated_beta(
                    xp,
                    yt,
                    softmax_regression,
                    cfg.beta_multipliers,
                    cfg.validation_fraction,
                    np.random.default_rng([cfg.seed, SEED_TAG, 9, seed]),
                )
            else:
                beta = 1 / math.sqrt(xp.shape[1]) if rule == "1/sqrt(d_k)" else 1.0
            out[(kind, rule)] = (beta, mse(softmax_regression(xp, yt, xqp, beta), yq))
    return out


def scaling_rows(cfg: CompareConfig) -> list[dict[str, Any]]:
    """One row per part × (``d_k`` or ``ρ``) × seed × preprocessing × temperature rule."""
    rows = []
    for seed in range(cfg.tang_seeds):
        for dk in cfg.tang_dks:
            z, eps, u = _draws(cfg, 1, seed, int(dk))
            y = z @ u / math.sqrt(dk) + cfg.noise * eps
            cells = tuple(("none", rule) for rule in RULES)
            for (kind, rule), (beta, test) in _cells(z, y, cfg, seed, cells).items():
                rows.append(
                    _row("scale", int(dk), 0.0, seed, kind, rule, beta, test)
                    | {"n_train": cfg.tang_scale_n_train}
                )
        d = cfg.tang_scale_d
        z, eps, u = _draws(cfg, 2, seed, d)
        y = z @ u / math.sqrt(d) + cfg.noise * eps
        for rho in cfg.tang_scale_rhos:
            sigma = (1 - rho) * np.eye(d) + rho * np.ones((d, d))
            vals, vecs = np.linalg.eigh(sigma)
            x = z @ (vecs * np.sqrt(vals)) @ vecs.T  # Σ_ρ^{1/2} z (symmetric root)
            cells = tuple((kind, rule) for kind, rule, _ in RHO_CELLS)
            for (kind, rule), (beta, test) in _cells(x, y, cfg, seed, cells).items():
                rows.append(
                    _row("correlation", d, float(rho), seed, kind, rule, beta, test)
                    | {"n_train": cfg.tang_scale_n_train}
                )
    return rows


def _row(
    part: str, dk: int, rho: float, seed: int, kind: str, rule: str, beta: float, test: float
) -> dict[str, Any]:
    return {
        "section": SECTION,
        "part": f"scaling: {part}",
        "n_train": 0,
        "d_k": dk,
        "rho": rho,
        "seed": seed,
        "preprocessing": kind,
        "scale_rule": rule,
        "beta": beta,
        "test_mse": test,
    }


def _mses(rows: list[dict[str, Any]], part: str, kind: str, rule: str, **at: Any) -> np.ndarray:
    """Test MSE per seed (in seed order) of one cell."""
    sel = [
        r
        for r in rows
        if r["part"] == f"scaling: {part}"
        and (r["preprocessing"], r["scale_rule"]) == (kind, rule)
        and all(r[k] == v for k, v in at.items())
    ]
    return np.array([r["test_mse"] for r in sorted(sel, key=lambda r: r["seed"])])


def rho_slopes(rows: list[dict[str, Any]], kind: str, rule: str) -> np.ndarray:
    """Per seed, the least-squares slope of test MSE in ρ (part 2) of one cell."""
    rhos = sorted({r["rho"] for r in rows if r["part"] == "scaling: correlation"})
    per_rho = np.stack([_mses(rows, "correlation", kind, rule, rho=rho) for rho in rhos])
    return np.array([slope(rhos, per_rho[:, s]) for s in range(per_rho.shape[1])])


def whitening_bound(rows: list[dict[str, Any]]) -> float:
    """The float64 rounding bound ``u · κ(Σ_ρ) · N · d`` at the largest ρ of part 2
    (``κ(Σ_ρ) = (1 + (d − 1)ρ)/(1 − ρ)``, ``u`` the unit roundoff): how far the whitened
    cells' test MSE may move with ρ when the algebra says it does not move."""
    sel = [r for r in rows if r["part"] == "scaling: correlation"]
    rho, d, n = max(r["rho"] for r in sel), sel[0]["d_k"], sel[0]["n_train"]
    kappa = (1 + (d - 1) * rho) / (1 - rho)
    return float(np.finfo(np.float64).eps / 2 * kappa * n * d)


def whitened_change(rows: list[dict[str, Any]]) -> float:
    """The largest relative change over ρ (per seed, against the smallest ρ) of the whitened
    cell's test MSE."""
    rhos = sorted({r["rho"] for r in rows if r["part"] == "scaling: correlation"})
    kind, rule, _ = RHO_CELLS[2]
    per = np.stack([_mses(rows, "correlation", kind, rule, rho=rho) for rho in rhos])
    return float(np.abs(per - per[0]).max() / per[0].min())


def excess_slope(rows: list[dict[str, Any]], rule: str) -> float:
    """The least-squares slope of ``log(mean test MSE(rule) / mean test MSE(best β))`` in
    ``log d_k`` (part 1): > 0 when the rule falls behind the best β as ``d_k`` grows."""
    dks = _dks(rows)
    ratio = [
        _mses(rows, "scale", "none", rule, d_k=dk).mean()
        / _mses(rows, "scale", "none", "best beta", d_k=dk).mean()
        for dk in dks
    ]
    return slope(np.log(dks), np.log(ratio))


def _dks(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({int(r["d_k"]) for r in rows if r["part"] == "scaling: scale"})


def _summary(rows: list[dict[str, Any]], cfg: CompareConfig) -> dict[str, Any]:
    table = []
    for dk in _dks(rows):
        best = _mses(rows, "scale", "none", "best beta", d_k=dk)
        cells = [_mses(rows, "scale", "none", rule, d_k=dk) for rule in RULES]
        table.append(
            [dk]
            + [f"{m.mean():.4g} ± {standard_error(m):.2g}" for m in cells]
            + [paired_z(cells[0], best), paired_z(cells[1], best)]
        )
    rho_table = []
    rhos = sorted({r["rho"] for r in rows if r["part"] == "scaling: correlation"})
    for kind, rule, label in RHO_CELLS:
        m = [_mses(rows, "correlation", kind, rule, rho=rho) for rho in rhos]
        s = rho_slopes(rows, kind, rule)
        rho_table.append(
            [label]
            + [f"{v.mean():.4g}" for v in m]
            + [
                f"{s.mean():.3g} ± {standard_error(s):.2g}",
                s.mean() / standard_error(s) if standard_error(s) > 0 else math.nan,
            ]
        )
    return {
        QUESTION: summary_table(
            f"Softmax attention regression on iid inputs, {cfg.tang_scale_n_train} training rows, "
            f"noise σ = {cfg.noise:g}; test MSE (mean ± SE over {cfg.tang_seeds} seeds) and the "
            "paired z against the best β (validated).",
            ["d_k", "β = 1/√d_k", "β = 1", "best β", "z: 1/√d_k − best", "z: β=1 − best"],
            table,
            note=(
                "Slope of log(test MSE / the best β's) in log d_k: "
                f"{excess_slope(rows, RULES[0]):+.3g} with β = 1/√d_k, "
                f"{excess_slope(rows, RULES[1]):+.3g} with β = 1 (> 0: falls behind the best "
                "β as d_k grows)."
            ),
        ),
        QUESTION_RHO: summary_table(
            f"Equicorrelated inputs (d = {cfg.tang_scale_d}), the same task in whitened "
            f"coordinates at every ρ; test MSE (mean over {cfg.tang_seeds} seeds) and the "
            "slope of test MSE in ρ (mean ± SE over the seeds, and its z).",
            ["cell"] + [f"ρ = {r:g}" for r in rhos] + ["slope in ρ", "z"],
            rho_table,
        ),
    }


def claims(rows: list[dict[str, Any]]) -> list[Claim]:
    """Tang's √d_k remark as four paired readings (module docstring), thresholds
    :data:`Z_LIMIT` paired standard errors over the seeds."""
    dks = _dks(rows)
    best = {dk: _mses(rows, "scale", "none", "best beta", d_k=dk) for dk in dks}
    origin = f"{Z_LIMIT:g} paired standard errors over the seeds (Z_LIMIT)"
    near = {
        f"d_k = {dk}": paired_z(_mses(rows, "scale", "none", "1/sqrt(d_k)", d_k=dk), best[dk])
        for dk in dks
    }
    large = dks[len(dks) // 2 :]
    worse = {
        f"d_k = {dk}": paired_z(_mses(rows, "scale", "none", "beta = 1", d_k=dk), best[dk])
        for dk in large
    }

    def slope_z(kind: str, rule: str) -> float:
        s = rho_slopes(rows, kind, rule)
        se = standard_error(s)
        return float(s.mean() / se) if se > 0 else (0.0 if s.mean() == 0 else math.inf)

    scaled = {label: slope_z(kind, rule) for kind, rule, label in RHO_CELLS[:2]}
    paired = "paired z over the seeds"
    return [
        Claim(
            TANG_SQRT_DK,
            REMARK,
            f"test MSE with β = 1/√d_k minus with the best β, iid inputs ({paired})",
            near,
            Threshold("<=", Z_LIMIT, origin),
            reading="handles the scale of key/query pairs = with β = 1/√d_k the error stays "
            "within two paired standard errors of the best β's at every d_k",
        ),
        Claim(
            TANG_SQRT_DK,
            REMARK,
            f"test MSE with β = 1 minus with the best β, iid inputs, larger d_k ({paired})",
            worse,
            Threshold(">=", Z_LIMIT, origin),
            reading="the division is needed = without it (β = 1) the error exceeds the best "
            "β's by more than two paired standard errors as d_k grows",
        ),
        Claim(
            TANG_SQRT_DK,
            REMARK,
            f"slope of test MSE in ρ, no preprocessing ({paired}: slope / its SE)",
            scaled,
            Threshold(">=", Z_LIMIT, origin),
            reading="it does not handle correlated features = with a global scale the error "
            "grows with ρ (slope more than two standard errors above zero)",
        ),
        Claim(
            TANG_SQRT_DK,
            IDENTITY,
            "largest relative change of the whitened cell's test MSE over ρ (per seed)",
            {RHO_CELLS[2][2]: whitened_change(rows)},
            Threshold(
                "<=",
                whitening_bound(rows),
                "float64 rounding u·κ(Σ_ρ)·N·d at the largest ρ: the whitened dot product is "
                "invariant to x → Ax, so whitening handles correlation by algebra",
            ),
        ),
    ]


def figure(rows: list[dict[str, Any]]) -> FigureRecord:
    """Left: test MSE against d_k per temperature rule (iid inputs); right: test MSE against ρ
    per cell. Mean ± SE over the seeds."""
    from attnreg.output import new_figure

    fig, axes = new_figure(1, 2, figsize=(11, 3.8), squeeze=False)
    dks = _dks(rows)
    for rule, label in zip(RULES, ("β = 1/√d_k", "β = 1", "best β (validated)"), strict=True):
        m = [_mses(rows, "scale", "none", rule, d_k=dk) for dk in dks]
        axes[0][0].errorbar(
            dks,
            [v.mean() for v in m],
            [standard_error(v) for v in m],
            marker="o",
            capsize=3,
            label=label,
        )
    axes[0][0].set(xscale="log", xlabel="d_k (iid inputs)", ylabel="test MSE")
    axes[0][0].set_xticks(dks, [str(dk) for dk in dks])
    axes[0][0].set_title("Scale of key/query pairs", fontsize=10)
    rhos = sorted({r["rho"] for r in rows if r["part"] == "scaling: correlation"})
    for kind, rule, label in RHO_CELLS:
        m = [_mses(rows, "correlation", kind, rule, rho=rho) for rho in rhos]
        axes[0][1].errorbar(
            rhos,
            [v.mean() for v in m],
            [standard_error(v) for v in m],
            marker="o",
            capsize=3,
            label=label,
        )
    axes[0][1].set(xlabel="equicorrelation ρ", ylabel="test MSE")
    axes[0][1].set_title("Correlated features", fontsize=10)
    for ax in axes[0]:
        ax.legend(fontsize=9)
    fig.tight_layout()
    return FigureRecord(
        name="compare_tang_scaling",
        figure=fig,
        caption=(
            "Softmax attention regression without learned projections, test MSE (mean ± SE over "
            "the seeds). Left: iid inputs, d_k from the config's tang_dks, β = 1/√d_k, β = 1 "
            "and the validated best β. Right: equicorrelated inputs (tang_scale_d, "
            "tang_scale_rhos), the same task in whitened coordinates at every ρ, without "
            "preprocessing and whitened (compare config: tang_seeds, tang_scale_n_train, "
            "noise, beta_multipliers)."
        ),
    )


def section(cfg: CompareConfig, datasets: dict[str, RegressionData]) -> Section:
    """The tang section's scaling part (module docstring); empty when ``cfg.tang`` is off.
    Its data are its own (``datasets`` is not used)."""
    del datasets
    if not cfg.tang:
        return Section()
    rows = scaling_rows(cfg)
    return Section(
        rows=rows, summary=_summary(rows, cfg), figures=[figure(rows)], claims=claims(rows)
    )
