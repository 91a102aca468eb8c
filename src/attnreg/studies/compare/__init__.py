"""The ``compare`` study: attention variants against ridge regression.

Modules: :mod:`~attnreg.studies.compare.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.compare.metrics`, :mod:`~attnreg.studies.compare.train` (one cell and the
baselines), :mod:`~attnreg.studies.compare.probe`,
:mod:`~attnreg.studies.compare.ols_transformer`, :mod:`~attnreg.studies.compare.summary`,
:mod:`~attnreg.studies.compare.figures`, :mod:`~attnreg.studies.compare.run` (the runner). This
``__init__`` stays light: the config and :data:`SPEC`, from which the registry builds
``attnreg compare``, its sweep cells and its report section."""

from attnreg.studies.compare.config import ROW_KEYS, CompareConfig, full_config, quick_config
from attnreg.studies.spec import StudySpec

SPEC = StudySpec(
    name="compare",
    config_class=CompareConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.compare.run:run",
    help="Attention variants (softmax, regression-like, whitened; data whitening, "
    "shared/separate/single W_q W_kᵀ, layer norm) trained on synthetic, diabetes and sine data "
    "against ridge and OLS; the OLS-Transformer trained from scratch; the blog's open questions "
    "answered with numbers.",
    title="compare — attention variants against ridge regression",
    ledger=True,
)

__all__ = ["ROW_KEYS", "SPEC", "CompareConfig", "full_config", "quick_config"]
