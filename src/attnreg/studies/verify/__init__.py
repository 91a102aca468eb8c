"""The ``verify`` study: the equivalence certificate of every construction.

Modules: :mod:`~attnreg.studies.verify.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.verify.references` (the independent numpy / scikit-learn references),
:mod:`~attnreg.studies.verify.certificate` (the cases, the checks, the rows),
:mod:`~attnreg.studies.verify.figures`, :mod:`~attnreg.studies.verify.run` (the runner); its
command line is built from the registry (``attnreg verify``, :mod:`attnreg.studies.command`).
Importing ``run`` here binds the name to the runner function (not the submodule of the same
name)."""

from attnreg.studies.verify.certificate import certificate
from attnreg.studies.verify.config import VerifyConfig, full_config, quick_config
from attnreg.studies.verify.run import run

__all__ = ["VerifyConfig", "certificate", "full_config", "quick_config", "run"]
