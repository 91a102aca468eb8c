"""The memories' regression reader: in-context regression by an associative memory.

:class:`MemoryRegressor` answers attnreg's one signature ``predict(x_ctx, y_ctx, x_query)``
with any memory that stores keys → values (hetero-association): for each task it stores the
context rows ``x_i`` as keys with their targets ``y_i`` as values, then retrieves the queries.
One retrieval is ``Yᵀ sep(β · sim(X, x*))`` (Millidge et al. 2022), so

* :class:`~attnreg.memory.PseudoInverseMemory` (ridge λ): ``ŷ* = x* (XᵀX + λI)⁺ XᵀY`` — the
  OLS prediction (minimum-norm) for ``λ = 0``, ridge (scikit-learn ``Ridge(alpha=λ,
  fit_intercept=False)``) for ``λ > 0``; the hat-matrix reading of least squares;
* :class:`~attnreg.memory.ModernHopfield` (β): one step with values,
  ``ŷ* = softmax(β x* Xᵀ) Y`` — the Nadaraya–Watson kernel smoother
  (:class:`attnreg.KernelSmoother` with ``beta``), i.e. softmax attention;
* :class:`~attnreg.memory.UniversalHopfieldMemory`: its grid cell, e.g. euclidean × softmax
  ``ŷ* = softmax(−β ‖x* − x_i‖) Y``.

:class:`~attnreg.memory.HebbianMemory` and :class:`~attnreg.memory.DenseAssociativeMemory`
store ±1 patterns only (auto-association, no values): they cannot read out targets and are
refused.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from attnreg.core.results import check_finite_result
from attnreg.core.scaling import check_underflow
from attnreg.core.tasks import check_tasks
from attnreg.core.validation import ArrayLike


class MemoryRegressor:
    """Regression by a hetero-associative memory: ``predict`` stores each task's context
    ``x_i → y_i`` in a fresh memory and retrieves the queries (module docstring for what each
    memory computes).

    ``memory``: a memory instance (used as a template: each task stores into a copy, the
    instance itself is not changed) or a zero-argument factory (e.g. the class). It must store
    values: ``store(keys, values)`` and ``retrieve(queries)``.
    """

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        template = self._fresh()
        store, retrieve = getattr(template, "store", None), getattr(template, "retrieve", None)
        if not callable(store) or not callable(retrieve):
            raise ValueError(
                f"memory: {type(template).__name__} has no store/retrieve; pass an associative "
                "memory or a factory of one"
            )
        if "values" not in inspect.signature(store).parameters:
            raise ValueError(
                f"memory: {type(template).__name__} stores patterns only (auto-association, no "
                "values), so it cannot read out targets; use PseudoInverseMemory, ModernHopfield "
                "or UniversalHopfieldMemory"
            )

    def _fresh(self) -> Any:
        """A fresh memory; one that can warn of a rank-deficient store does (``warn_rank``):
        as a regression, a minimum-norm answer names the rank it found, like every predictor."""
        if hasattr(self.memory, "store"):
            fresh = copy.deepcopy(self.memory)
        elif callable(self.memory):
            fresh = self.memory()
        else:
            fresh = None
        if fresh is not None:
            if hasattr(fresh, "warn_rank"):
                fresh.warn_rank = True
            return fresh
        raise ValueError(
            f"memory: expected a memory or a factory of one, got {type(self.memory).__name__}"
        )

    def __repr__(self) -> str:
        return f"MemoryRegressor({self.memory!r})"

    def _retrieve_all(self, xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        """One fresh memory per task: store ``x_i → y_i``, retrieve the queries."""
        outs = [self._fresh().store(xc[b], yc[b]).retrieve(xq[b]) for b in range(xc.shape[0])]
        return torch.stack(outs)

    def predict(self, x_ctx: ArrayLike, y_ctx: ArrayLike, x_query: ArrayLike) -> torch.Tensor:
        """The one signature ``(B, N, d), (B, N, dy), (B, M, d) -> (B, M, dy)`` (or
        unbatched): one fresh memory per task, keys ``x_ctx``, values ``y_ctx``, queries
        ``x_query``; in the inputs' common dtype."""
        xc, yc, xq, shape = check_tasks(x_ctx, y_ctx, x_query)
        if xq.shape[1] == 0:
            return xq.new_zeros(shape)
        out = check_finite_result(self._retrieve_all(xc, yc, xq))
        return check_underflow(out, self._retrieve_all, xc, yc, xq).reshape(shape)
