"""P1: batched OLS through the constructed OLS-Transformer (Cholesky whitening, construction +
forward) against ``torch.linalg.lstsq``, the batched Cholesky normal equations (the floor) and a
scikit-learn loop, timed in alternation on the same tasks."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from attnreg.bench.common import BenchResult, fraction_of_rate, median, time_interleaved
from attnreg.bench.limits import Limit, judge, target_text
from attnreg.bench.sizes import Sizes
from attnreg.constructions.ols import OLSTransformer

LIMITS = (
    Limit("time / lstsq", "<=", 1.0, "{op} {bound:.1f}× lstsq+predict"),
    Limit("time / cholesky floor", "<=", 3.0, "{op} {bound:g}× Cholesky normal equations"),
    Limit("sklearn loop / time", ">=", 20.0, "{op} {bound:g}× faster than a scikit-learn loop"),
)


def p1_data(b: int, n: int, d: int, m: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``B`` linear tasks ``y = X w + 0.1 ε`` in float64: context ``(B, N, d)``, targets
    ``(B, N, 1)``, queries ``(B, M, d)``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, d, generator=gen, dtype=torch.float64)
    w = torch.randn(b, d, 1, generator=gen, dtype=torch.float64)
    y = x @ w + 0.1 * torch.randn(b, n, 1, generator=gen, dtype=torch.float64)
    xq = torch.randn(b, m, d, generator=gen, dtype=torch.float64)
    return x, y, xq


def lstsq_predict(x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
    """Reference: batched ``torch.linalg.lstsq`` then ``X* β̂``."""
    return xq @ torch.linalg.lstsq(x, y).solution


def cholesky_predict(x: torch.Tensor, y: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
    """The floor: normal equations ``XᵀX β = XᵀY`` by a batched Cholesky solve, then ``X* β``."""
    chol = torch.linalg.cholesky(x.mT @ x)
    return xq @ torch.cholesky_solve(x.mT @ y, chol)


def sklearn_loop(x: np.ndarray, y: np.ndarray, xq: np.ndarray) -> np.ndarray:
    """Reference: a Python loop of scikit-learn ``LinearRegression(fit_intercept=False)``."""
    from sklearn.linear_model import LinearRegression

    return np.stack(
        [
            LinearRegression(fit_intercept=False).fit(a, b).predict(q)
            for a, b, q in zip(x, y, xq, strict=True)
        ]
    )


def bench_p1(sizes: Sizes, repeat: int, rate: float) -> BenchResult:
    """OLS-Transformer (Cholesky whitening, construction + forward) against lstsq, Cholesky
    normal equations and a scikit-learn loop."""
    b, n, d, m = sizes.p1_tasks, sizes.p1_n, sizes.p1_d, sizes.p1_queries
    x, y, xq = p1_data(b, n, d, m)
    xn, yn, xqn = x.numpy(), y.numpy(), xq.numpy()
    layer = OLSTransformer(method="cholesky")

    def construction() -> object:
        return layer.predict(x, y, xq)

    # The torch workloads alternate among themselves; the scikit-learn loop alternates with the
    # construction on its own. In one four-way alternation the ~0.5 s scikit-learn loop ran
    # right before the construction in every round, and whatever runs first after it runs cold
    # (measured: 30-40 % slower at that position, the construction and the Cholesky floor
    # alike), so the ratios were biased against the construction. The speedup over
    # scikit-learn is still measured in alternation, against the construction run right after
    # the loop (the conservative side).
    fns: dict[str, Callable[[], object]] = {
        "construction": construction,
        "lstsq": lambda: lstsq_predict(x, y, xq),
        "cholesky": lambda: cholesky_predict(x, y, xq),
    }
    times = time_interleaved(fns, repeat)
    sk_times = time_interleaved(
        {"sklearn": lambda: sklearn_loop(xn, yn, xqn), "construction": construction}, repeat
    )
    med = {k: median(v) for k, v in times.items()}
    med["sklearn"] = median(sk_times["sklearn"])
    med["construction_after_sklearn"] = median(sk_times["construction"])
    for method in ("svd", "eigh"):  # the other whitenings, for the record
        other = OLSTransformer(method=method)

        def other_predict(o: OLSTransformer = other) -> object:
            return o.predict(x, y, xq)

        med[f"construction_{method}"] = median(
            time_interleaved({"m": other_predict}, min(repeat, 3))["m"]
        )
    vs_lstsq = med["construction"] / med["lstsq"]
    vs_chol = med["construction"] / med["cholesky"]
    speedup = med["sklearn"] / med["construction_after_sklearn"]
    err = float((layer.predict(x, y, xq) - lstsq_predict(x, y, xq)).abs().max())
    # useful work: the normal equations (XᵀX, XᵀY, Cholesky, two solves, predictions)
    flops = b * (2 * n * d * d + 2 * n * d + d**3 / 3 + 2 * d * d + 2 * m * d)
    checks = judge(
        LIMITS,
        {
            "time / lstsq": vs_lstsq,
            "time / cholesky floor": vs_chol,
            "sklearn loop / time": speedup,
        },
    )
    return BenchResult(
        id="P1",
        workload=f"OLS-Transformer construction + forward, B={b} tasks, N={n}, d={d}, "
        f"{m} queries/task, float64, Cholesky whitening",
        value=vs_lstsq,
        unit="× lstsq time",
        target=target_text(LIMITS),
        passed=all(c["passed"] for c in checks),
        reference="torch.linalg.lstsq + predict (also: batched Cholesky solve; sklearn loop)",
        details={
            "checks": checks,
            "seconds": med,
            "ratio_vs_cholesky": vs_chol,
            "speedup_vs_sklearn": speedup,
            "max_abs_diff_vs_lstsq": err,
            "fraction_of_matmul_rate": fraction_of_rate(flops, med["construction"], rate),
        },
    )
