"""Training one causal layer on in-context regression tasks with the one training loop."""

from __future__ import annotations

import torch

from attnreg.data.tasks import TaskSampler
from attnreg.progress import Progress
from attnreg.studies.layers.config import LayersConfig
from attnreg.studies.layers.curves import sequence
from attnreg.studies.layers.model import InContextLayer
from attnreg.training import TrainConfig, TrainResult, generator, train


def train_layer(
    model: InContextLayer,
    sampler: TaskSampler,
    cfg: LayersConfig,
    seed: int,
    progress: Progress,
    name: str,
) -> TrainResult:
    """Adam (cosine schedule, clipping ``cfg.clip``) on fresh batches of ``cfg.batch`` tasks
    (float32) from a generator seeded by ``seed``; the loss is ``0.5 × MSE`` of the read-out at
    every position, averaged over positions (each context size counts alike)."""
    gen = generator(seed)

    def loss_fn(step: int) -> torch.Tensor:
        x, y = sequence(sampler.sample(cfg.batch, gen, torch.float32))
        return 0.5 * (model.positions(x, y) - y[:, 1:]).pow(2).mean()

    config = TrainConfig(
        steps=cfg.steps,
        lr=cfg.lr,
        schedule="cosine",
        clip=cfg.clip,
        seed=seed,
        eval_every=cfg.steps,
        plateau_window=max(50, cfg.steps // 20),
    )
    return train(model, loss_fn, config, progress=progress, description=name, generators=(gen,))
