"""The compare study's further sections, each answering one question of a source on the same
data modes: a function ``(config, datasets) -> Section`` (``datasets``: the first seed's
:class:`~attnreg.data.regression.RegressionData` per data mode), run after the attention cells
in this order, each as a progress stage with its label.

Every section's rows carry a ``"section"`` key naming it (the attention cells' rows have none),
and each section is switched off by its config field (it then returns an empty section). They
compute in float64 on the CPU (closed forms and small fits; only ``conventions`` trains, two
small layers per data mode) with generators seeded from ``config.seed``:

* ``conventions`` (:mod:`~attnreg.studies.compare.conventions`) — the "Everything is matter"
  conventions as written beside attnreg's;
* ``density`` (:mod:`~attnreg.studies.compare.density`) — the energy family as an in-context
  regression operator: memorise or generalise;
* ``memories`` (:mod:`~attnreg.studies.compare.memories`) — the OLS-Transformer's slow and
  fast memory swapped between two contexts;
* ``tang`` — two sections, one claim each, whose rows both carry ``"section": "tang"`` (and a
  ``"part"``): whitened vs plain similarity on correlated patterns
  (:mod:`~attnreg.studies.compare.tang_retrieval`); scale vs correlation in attention
  regression (:mod:`~attnreg.studies.compare.tang_scaling`);
* ``locality`` (:mod:`~attnreg.studies.compare.locality`) — participation ratio and distance
  of the rows each query draws on.
"""

from __future__ import annotations

from collections.abc import Callable

from attnreg.data.regression import RegressionData
from attnreg.studies.common import Section
from attnreg.studies.compare import (
    conventions,
    density,
    locality,
    memories,
    tang_retrieval,
    tang_scaling,
)
from attnreg.studies.compare.config import CompareConfig

SectionFn = Callable[[CompareConfig, dict[str, RegressionData]], Section]

SECTIONS: list[tuple[str, SectionFn]] = [
    ('"Everything is matter" conventions', conventions.section),
    ("memory density vs generalisation", density.section),
    ("slow and fast memory", memories.section),
    ("Tang: correlated-pattern retrieval", tang_retrieval.section),
    ("Tang: scale vs correlation", tang_scaling.section),
    ("global vs local attention rows", locality.section),
]
