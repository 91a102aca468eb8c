"""The ``compare`` study: attention variants against ridge regression.

Modules: :mod:`~attnreg.studies.compare.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.compare.metrics`, :mod:`~attnreg.studies.compare.train` (one cell and the
baselines), :mod:`~attnreg.studies.compare.probe`,
:mod:`~attnreg.studies.compare.ols_transformer`, :mod:`~attnreg.studies.compare.summary`,
:mod:`~attnreg.studies.compare.figures`, :mod:`~attnreg.studies.compare.run` (the runner); its
command line is built from the registry (``attnreg compare``, :mod:`attnreg.studies.command`).
Importing ``run`` here binds the name to the runner function (not the submodule of the same
name)."""

from attnreg.studies.compare.config import ROW_KEYS, CompareConfig, full_config, quick_config
from attnreg.studies.compare.run import run

__all__ = ["ROW_KEYS", "CompareConfig", "full_config", "quick_config", "run"]
