"""The P4 workload of ``attnreg bench``: one linear self-attention layer trained on the von
Oswald et al. (2023) in-context regression tasks until its loss is within a target of one
line-searched gradient-descent step's."""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch

from attnreg.core.threads import torch_threads
from attnreg.core.validation import check_positive_int
from attnreg.data.tasks import TaskSampler, eval_loss, line_search_eta, query_loss
from attnreg.estimators import GD
from attnreg.models import TrainableLSA
from attnreg.training import TrainConfig, generator, train


def train_one_layer_to_gd(
    seed: int = 0,
    target: float = 1.02,
    lr: float = 3e-2,
    batch: int = 2048,
    eval_tasks: int = 10000,
    max_steps: int = 3000,
    eval_every: int = 10,
    threads: int | None = 1,
) -> dict[str, Any]:
    """Performance target P4 (``attnreg bench``), end to end: sample 10,000 evaluation tasks of the
    von Oswald setup, line-search the one-step-GD η (exactly, on 10,000 separate tasks), and
    train a one-layer LSA (identifiable products ``KQ``, ``PV``; Adam lr 3e-2, batch 2048,
    float32) until its evaluation loss is within ``target ×`` the GD loss on the same tasks.

    Returns wall and CPU seconds (the whole workload), steps, both losses, both η's. With
    ``threads`` the intra-op thread count is set for the call (1 by default: each step is a few
    small GEMMs, and a second thread costs more than it saves, especially on a shared machine).
    """
    check_positive_int("max_steps", max_steps)
    with torch_threads(threads or None):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sampler = TaskSampler()
        test = sampler.sample(eval_tasks, generator(10**6 + seed), torch.float32)
        fit = sampler.sample(eval_tasks, generator(2 * 10**6 + seed), torch.float32)
        eta = line_search_eta(fit)
        gd_loss = eval_loss(GD(eta, 1), test)
        model = TrainableLSA(sampler.d, init_scale=0.05, seed=seed)
        gen = generator(seed)

        def loss_fn(step: int) -> torch.Tensor:
            t = sampler.sample(batch, gen, torch.float32)
            return query_loss(model.forward_predict(t.x_ctx, t.y_ctx, t.x_query), t.y_query)

        def eval_fn() -> float:
            out = model.forward_predict(test.x_ctx, test.y_ctx, test.x_query)
            return float(query_loss(out, test.y_query))

        cfg = TrainConfig(
            steps=max_steps,
            lr=lr,
            clip=None,
            seed=seed,
            eval_every=eval_every,
            stop_below=target * gd_loss,
            plateau_window=50,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = train(model, loss_fn, cfg, eval_fn, progress=False, description="P4")
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    final = result.evals[-1][1]
    return {
        "seed": seed,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "steps": result.steps_run,
        "reached": result.stopped == "stop_below",
        "test_loss": final,
        "gd_loss": gd_loss,
        "ratio": final / gd_loss,
        "learned_eta": model.learned_eta(),
        "gd_eta": eta,
        "threads": torch.get_num_threads() if not threads else threads,
    }
