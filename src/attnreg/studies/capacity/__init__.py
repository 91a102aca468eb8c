"""The ``capacity`` study: associative memory from linear to exponential capacity.

Modules: :mod:`~attnreg.studies.capacity.config` (settings and profiles, a leaf),
:mod:`~attnreg.studies.capacity.families` (the memory families and their recall criteria),
:mod:`~attnreg.studies.capacity.sweeps` (the ``N_max(d)`` search),
:mod:`~attnreg.studies.capacity.pool` (the same in worker processes),
:mod:`~attnreg.studies.capacity.curves`, :mod:`~attnreg.studies.capacity.summary` and
:mod:`~attnreg.studies.capacity.energy_summary` (the answers),
:mod:`~attnreg.studies.capacity.figures`, :mod:`~attnreg.studies.capacity.run` (the runner).
This ``__init__`` stays light: the config and :data:`SPEC`, from which the registry builds
``attnreg capacity``, its sweep cells and its report section."""

from attnreg.studies.capacity.config import CapacityConfig, full_config, quick_config
from attnreg.studies.spec import StudySpec

SPEC = StudySpec(
    name="capacity",
    config_class=CapacityConfig,
    quick=quick_config,
    full=full_config,
    runner="attnreg.studies.capacity.run:run",
    help="Associative-memory capacity N_max(d) of the pseudo-inverse (regression) memory, "
    "Hebbian Hopfield, dense associative memories and softmax modern Hopfield, with theory "
    "curves; the Universal Hopfield similarity × separation grid on scikit-learn's digits.",
    title="capacity — associative memory from linear to exponential",
    json_view="attnreg.studies.capacity.run:json_rows",
    ledger=True,
)


__all__ = ["SPEC", "CapacityConfig", "full_config", "quick_config"]
