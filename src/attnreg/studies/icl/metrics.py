"""Alignment metrics between a trained model and a reference estimator (von Oswald et al. 2023).

For predictors ``f`` and ``g`` (differentiable in the query), on the same tasks:

* sensitivity cosine: mean over tasks and queries of ``cos(∂f/∂x_q, ∂g/∂x_q)`` (autograd);
* model difference: mean ``‖∂f/∂x_q − ∂g/∂x_q‖₂``;
* prediction difference: mean ``|f(x_q) − g(x_q)|``.

The sensitivity of a linear predictor ``ŷ = W x_q`` is ``W`` itself (for GD: ``W1``), so the
cosine compares the implicit weights the two models use on each task.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

PredictFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sensitivities(
    fn: PredictFn, x_ctx: torch.Tensor, y_ctx: torch.Tensor, x_query: torch.Tensor
) -> torch.Tensor:
    """``∂ŷ/∂x_q`` for every task, query and output: ``(B, M, dy, d)`` via autograd (each
    query's prediction depends on its own ``x_q`` only, so one backward per output suffices)."""
    xq = x_query.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = fn(x_ctx, y_ctx, xq)
        grads = []
        for k in range(out.shape[-1]):
            (g,) = torch.autograd.grad(out[..., k].sum(), xq, retain_graph=k + 1 < out.shape[-1])
            grads.append(g)
    return torch.stack(grads, dim=-2).detach()


def alignment(
    model: PredictFn,
    reference: PredictFn,
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
) -> dict[str, float]:
    """``cos_sensitivity``, ``model_diff`` and ``pred_diff`` of ``model`` against
    ``reference`` (module docstring)."""
    s_m = sensitivities(model, x_ctx, y_ctx, x_query).flatten(-2)
    s_r = sensitivities(reference, x_ctx, y_ctx, x_query).flatten(-2)
    cos = torch.nn.functional.cosine_similarity(s_m, s_r, dim=-1, eps=1e-30)
    with torch.no_grad():
        diff = (model(x_ctx, y_ctx, x_query) - reference(x_ctx, y_ctx, x_query)).abs()
    return {
        "cos_sensitivity": float(cos.mean()),
        "model_diff": float((s_m - s_r).norm(dim=-1).mean()),
        "pred_diff": float(diff.mean()),
    }


def task_losses(
    predict: PredictFn,
    x_ctx: torch.Tensor,
    y_ctx: torch.Tensor,
    x_query: torch.Tensor,
    y_query: torch.Tensor,
) -> torch.Tensor:
    """Each task's ``0.5 × mean((ŷ − y)²)`` over its queries and outputs, ``(B,)`` float64 (the
    study's loss, per task, so two predictors' losses can be paired over the same tasks)."""
    with torch.no_grad():
        out = predict(x_ctx, y_ctx, x_query).to(torch.float64).reshape(y_query.shape)
    return 0.5 * (out - y_query.to(torch.float64)).pow(2).flatten(1).mean(1)
