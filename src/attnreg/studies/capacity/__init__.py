"""The ``capacity`` study: associative memory from linear to exponential capacity.

Modules: :mod:`~attnreg.studies.capacity.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.capacity.families` (the memory families and their recall criteria),
:mod:`~attnreg.studies.capacity.sweeps` (the ``N_max(d)`` search),
:mod:`~attnreg.studies.capacity.pool` (the same in worker processes),
:mod:`~attnreg.studies.capacity.summary`, :mod:`~attnreg.studies.capacity.figures`,
:mod:`~attnreg.studies.capacity.run` (the runner); its command line is built from the registry
(``attnreg capacity``, :mod:`attnreg.studies.command`). Importing ``run`` here binds the name to
the runner function (not the submodule of the same name)."""

from attnreg.studies.capacity.config import CapacityConfig, full_config, quick_config
from attnreg.studies.capacity.run import JSON_KEYS, json_rows, run

__all__ = ["JSON_KEYS", "CapacityConfig", "full_config", "json_rows", "quick_config", "run"]
