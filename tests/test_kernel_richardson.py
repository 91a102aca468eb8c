"""KernelRichardsonStack: preconditioned Richardson for Gaussian kernel ridge regression, run by
softmax attention and gated token-wise blocks.

References, all independent of attnreg: the iteration written in numpy in ``refs.py``
(``α_{t+1} = α_t + ω (D + λI)⁻¹(Y − (K + λI)α_t)``), numpy's ``eigvalsh``/``solve`` for the
spectrum and the fixed point, and scikit-learn's ``KernelRidge(kernel="rbf", gamma=1/(2h²),
alpha=λ)``.

**Error bounds** (first order in the unit roundoff ``u``). One layer of the stack computes the
softmax weights with relative error at most ``r = u (2n + 4 W S)`` (the core's bound:
``n = 3W + N + 1`` for a bilinear score through a ``W × W`` metric and ``N + 1`` keys, ``S`` the
largest ``|β · score|``), and the gated block adds ``u (2W + 3dy + 2)``; write ``r`` for their sum.
The local error of step t is then at most ``r (ω m_t + max|α_t|)`` with
``m_t = max_i [P(|Y| + (K + λI)|α_t|)]_i``, and it propagates through ``I − ωP(K + λI)``, whose
powers are bounded by ``√κ(P)`` in the 2-norm (self-adjoint in ``⟨u, v⟩ = uᵀP⁻¹v`` with
spectral radius ≤ 1), so ``max|α̂_t − α_t| ≤ √(N κ(P)) Σ_{τ<t} r (ω m_τ + max|α_τ|)``. The
prediction adds the read-out attention and the reciprocal block, ``2r Σ_i k(x*, x_i)|α_K,i|``.
Against kernel ridge: ``‖α_K − α*‖₂ ≤ √κ(P) ρ^K ‖α*‖₂`` (``ρ`` from the spectrum), plus
scikit-learn's own Cholesky error ``≤ 64 u κ(K + λI) ‖k*‖₂ ‖α*‖₂``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from refs import (
    gaussian_attention_max_score,
    gaussian_kernel,
    kernel_richardson_iterates,
    kernel_richardson_predict,
)
from sklearn.kernel_ridge import KernelRidge

from attnreg.constructions import GatedUnit, KernelRichardsonStack
from attnreg.core.threads import torch_threads

Arr = np.ndarray
U = 2.0**-53
B = 2


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Hundreds of tiny layers: intra-op threads only add synchronisation."""
    with torch_threads(1):
        yield


def tasks(seed: int, n: int, d: int, dy: int, m: int = 5) -> tuple[Arr, Arr, Arr]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, n, d)), rng.normal(size=(B, n, dy)), rng.normal(size=(B, m, d))


def preconditioned_spectrum(x: Arr, h: float, lam: float) -> tuple[Arr, Arr]:
    """Eigenvalues of ``P^½ (K + λI) P^½`` (those of ``P(K + λI)``) and ``diag P⁻¹ = D + λ``."""
    k = gaussian_kernel(x, x, h)
    deg = k.sum(1) + lam
    root = 1.0 / np.sqrt(deg)
    sym = root[:, None] * (k + lam * np.eye(len(x))) * root[None, :]
    return np.linalg.eigvalsh(sym), deg


def rate(mu: Arr, omega: float) -> float:
    return float(np.max(np.abs(1.0 - omega * mu)))


def rounding_bounds(
    x: Arr, y: Arr, q: Arr, h: float, lam: float, omega: float, steps: int
) -> tuple[Arr, float]:
    """The module docstring's bounds: on ``max|α̂_t − α_t|`` for ``t = 0 … steps`` and on the
    prediction, for one task."""
    n, d = x.shape
    dy = y.shape[1]
    width = d + 4 * dy + 5
    iterates = kernel_richardson_iterates(x, y, h, lam, omega, steps)
    _, deg = preconditioned_spectrum(x, h, lam)
    k = gaussian_kernel(x, x, h) + lam * np.eye(n)
    s = gaussian_attention_max_score(x, q, h, lam)
    r = U * (2 * (3 * width + n + 1) + 4 * width * s + 2 * width + 3 * dy + 2)
    local = [
        r * (omega * np.max((np.abs(y) + k @ np.abs(a)) / deg[:, None]) + np.abs(a).max())
        for a in iterates[:-1]
    ]
    growth = math.sqrt(n * deg.max() / deg.min())
    per_step = growth * np.concatenate([[0.0], np.cumsum(local)])
    kq = gaussian_kernel(q, x, h)
    prediction = kq.sum(1).max() * per_step[-1] + 2 * r * (kq @ np.abs(iterates[-1])).max()
    return per_step, float(prediction)


SHAPES = [(4, 8, 1), (20, 3, 2), (12, 5, 3)]  # N < d, N > d, dy > 1
SHAPE_IDS = ["N<d", "N>d", "dy=3"]


@pytest.mark.parametrize(("n", "d", "dy"), SHAPES, ids=SHAPE_IDS)
def test_every_step_is_the_numpy_iteration(n: int, d: int, dy: int) -> None:
    """The context tokens' a-slots after layer 2t are α_t of the numpy loop (every t, every
    task of the batch), and the prediction is Σ_i k(x*, x_i) α_K,i."""
    h, lam, omega, steps = 1.3, 0.4, 1.2, 12
    x, y, q = tasks(n + d, n, d, dy)
    stack = KernelRichardsonStack(d, dy, steps, h, lam, omega)
    states = stack.states(x, y, q)
    assert len(states) == 2 * steps + 3
    pred = stack.predict(x, y, q).numpy()
    assert pred.shape == (B, q.shape[1], dy)
    for b in range(B):
        bounds, pred_bound = rounding_bounds(x[b], y[b], q[b], h, lam, omega, steps)
        loop = kernel_richardson_iterates(x[b], y[b], h, lam, omega, steps)
        for t in range(steps + 1):
            got = stack.iterate(states[2 * t], n)[b].numpy()
            err = np.abs(got - loop[t]).max()
            assert err <= bounds[t], (b, t, err, bounds[t])
        # the sink and the queries keep a = 0 (they stay valid keys / are never mixed in)
        assert not states[-1][b, n:, stack.slots.a].any()
        expected = kernel_richardson_predict(x[b], y[b], q[b], h, lam, omega, steps)
        assert np.abs(pred[b] - expected).max() <= pred_bound


def assert_kernel_ridge(x: Arr, y: Arr, q: Arr, h: float, lam: float, steps: int) -> None:
    """The stack at the batch's best step ``ω = 2/(1 + min μ_min)`` against scikit-learn's
    kernel ridge, within the contraction bound ``√κ(P) ρ^K ‖k*‖ ‖α*‖`` (asserted small, so the
    check is about convergence) plus the stack's and scikit-learn's rounding."""
    n, dy = y.shape[1:]
    mus = [preconditioned_spectrum(x[b], h, lam)[0] for b in range(len(x))]
    omega = 2.0 / (1.0 + min(mu[0] for mu in mus))
    stack = KernelRichardsonStack(x.shape[2], dy, steps, h, lam, omega)
    pred = stack.predict(x, y, q).numpy()
    for b in range(len(x)):
        sk = KernelRidge(kernel="rbf", gamma=1 / (2 * h * h), alpha=lam).fit(x[b], y[b])
        expected = sk.predict(q[b]).reshape(-1, dy)
        gram = gaussian_kernel(x[b], x[b], h) + lam * np.eye(n)
        alpha_star = np.linalg.solve(gram, y[b])
        _, deg = preconditioned_spectrum(x[b], h, lam)
        kq = np.linalg.norm(gaussian_kernel(q[b], x[b], h), axis=1).max()
        size = kq * np.linalg.norm(alpha_star, axis=0).max()
        theory = math.sqrt(deg.max() / deg.min()) * rate(mus[b], omega) ** steps * size
        assert theory <= 1e-10 * np.abs(expected).max()
        _, stack_rounding = rounding_bounds(x[b], y[b], q[b], h, lam, omega, steps)
        tol = theory + stack_rounding + 64 * U * np.linalg.cond(gram) * size
        assert np.abs(pred[b] - expected).max() <= tol


@pytest.mark.parametrize(("n", "d", "dy"), SHAPES, ids=SHAPE_IDS)
def test_converges_to_kernel_ridge(n: int, d: int, dy: int) -> None:
    """After K steps the prediction is scikit-learn's kernel ridge (N < d, N > d, dy > 1, a
    batch of tasks)."""
    assert_kernel_ridge(*tasks(7 + n, n, d, dy), h=1.0, lam=0.5, steps=300)


def test_degenerate_contexts_converge_to_kernel_ridge() -> None:
    """Identical inputs (K = 11ᵀ, singular; μ_min = λ/(N + λ), the data-free bound, is attained)
    and duplicated rows with a constant column: K + λI is what makes the system solvable."""
    x, y, q = tasks(5, 6, 3, 2)
    x[0] = 0.7  # every context point the same
    x[1, 3:] = x[1, :3]  # duplicated rows
    x[1, :, 2] = -1.5  # a constant column
    assert_kernel_ridge(x, y, q, h=0.9, lam=1.0, steps=200)


@pytest.mark.parametrize("omega", ["one", "best"])
def test_contraction_rate_is_the_theory(omega: str) -> None:
    """‖α_t − α*‖ in the ``P⁻¹`` norm shrinks by ρ = max|1 − ωμ| per step (never slower), and
    the measured rate over a window where the slowest modes dominate is ρ to 1 %."""
    n, d, dy, h, lam = 6, 2, 1, 1.0, 0.2  # a task with a spectral gap below the slowest modes
    x, y, q = tasks(2, n, d, dy)
    x, y, q = x[:1], y[:1], q[:1]
    mu, deg = preconditioned_spectrum(x[0], h, lam)
    assert abs(mu[-1] - 1.0) <= 64 * U * n  # μ_max = 1: P(K + λI) has unit row sums
    assert mu[0] >= lam / (n + lam)  # the data-free lower bound
    w = 1.0 if omega == "one" else 2.0 / (1.0 + mu[0])
    rho = rate(mu, w)
    factors = np.abs(1.0 - w * mu)
    second = factors[factors < rho * (1 - 1e-9)].max()
    start = math.ceil(math.log(1e-4) / math.log(second / rho))
    assert start <= 100  # slower modes dominate after
    stop = start + 40
    steps = stop + 1
    assert rho**stop >= 1e-9  # the window stays far above the rounding floor
    states = KernelRichardsonStack(d, dy, steps, h, lam, w).states(x, y, q)
    stack_iterate = KernelRichardsonStack(d, dy, steps, h, lam, w).iterate
    alpha_star = np.linalg.solve(gaussian_kernel(x[0], x[0], h) + lam * np.eye(n), y[0])

    def err(t: int) -> float:
        e = stack_iterate(states[2 * t], n)[0].numpy() - alpha_star
        return float(np.sqrt((deg[:, None] * e * e).sum()))

    errors = np.array([err(t) for t in range(steps + 1)])
    assert np.all(errors <= rho ** np.arange(steps + 1) * errors[0] * (1 + 1e-6))
    measured = (errors[stop] / errors[start]) ** (1.0 / (stop - start))
    assert abs(measured / rho - 1.0) <= 0.01, (measured, rho)


def test_hooks_read_the_kernel_and_the_preconditioner() -> None:
    """The first layer's softmax weights are k(x_i, x_j)/(D_i + λ) on the context and
    λ/(D_i + λ) on the sink; the first gated block's ``hook_a`` holds s/λ = 1/(D_i + λ)."""
    n, d, dy, h, lam = 6, 3, 2, 1.1, 0.3
    x, y, q = tasks(11, n, d, dy)
    stack = KernelRichardsonStack(d, dy, 2, h, lam)
    pred, cache = stack.run_with_cache(x, y, q)
    assert np.abs(pred.numpy() - stack.predict(x, y, q).numpy()).max() <= 1e-12
    weights = cache["layers.0.hook_weights"].numpy()  # (B, N + 1 + M, N + 1)
    assert weights.shape == (B, n + 1 + q.shape[1], n + 1)
    for b in range(B):
        k = gaussian_kernel(x[b], x[b], h)
        deg = k.sum(1) + lam
        expected = np.hstack([k, np.full((n, 1), lam)]) / deg[:, None]
        s = gaussian_attention_max_score(x[b], q[b], h, lam)
        tol = U * (2 * (3 * stack.width + n + 1) + 4 * stack.width * s)
        assert np.abs(weights[b, :n] - expected).max() <= tol
        first = cache["layers.1.hook_a"].numpy()[b, :n, 0]
        assert np.abs(first * deg - 1.0).max() <= 2 * tol
    assert isinstance(stack.layers[1], GatedUnit)


def test_gated_unit_computes_products_and_quotients() -> None:
    rng = np.random.default_rng(0)
    t = torch.from_numpy(rng.normal(size=(2, 3, 4)))
    a, b, c = (torch.from_numpy(rng.normal(size=s)) for s in ((4, 5), (4, 5), (5, 4)))
    tn, an, bn, cn = (z.numpy() for z in (t, a, b, c))
    for gate, g in (("identity", lambda z: z), ("reciprocal", lambda z: 1.0 / z)):
        out = GatedUnit(a, b, c, gate)(t).numpy()
        hidden = (tn @ an) * g(tn @ bn)
        expected = tn + hidden @ cn
        scale = np.abs(tn) + np.abs(tn @ an) * np.abs(g(tn @ bn)) @ np.abs(cn)
        quotient = (
            1.0 if gate == "identity" else float(np.max(np.abs(tn) @ np.abs(bn) / np.abs(tn @ bn)))
        )  # the condition of the denominator
        assert np.all(np.abs(out - expected) <= 64 * U * quotient * scale)
    with pytest.raises(ValueError, match="gate"):
        GatedUnit(a, b, c, "relu")
    with pytest.raises(ValueError, match="a, b, c"):
        GatedUnit(a, b, c.mT)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"omega": 2.0}, "omega"),
        ({"omega": 0.0}, "omega"),
        ({"ridge": 0.0}, "ridge"),
        ({"bandwidth": -1.0}, "bandwidth"),
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float], name: str) -> None:
    args = {"d": 2, "dy": 1, "steps": 3, "bandwidth": 1.0, "ridge": 0.1} | kwargs
    with pytest.raises(ValueError, match=name):
        KernelRichardsonStack(**args)  # type: ignore[arg-type]
