"""The certificate's task shapes (:data:`CASES`) and their data.

Random designs with ``N > d``, ``N = d``, ``N < d`` (rank N), several targets, a batch, an
ill-conditioned design; and the degenerate designs users have — an all-zero column, a constant
column ``c ≠ 0`` (no intercept: a full-rank design with one flat column), a collinear column
(``x₆ = x₁ − 2x₂ + x₃``, exact in float32 and float64 because the data lie on a ``2⁻¹⁰``
grid), and two extreme scales: ``X``, ``Y`` and ``X*`` multiplied by ``a = b = 2^k`` with
``k = ±664`` in float64 (``a ≈ 1.5e±200``) and ``k = ±83`` in float32 (``a ≈ 9.7e±24``). Then
``XᵀX`` (entries about ``N a²``) overflows (``k > 0``: beyond ``2^1024`` resp. ``2^128``) or
underflows to zero (``k < 0``: below ``2^-1074`` resp. ``2^-149``) in that dtype, while ``X``,
``Y`` and the answer are ordinary numbers of it.

On the ill-conditioned case the data has ``κ(X) = 10⁶`` in float64 (``κ(XᵀX) = 10¹²``) and
``κ(X) = 300`` in float32 (``κ(XᵀX) ≈ 10⁵``; float32 cannot hold ``XᵀX`` much beyond that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnreg.studies.verify.config import round_to

SCALE_EXPONENT = {"float64": 664, "float32": 83}
"""``k`` of the extreme-scale shapes: ``(2^k)²`` overflows the dtype and ``(2^-k)²`` underflows it
(float64: ``2^1328 > 2^1024``, ``2^-1328 < 2^-1074``; float32: ``2^166 > 2^128``,
``2^-166 < 2^-149``)."""
GRID = 2.0**-10
"""Spacing of the collinear shape's data: sums of a few such numbers are exact in float32."""


@dataclass(frozen=True)
class Case:
    """One task shape: ``B`` tasks of ``N`` context rows, ``d`` features, ``dy`` targets.

    ``design``: ``"random"``, ``"zero column"`` (one all-zero column per task, at a random
    position), ``"constant column"`` (one column equal to a constant ``c ≠ 0``) or
    ``"collinear"`` (the last column ``x₁ − 2x₂ + x₃``). ``scale``: ``+1`` / ``−1`` multiplies
    ``X``, ``Y`` and ``X*`` by ``2^±k`` (:data:`SCALE_EXPONENT`), ``0`` leaves them."""

    label: str
    b: int
    n: int
    d: int
    dy: int
    ill: bool = False
    design: str = "random"
    scale: int = 0

    def describe(self) -> str:
        return f"{self.label} (B={self.b}, N={self.n}, d={self.d}, dy={self.dy})"


CASES = (
    Case("N>d", 1, 32, 6, 1),
    Case("N=d", 1, 8, 8, 1),
    Case("N<d", 1, 5, 12, 1),
    Case("dy>1", 1, 24, 6, 3),
    Case("batch", 8, 24, 6, 2),
    Case("ill-conditioned", 1, 40, 8, 1, ill=True),
    Case("zero column", 2, 24, 6, 1, design="zero column"),
    Case("constant column", 1, 24, 6, 1, design="constant column"),
    Case("collinear", 2, 24, 6, 2, design="collinear"),
    Case("huge scale ×2^664 (f64) / 2^83 (f32)", 1, 32, 6, 1, scale=1),
    Case("tiny scale ×2^-664 (f64) / 2^-83 (f32)", 1, 32, 6, 1, scale=-1),
)


def condition_of_x(case: Case, dtype: str) -> float:
    """``κ(X)`` of a case's data: at most 10 if well-conditioned, 10⁶ (float64) / 300 (float32)
    if ill-conditioned (before a degenerate column is put in)."""
    if not case.ill:
        return 10.0
    return 1e6 if dtype == "float64" else 3e2


def scale_exponent(case: Case, dtype: str) -> int:
    """``k`` with ``X``, ``Y``, ``X*`` multiplied by ``2^k`` on this case (0: not scaled)."""
    return case.scale * SCALE_EXPONENT[dtype]


def _degenerate(x: np.ndarray, case: Case, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Put the case's degenerate column into one task's ``X`` (float64 values that the dtype
    holds exactly)."""
    x = x.copy()
    if case.design == "zero column":
        x[:, rng.integers(case.d)] = 0.0
    elif case.design == "constant column":
        x[:, rng.integers(case.d)] = np.round(rng.uniform(0.5, 2.0) / GRID) * GRID
    elif case.design == "collinear":
        xd = (np.round(x / GRID) * GRID).astype(np.dtype(dtype))  # exact: a 2⁻¹⁰ grid
        xd[:, -1] = xd[:, 0] - 2 * xd[:, 1] + xd[:, 2]  # in the dtype, exact on the grid
        x = xd.astype(np.float64)
    elif case.design != "random":
        raise ValueError(f"unknown design {case.design!r}")
    return x


def make_task(case: Case, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random tasks ``X = U diag(s) Vᵀ·√N`` with singular values spread over ``[1/κ, 1]``, the
    case's degenerate column, ``Y = X w + 0.1 ε``, Gaussian queries; rounded to ``dtype`` and
    returned as float64, unscaled (each row applies the extreme scale ``2^k`` itself)."""
    kappa = condition_of_x(case, dtype)
    r = min(case.n, case.d)
    xs, ys, qs = [], [], []
    for _ in range(case.b):
        u, _ = np.linalg.qr(rng.normal(size=(case.n, r)))
        v, _ = np.linalg.qr(rng.normal(size=(case.d, r)))
        s = np.logspace(0, -np.log10(kappa), r) if case.ill else rng.uniform(1 / kappa, 1, r)
        x = _degenerate((u * s) @ v.T * np.sqrt(case.n), case, dtype, rng)
        w = rng.normal(size=(case.d, case.dy))
        xs.append(x)
        ys.append(x @ w + 0.1 * rng.normal(size=(case.n, case.dy)))
        qs.append(rng.normal(size=(10, case.d)))
    return {k: round_to(np.stack(v), dtype) for k, v in (("x", xs), ("y", ys), ("q", qs))}


def gd_scale(x: np.ndarray) -> float:
    """Divide ``X`` (``(B, N, d)``) by this so that ``λ_max(XᵀX)/N ≤ 1`` for every task: the
    gradient-descent rows and the stack rows fold the data's scale into the step size this way
    (``X`` at scale ``a`` divided by ``a s`` is the same data)."""
    return float(max(np.linalg.norm(xb, 2) / np.sqrt(xb.shape[0]) for xb in x))
