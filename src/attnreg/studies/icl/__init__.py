"""The ``icl`` study: trained linear transformers learn gradient descent (von Oswald et al.
2023).

Modules: :mod:`~attnreg.studies.icl.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.icl.references`, :mod:`~attnreg.studies.icl.train`,
:mod:`~attnreg.studies.icl.sweeps`, :mod:`~attnreg.studies.icl.metrics`,
:mod:`~attnreg.studies.icl.figures`, :mod:`~attnreg.studies.icl.run` (the runner); its command
line is built from the registry (``attnreg icl``, :mod:`attnreg.studies.command`). Importing
``run`` here binds the name to the runner function (not the submodule of the same name)."""

from attnreg.studies.icl.config import MODEL_SPECS, ICLConfig, ModelSpec, full_config, quick_config
from attnreg.studies.icl.run import JSON_KEYS, json_rows, run

__all__ = [
    "JSON_KEYS",
    "MODEL_SPECS",
    "ICLConfig",
    "ModelSpec",
    "full_config",
    "json_rows",
    "quick_config",
    "run",
]
