"""In-context linear-regression task samplers.

A task is ``(x_ctx, y_ctx, x_query, y_query)`` with ``y = w·α_teacher ᵀ x + ε``; batches of
tasks are drawn at once (no Python per-task work) from a seeded ``torch.Generator``.

* von Oswald et al. (2023), "Transformers learn in-context by gradient descent" (their code's
  convention): ``d = N = 10``, ``x ~ U(−0.5, 0.5)``, ``w ~ N(0, I)``, ``y = wᵀx``, loss
  ``0.5 × MSE`` on the query, evaluation on 10,000 tasks — :func:`von_oswald_tasks`.
* Ahn et al. (2023): Gaussian inputs ``x ~ N(0, Σ)`` with a chosen covariance —
  ``TaskSampler(inputs="gaussian", covariance=Σ)``; :func:`random_covariance` makes a ``Σ``
  with a set condition number.
* Garg et al. (2022): loss against the number of context examples — sample with another
  ``n_ctx``.
* Noisy labels (``noise_std``) and out-of-distribution shifts: inputs scaled by
  ``input_scale``, the teacher ``w`` by ``teacher_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from attnreg.core.validation import (
    ArrayLike,
    as_tensor,
    check_choice,
    check_nonnegative,
    check_positive,
    check_positive_int,
)

INPUTS = ("uniform", "gaussian")


@dataclass
class Tasks:
    """A batch of B regression tasks: ``x_ctx (B, N, d)``, ``y_ctx (B, N, dy)``,
    ``x_query (B, M, d)``, ``y_query (B, M, dy)`` and the teachers ``w (B, dy, d)``."""

    x_ctx: torch.Tensor
    y_ctx: torch.Tensor
    x_query: torch.Tensor
    y_query: torch.Tensor
    w: torch.Tensor

    def __len__(self) -> int:
        return int(self.x_ctx.shape[0])

    def subset(self, index: slice | torch.Tensor) -> Tasks:
        """The tasks at ``index`` (a slice or index tensor over the batch)."""
        return Tasks(
            self.x_ctx[index],
            self.y_ctx[index],
            self.x_query[index],
            self.y_query[index],
            self.w[index],
        )

    def with_context(self, n: int) -> Tasks:
        """The same tasks with only the first ``n`` context examples."""
        check_positive_int("n", n)
        if n > self.x_ctx.shape[1]:
            raise ValueError(f"n: {n} exceeds the stored context size {self.x_ctx.shape[1]}")
        return Tasks(self.x_ctx[:, :n], self.y_ctx[:, :n], self.x_query, self.y_query, self.w)

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Tasks:
        return Tasks(
            *(
                t.to(device=device, dtype=dtype)
                for t in (self.x_ctx, self.y_ctx, self.x_query, self.y_query, self.w)
            )
        )


def query_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The von Oswald loss: ``0.5 × mean((ŷ − y)²)`` over tasks, queries and outputs."""
    return 0.5 * (prediction - target).pow(2).mean()


def random_covariance(
    d: int, condition: float = 10.0, seed: int = 0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``Σ = U diag(λ) Uᵀ`` with ``U`` a random rotation and ``λ`` log-spaced from 1 down to
    ``1/condition``, rescaled so that ``tr Σ = d`` (Ahn et al. 2023 use such anisotropic
    Gaussians to show preconditioning)."""
    check_positive_int("d", d)
    check_positive("condition", condition)
    if condition < 1:
        raise ValueError(f"condition: must be >= 1, got {condition}")
    gen = torch.Generator().manual_seed(int(seed))
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=torch.float64))
    lam = float(condition) ** -torch.linspace(0, 1, d, dtype=torch.float64)
    lam = lam * d / lam.sum()
    return ((q * lam) @ q.T).to(dtype)


@dataclass
class TaskSampler:
    """Draws batches of linear-regression tasks ``y = (α_t w)ᵀ (α_x x) + ε``.

    ``inputs="uniform"``: ``x ~ U(−input_range, input_range)^d`` (von Oswald: 0.5);
    ``inputs="gaussian"``: ``x ~ N(0, Σ)`` with ``Σ = covariance`` (identity if ``None``).
    ``w ~ N(0, I)`` of shape ``(dy, d)``; ``ε ~ N(0, noise_std²)`` on every label (context and
    query). ``input_scale = α_x`` and ``teacher_scale = α_t`` shift the distribution (the OOD
    sweeps of von Oswald et al. 2023).
    """

    d: int = 10
    n_ctx: int = 10
    n_query: int = 1
    dy: int = 1
    inputs: str = "uniform"
    input_range: float = 0.5
    covariance: ArrayLike | None = None
    noise_std: float = 0.0
    input_scale: float = 1.0
    teacher_scale: float = 1.0

    def __post_init__(self) -> None:
        check_positive_int("d", self.d)
        check_positive_int("n_ctx", self.n_ctx)
        check_positive_int("n_query", self.n_query)
        check_positive_int("dy", self.dy)
        check_choice("inputs", self.inputs, INPUTS)
        check_positive("input_range", self.input_range)
        check_nonnegative("noise_std", self.noise_std)
        check_positive("input_scale", self.input_scale)
        check_positive("teacher_scale", self.teacher_scale)
        self._chol: torch.Tensor | None = None
        if self.covariance is not None:
            cov = as_tensor("covariance", self.covariance, ndim=(2,), dtype=torch.float64)
            if cov.shape != (self.d, self.d):
                raise ValueError(
                    f"covariance: expected shape ({self.d}, {self.d}) for d = {self.d}, "
                    f"got {tuple(cov.shape)}"
                )
            if not torch.allclose(cov, cov.T, atol=1e-10 * float(cov.abs().max())):
                raise ValueError("covariance: must be symmetric")
            chol, info = torch.linalg.cholesky_ex(cov)
            if int(info) != 0:
                raise ValueError("covariance: must be positive definite")
            self._chol = chol

    @property
    def input_covariance(self) -> torch.Tensor:
        """``E[x xᵀ]`` of the inputs (float64), including ``input_scale``."""
        a2 = self.input_scale**2
        if self.inputs == "uniform":
            return torch.eye(self.d, dtype=torch.float64) * (self.input_range**2 / 3) * a2
        if self._chol is None:
            return torch.eye(self.d, dtype=torch.float64) * a2
        return (self._chol @ self._chol.T) * a2

    def shifted(self, **changes: Any) -> TaskSampler:
        """A copy with some fields changed (e.g. ``input_scale=2.0``, ``n_ctx=5``)."""
        return replace(self, **changes)

    def sample(
        self,
        batch: int,
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> Tasks:
        """``batch`` fresh tasks from ``generator`` (CPU generator; results moved to ``device``)."""
        check_positive_int("batch", batch)
        b, n, m, d, dy = batch, self.n_ctx, self.n_query, self.d, self.dy
        if self.inputs == "uniform":
            x = (torch.rand(b, n + m, d, generator=generator, dtype=dtype) * 2 - 1) * (
                self.input_range
            )
        else:
            x = torch.randn(b, n + m, d, generator=generator, dtype=dtype)
            if self._chol is not None:
                x = x @ self._chol.to(dtype).T
        x = x * self.input_scale
        w = torch.randn(b, dy, d, generator=generator, dtype=dtype) * self.teacher_scale
        y = x @ w.mT
        if self.noise_std > 0:
            y = y + self.noise_std * torch.randn(b, n + m, dy, generator=generator, dtype=dtype)
        tasks = Tasks(x[:, :n], y[:, :n], x[:, n:], y[:, n:], w)
        return tasks.to(device=device) if str(device) != "cpu" else tasks


def von_oswald_tasks(**changes: Any) -> TaskSampler:
    """The von Oswald et al. (2023) setup: ``d = N = 10``, one query, ``x ~ U(−0.5, 0.5)``,
    ``w ~ N(0, I)``, noise-free (override any field by keyword)."""
    return TaskSampler(**changes)


def eval_loss(predictor: Any, tasks: Tasks) -> float:
    """``0.5 × MSE`` of ``predictor`` on the tasks' queries: any object with
    ``predict(x_ctx, y_ctx, x_query)`` or such a callable (your own ``nn.Module`` included),
    given the tasks' tensors as they are (cast them inside if the model wants float32); run
    without gradients, rank and conditioning warnings silenced."""
    import warnings

    from attnreg.core.whitening import ConditioningWarning, RankWarning

    predict = predictor.predict if hasattr(predictor, "predict") else predictor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RankWarning)
        warnings.simplefilter("ignore", ConditioningWarning)
        with torch.no_grad():
            out = predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float(query_loss(out.to(torch.float64).reshape(tasks.y_query.shape), tasks.y_query))


def line_search_eta(tasks: Tasks) -> float:
    """The one-step GD η minimising the query loss on ``tasks``: with ``g = (1/N) x_qᵀ XᵀY``
    the prediction is ``η g``, so the line search is exact, ``η* = ⟨g, y_q⟩ / ⟨g, g⟩``."""
    from attnreg.estimators import GD

    g = GD(1.0, 1).predict(tasks.x_ctx, tasks.y_ctx, tasks.x_query)
    return float((g * tasks.y_query).sum() / (g * g).sum())
