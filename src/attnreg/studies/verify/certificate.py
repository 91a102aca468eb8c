"""``verify`` — the equivalence certificate: every construction, sequence layer and fixed-weight
stack, built from task data, run forward and compared with an independent numpy /
scikit-learn reference on the same (dtype-rounded) data, on every task shape and dtype.

The pieces, one idea each: the task shapes and their data (:mod:`~attnreg.studies.verify.cases`:
random, degenerate and extreme-scale designs); the constructions' rows
(:mod:`~attnreg.studies.verify.checks` lists them, :mod:`~attnreg.studies.verify.
construction_rows` runs them and states their condition-scaled tolerances); the sequence layers
of :mod:`attnreg.sequence`, each task read as one causal sequence
(:mod:`~attnreg.studies.verify.sequence_rows`, which states their token mapping and their
rounding-error tolerances); the fixed-weight stacks (GD, GD++, preconditioned GD,
Newton–Schulz, kernel Richardson), a row per depth, every hidden state against the iteration in
numpy (:mod:`~attnreg.studies.verify.stack_rows`, which states their error bounds); and how a
row is measured, its error measures and failed rows (:mod:`~attnreg.studies.verify.measure`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnreg.core.threads import torch_threads
from attnreg.studies.verify.cases import CASES, make_task, scale_exponent
from attnreg.studies.verify.config import VerifyConfig
from attnreg.studies.verify.construction_rows import construction_rows
from attnreg.studies.verify.sequence_rows import sequence_rows
from attnreg.studies.verify.stack_rows import stack_rows


def certificate(cfg: VerifyConfig | None = None) -> list[dict[str, Any]]:
    """Run every construction, sequence layer and stack on every case and dtype; one row per
    (construction, case, dtype), a stack's row per depth. Each dtype replays the same draws
    (seed ``cfg.seed``); the sequence and stack rows draw from their own generators, seeded by
    the case's index, so adding one leaves the others' numbers as they were."""
    cfg = cfg or VerifyConfig()
    rows: list[dict[str, Any]] = []
    with torch_threads(1):  # hundreds of tiny layers: intra-op threads only synchronise
        for dtype in cfg.dtypes:
            rng = np.random.default_rng(cfg.seed)
            for index, case in enumerate(CASES):
                data = make_task(case, dtype, rng)
                k, shape = scale_exponent(case, dtype), case.describe()
                rows += construction_rows(data, k, case, dtype, cfg, rng)
                own = np.random.default_rng([cfg.seed, index])  # leaves `rng`'s draws as they were
                rows += sequence_rows(data, k, shape, dtype, cfg, own)
                stacks = np.random.default_rng([cfg.seed, index, 1])
                rows += stack_rows(data, k, shape, dtype, cfg, stacks)
    return rows
