"""The depth atlas against numpy loops written here, and its theory against the spectrum."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnreg.constructions import LSAStack
from attnreg.data.tasks import random_covariance
from attnreg.depth import AtlasGrid, atlas_task, depth_atlas, fit_slopes

U64 = 2.0**-53
GRID = AtlasGrid(
    d=4, kappas=(1.0, 100.0), n_ctx=(3, 4, 16), eps=(1e-2, 1e-6), cap=120, n_query=6, seed=3
)


def spectrum(x):
    """Eigenvalues (ascending) and vectors of XᵀX/N on its range (numpy's rank tolerance)."""
    n, d = x.shape
    _, s, vt = np.linalg.svd(x / math.sqrt(n), full_matrices=False)
    keep = s > s[0] * max(n, d) * np.finfo(float).eps
    return s[keep][::-1] ** 2, vt[keep][::-1].T


def rel_errors(preds, ref):
    return [np.linalg.norm(p - ref) / np.linalg.norm(ref) for p in preds]


def first(errors, eps):
    return next((i for i, e in enumerate(errors) if e <= eps), None)


def gd_loop(x, y, q, eta, layers, gam=None):
    """W_{l+1} = W_l + η (C − W_l S) Γ from W_0 = 0; the prediction after every layer."""
    n, d = x.shape
    s, c = x.T @ x / n, y.T @ x / n
    gam = np.eye(d) if gam is None else gam
    w = np.zeros((y.shape[1], d))
    preds = [q @ w.T]
    for _ in range(layers):
        w = w + eta * (c - w @ s) @ gam
        preds.append(q @ w.T)
    return preds


def gdpp_loop(x, y, q, layers):
    """GD++ (von Oswald et al. 2023) as the atlas documents it: layer l maps every token's x by
    (I − γ_l S_l) and its y by −η_l C_l x (C_l, S_l from the layer's input context), with
    γ_l = 1/(3 hi_l) while hi_l/lo_l > 1.01, η_l = 2/(lo_l + hi_l); prediction = −y of the query."""
    n = x.shape[0]
    lam, _ = spectrum(x)
    lo, hi = lam[0], lam[-1]
    xs, ys = np.vstack([x, q]), np.vstack([y, np.zeros((len(q), y.shape[1]))])
    preds = [-ys[n:].copy()]
    for _ in range(layers):
        gamma = 1 / (3 * hi) if hi / lo > 1.01 else 0.0
        eta = 2 / (lo + hi)
        s_l, c_l = xs[:n].T @ xs[:n] / n, ys[:n].T @ xs[:n] / n
        xs, ys = xs - gamma * xs @ s_l, ys - eta * xs @ c_l.T
        lo, hi = lo * (1 - gamma * lo) ** 2, hi * (1 - gamma * hi) ** 2
        preds.append(-ys[n:].copy())
    return preds


def newton_loop(x, y, q, layers):
    """M_0 = αS, α = 2/‖SSᵀ‖_F (S = XᵀX); prediction C M_k q after layer 2k + 1 (M_0's after
    layer 2; zero before)."""
    s = x.T @ x
    c = y.T @ x
    m = 2 / np.linalg.norm(s @ s.T) * s
    preds = [np.zeros((len(q), y.shape[1]))] * 2 + [q @ (c @ m).T]
    while len(preds) < layers + 1:
        m = 2 * m - m @ s @ m
        preds += [q @ (c @ m).T] * 2
    return preds[: layers + 1]


def cell_errors(method, x, y, q, sigma, layers):
    ref = q @ np.linalg.lstsq(x, y, rcond=None)[0]
    lam, _ = spectrum(x)
    if method == "gd":
        return rel_errors(gd_loop(x, y, q, 2 / (lam[0] + lam[-1]), layers), ref)
    if method == "gd++":
        return rel_errors(gdpp_loop(x, y, q, layers), ref)
    if method == "preconditioned":
        gam = np.linalg.inv(sigma)
        chol = np.linalg.cholesky(gam)
        mu, _ = spectrum(x @ chol)
        ref_g = (q @ chol) @ np.linalg.lstsq(x @ chol, y, rcond=None)[0]
        return rel_errors(gd_loop(x, y, q, 2 / (mu[0] + mu[-1]), layers, gam), ref_g)
    return rel_errors(newton_loop(x, y, q, layers), ref)


def test_atlas_counts_are_the_numpy_loops_counts():
    rows = depth_atlas(GRID)
    assert len(rows) == 4 * 2 * 3 * 2
    seen = set()
    for row in rows:
        kappa, n = row["kappa"], row["n_ctx"]
        task = atlas_task(GRID.d, kappa, n, GRID.n_query, GRID.noise, GRID.seed)
        x, y, q = (t[0].numpy() for t in (task.x_ctx, task.y_ctx, task.x_query))
        sigma = random_covariance(GRID.d, kappa, seed=GRID.seed).numpy()
        errors = cell_errors(row["method"], x, y, q, sigma, row["cap"])
        assert row["layers_needed"] == first(errors, row["eps"]), row
        reached = row["layers_needed"] is not None
        assert (row["best_error"] <= row["eps"]) == reached, row
        seen.add((row["method"], row["layers_needed"] is None))
    assert {m for m, _ in seen} == {"gd", "gd++", "preconditioned", "newton"}
    assert ("gd", True) in seen  # the cap is reached somewhere (N = d at κ = 100)


def test_theory_layers_are_the_formulas():
    rows = depth_atlas(AtlasGrid(d=4, kappas=(10.0, 1e3), n_ctx=(16,), eps=(1e-3,), cap=40))
    for row in rows:
        task = atlas_task(4, row["kappa"], 16, 16, 0.1, 0)
        x = task.x_ctx[0].numpy()
        lam, _ = spectrum(x)
        eps = row["eps"]
        if row["method"] == "gd":
            c = (lam[-1] / lam[0] - 1) / (lam[-1] / lam[0] + 1)
            assert row["theory_layers"] == math.ceil(math.log(eps) / math.log(c))
            assert math.isclose(row["kappa_sample"], lam[-1] / lam[0], rel_tol=1e-10)
        if row["method"] == "newton":
            s = x.T @ x
            alpha = 2 / np.linalg.norm(s @ s)
            rho = np.max(np.abs(1 - alpha * (lam * 16) ** 2))
            k = math.ceil(math.log2(math.log(eps) / math.log(rho)))
            assert row["theory_layers"] == 2 * k + 1


def test_gd_depth_curve_is_the_spectral_closed_form():
    """The prediction error after l GD layers at the optimal step is
    ``‖Q V diag((1 − ηλ_i)^l) Vᵀ w*‖_F / ‖Q w*‖_F`` (exact, from the eigenpairs of S); its
    slowest modes contract by exactly ``c = (κ̂ − 1)/(κ̂ + 1)``, so ``e_l ≤ c^l K_0`` with
    ``K_0 = ‖Q‖₂ ‖w*‖_F / ‖Q w*‖_F`` and the count is at most ``⌈ln(ε/K_0)/ln c⌉``. The stack's
    curve matches the closed form up to rounding that adds per layer (the GD bound of
    tests/test_depth_stacks.py): ``2(l + 1) γ_n κ̂ K_0``."""
    task = atlas_task(4, 10.0, 40, 16, 0.1, 1)
    x, y, q = (t[0].numpy() for t in (task.x_ctx, task.y_ctx, task.x_query))
    lam, vecs = spectrum(x)
    kappa = lam[-1] / lam[0]
    eta = 2 / (lam[0] + lam[-1])
    c = (kappa - 1) / (kappa + 1)
    assert math.isclose(np.max(np.abs(1 - eta * lam)), c, rel_tol=0, abs_tol=8 * U64 * kappa)
    layers = 200
    stack = LSAStack.gd(4, 1, eta, steps=layers)
    preds = stack.depth_predictions(task.x_ctx, task.y_ctx, task.x_query)[:, 0].numpy()
    w = np.linalg.lstsq(x, y, rcond=None)[0]
    ref = q @ w
    measured = rel_errors(preds, ref)
    k0 = np.linalg.norm(q, 2) * np.linalg.norm(w) / np.linalg.norm(ref)
    g = (40 + 3 * 5) * U64 / (1 - (40 + 3 * 5) * U64)
    for layer in range(layers + 1):
        modes = vecs @ np.diag((1 - eta * lam) ** layer) @ vecs.T
        exact = np.linalg.norm(q @ modes @ w) / np.linalg.norm(ref)
        floor = 2 * (layer + 1) * g * kappa * k0
        assert abs(measured[layer] - exact) <= floor, layer
        assert exact <= c**layer * k0 * (1 + 8 * U64 * layer)
    for eps in (1e-3, 1e-8):
        count = first(measured, eps)
        assert count is not None
        assert count <= math.ceil(math.log(eps / k0) / math.log(c)) + 1


def test_fit_slopes_are_least_squares_lines():
    kappas = [1.0, 10.0, 100.0, 1000.0]
    rows = []
    for k in kappas:
        rows.append(
            {
                "method": "gd",
                "n_ctx": 8,
                "eps": 1e-6,
                "kappa": k,
                "kappa_sample": 2 * k,
                "layers_needed": int(3 * 2 * k + 5 + (k == 10.0)),
                "theory_layers": int(3 * 2 * k),
            }
        )
        rows.append(
            {
                "method": "newton",
                "n_ctx": 8,
                "eps": 1e-6,
                "kappa": k,
                "kappa_sample": 2 * k,
                "layers_needed": int(4 * round(math.log10(k)) + 7),
                "theory_layers": 9,
            }
        )
    rows.append(dict(rows[0], kappa_sample=5.0, layers_needed=None))
    fits = {f["method"]: f for f in fit_slopes(rows)}
    xs = [2 * k for k in kappas]
    want = np.polyfit(xs, [r["layers_needed"] for r in rows if r["method"] == "gd"][:4], 1)[0]
    assert math.isclose(fits["gd"]["slope"], want, rel_tol=1e-9)
    assert fits["gd"]["points"] == 4 and fits["gd"]["against"] == "kappa_sample"
    logs = [math.log10(v) for v in xs]
    want_n = np.polyfit(logs, [4 * round(math.log10(k)) + 7 for k in kappas], 1)[0]
    assert math.isclose(fits["newton"]["slope"], want_n, rel_tol=1e-9)
    assert math.isclose(fits["newton"]["theory_slope"], 0.0, abs_tol=1e-12)
    same = fit_slopes([dict(rows[1], kappa_sample=3.0), dict(rows[3], kappa_sample=3.0)])
    assert same[0]["slope"] is None


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"kappas": (0.5,)}, "kappas"),
        ({"eps": (1.5,)}, "eps"),
        ({"cap": 0}, "cap"),
        ({"n_ctx": (0,)}, "n_ctx"),
        ({"d": 0}, "d"),
    ],
)
def test_atlas_grid_refuses_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AtlasGrid(**kwargs)


def test_atlas_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="methods"):
        depth_atlas(GRID, methods=("sgd",))
