"""Training the icl study's models and the weight-space checks of a trained one-layer LSA
(von Oswald et al. 2023)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnreg.data.tasks import Tasks, TaskSampler, eval_loss, query_loss, random_covariance
from attnreg.estimators import optimal_preconditioner
from attnreg.models import SoftmaxAttention, TokenModel, TrainableLSA, gd_products
from attnreg.progress import Progress
from attnreg.studies.icl.config import ICLConfig, ModelSpec
from attnreg.studies.icl.metrics import alignment
from attnreg.studies.icl.references import Reference
from attnreg.training import TrainConfig, TrainResult, generator, train


def make_sampler(cfg: ICLConfig, kind: str) -> TaskSampler:
    """The von Oswald sampler (``"uniform"``) or Gaussian inputs with a random covariance of
    condition number ``gaussian_condition`` (``"gaussian"``, Ahn et al. 2023)."""
    if kind == "uniform":
        return TaskSampler(d=cfg.d, n_ctx=cfg.n_ctx)
    cov = random_covariance(cfg.d, cfg.gaussian_condition, seed=cfg.seed)
    cov = cov / 12  # same trace as U(−0.5, 0.5): tr Σ = d/12
    return TaskSampler(d=cfg.d, n_ctx=cfg.n_ctx, inputs="gaussian", covariance=cov)


def build_model(spec: ModelSpec, cfg: ICLConfig, seed: int) -> TokenModel:
    """A fresh model for ``spec`` with a small seeded initialisation."""
    if spec.kind == "softmax":
        return SoftmaxAttention(
            cfg.d, 1, spec.layers, spec.heads, spec.recurrent, cfg.init_scale, seed
        )
    return TrainableLSA(
        cfg.d, 1, spec.layers, spec.heads, spec.recurrent, spec.variant, cfg.init_scale, seed
    )


def train_model(
    model: TokenModel,
    sampler: TaskSampler,
    test: Tasks,
    cfg: ICLConfig,
    steps: int,
    seed: int,
    reference: Reference | None = None,
    stop_below: float | None = None,
    eval_every: int | None = None,
    name: str = "train",
    history: list[dict[str, float]] | None = None,
    plateau_reference: float | None = None,
    progress: Progress | None = None,
) -> TrainResult:
    """Adam on fresh batches of ``cfg.batch`` tasks from ``sampler`` (float32), evaluated on
    ``test`` every ``eval_every`` steps; alignment with ``reference`` is appended to
    ``history`` at each evaluation when a list is given."""
    device = torch.device(cfg.device)
    model.to(device)
    gen = generator(seed)
    test32 = test.to(device=device, dtype=torch.float32)
    n_align = min(cfg.alignment_tasks, len(test))
    align = test.subset(slice(0, n_align))

    def loss_fn(step: int) -> torch.Tensor:
        t = sampler.sample(cfg.batch, gen, torch.float32, device)
        return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

    def eval_fn() -> float:
        loss = float(
            query_loss(
                model.forward_predict(test32.x_ctx, test32.y_ctx, test32.x_query), test32.y_query
            )
        )
        if history is not None and reference is not None:
            metrics = alignment(
                model_fn(model),
                reference.predictor.predict,
                align.x_ctx,
                align.y_ctx,
                align.x_query,
            )
            history.append({"step": float(len(losses_seen)), "test_loss": loss, **metrics})
        return loss

    losses_seen: list[int] = []

    def counted_loss(step: int) -> torch.Tensor:
        losses_seen.append(step)
        return loss_fn(step)

    tc = TrainConfig(
        steps=steps,
        lr=cfg.lr,
        schedule=cfg.schedule if stop_below is None else "constant",
        clip=cfg.clip,
        seed=seed,
        eval_every=eval_every or cfg.eval_every,
        stop_below=stop_below,
        reference_loss=plateau_reference,
        plateau_window=max(50, steps // 20),
    )
    return train(
        model, counted_loss, tc, eval_fn, progress=progress or Progress.quiet(), description=name
    )


def model_fn(model: TokenModel) -> Callable[..., torch.Tensor]:
    """The model as a differentiable float64 function of (x_ctx, y_ctx, x_query)."""

    def fn(xc: torch.Tensor, yc: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
        dev = next(model.parameters()).device
        return model.forward_predict(xc.to(dev), yc.to(dev), xq.to(dev)).to(xq.device)

    return fn


def interpolation_loss(model: TrainableLSA, eta: float, test: Tasks) -> float | None:
    """Loss of ``θ = (θ_TF + θ_GD)/2`` after scale normalisation (one-layer, one-head models)."""
    if model.n_layers != 1 or model.heads != 1:
        return None
    kq, pv = model.normalised_products()
    kq_gd, pv_gd = gd_products(model.d, model.dy, eta, kq.dtype)
    mid = TrainableLSA.from_products((kq[0] + kq_gd) / 2, (pv[0] + pv_gd) / 2, dy=model.dy)
    return eval_loss(mid, test)


def preconditioner_cosine(model: TrainableLSA, sampler: TaskSampler) -> float:
    """Cosine between the preconditioner a one-layer LSA applies (its summed heads'
    :meth:`~attnreg.models.TrainableLSA.step_matrix` ``Γ``) and the optimal ``Γ*`` of Ahn et
    al. (2023), both flattened (1 = the same up to scale)."""
    learned = model.step_matrix()
    optimal = optimal_preconditioner(sampler.input_covariance, sampler.n_ctx)
    return float(
        torch.nn.functional.cosine_similarity(
            learned.reshape(1, -1), optimal.to(learned.dtype).reshape(1, -1)
        )
    )
