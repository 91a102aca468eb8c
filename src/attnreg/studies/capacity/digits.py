"""The Universal Hopfield grid on digits (Millidge et al. 2022): the recall fraction of every
similarity × separation cell at each ``N``, both queries (half masked, noisy), and the power
separation's recall against its degree."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnreg.core.scores import UHN_SEPARATIONS
from attnreg.core.threads import torch_threads
from attnreg.memory import GRID_SIMILARITIES
from attnreg.studies.capacity import families as fam
from attnreg.studies.capacity.config import CapacityConfig
from attnreg.studies.capacity.sweeps import Tick


def digits_grid(
    config: CapacityConfig, tick: Tick
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor]]:
    """Recall fraction of every similarity × separation cell on digits, at each ``N``."""
    images = fam.load_digits_images(config.device)
    rows: list[dict[str, Any]] = []
    panel: dict[str, torch.Tensor] = {}
    with torch_threads(1):
        _digits_cells(config, images, rows, panel, tick)
        _power_degrees(config, images, rows, tick)
    return rows, panel


def _power_degrees(
    config: CapacityConfig, images: torch.Tensor, rows: list[dict[str, Any]], tick: Tick
) -> None:
    """Recall of the power separation at each degree of ``config.digits_power_degrees`` (N =
    the first ``digits_n``, both queries, every similarity; the grid's stored images and
    queries for seed ``config.seed``); NaN where the weights ``sⁿ`` leave the float range."""
    n = config.digits_n[0]
    for query in ("mask", "noise"):
        for sim in GRID_SIMILARITIES:
            for degree in config.digits_power_degrees:
                gen = fam.cell_generator(config.seed, f"digits:{query}", 64, n)
                stored = images[torch.randperm(images.shape[0], generator=gen)[:n]]
                try:
                    recall, _, _ = fam.digits_recall(
                        stored,
                        sim,
                        "power",
                        query,
                        beta=config.grid_beta,
                        power=degree,
                        sigma=config.digits_sigma,
                        tolerance=config.digits_tolerance,
                        gen=gen,
                    )
                except ValueError:  # the weights sᵈ leave the float range: not computable
                    recall = float("nan")
                rows.append(
                    {
                        "kind": "power_degree",
                        "model": f"uhn({sim},power)",
                        "similarity": sim,
                        "query": query,
                        "n": n,
                        "power": degree,
                        "recall": recall,
                        "seed": config.seed,
                    }
                )
                tick(f"digits {query} N={n} {sim}/power^{degree}")


def _digits_cells(
    config: CapacityConfig,
    images: torch.Tensor,
    rows: list[dict[str, Any]],
    panel: dict[str, torch.Tensor],
    tick: Tick,
) -> None:
    for n in config.digits_n:
        for query in ("mask", "noise"):
            for sim in GRID_SIMILARITIES:
                for sep in UHN_SEPARATIONS:
                    recalls = []
                    for i in range(config.seeds):
                        gen = fam.cell_generator(config.seed + i, f"digits:{query}", 64, n)
                        stored = images[torch.randperm(images.shape[0], generator=gen)[:n]]
                        recall, q, out = fam.digits_recall(
                            stored,
                            sim,
                            sep,
                            query,
                            beta=config.grid_beta,
                            power=config.grid_power,
                            sigma=config.digits_sigma,
                            tolerance=config.digits_tolerance,
                            gen=gen,
                        )
                        recalls.append(recall)
                        if i == 0 and n == config.digits_n[0]:
                            panel.setdefault(f"original:{query}", stored[:8])
                            panel.setdefault(f"query:{query}", q[:8])
                            if f"{sim}/{sep}" in fam.DIGITS_PANEL_CELLS:
                                panel[f"{sim}/{sep}:{query}"] = out[:8]
                        tick(f"digits {query} N={n} {sim}/{sep}")
                    rows.append(
                        {
                            "kind": "recall",
                            "model": f"uhn({sim},{sep})",
                            "similarity": sim,
                            "separation": sep,
                            "patterns": "digits",
                            "query": query,
                            "d": 64,
                            "n": n,
                            "recall": float(np.mean(recalls)),
                            "seeds": config.seeds,
                            "beta": config.grid_beta,
                            "power": config.grid_power,
                            "tolerance": config.digits_tolerance,
                        }
                    )
