"""The ``verify`` study: the equivalence certificate of every construction.

Modules: :mod:`~attnreg.studies.verify.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.verify.references` (the independent numpy / scikit-learn references),
:mod:`~attnreg.studies.verify.run` (the cases, the checks and the runners ``run`` (rows) and
``run_study``); its command line is built from the registry (``attnreg verify``,
:mod:`attnreg.studies.command`). Importing ``run`` here binds the name to the rows runner (not
the submodule of the same name)."""

from attnreg.studies.verify.config import VerifyConfig, full_config, quick_config
from attnreg.studies.verify.run import run, run_study

__all__ = ["VerifyConfig", "full_config", "quick_config", "run", "run_study"]
