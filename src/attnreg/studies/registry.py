"""The studies attnreg knows, by name: the registry the command line, sweeps and report use.

A study is one package whose light ``__init__`` exports ``SPEC``, a
:class:`~attnreg.studies.spec.StudySpec` (config class, profiles, runner, help, report title,
its own options), and one line in :data:`PACKAGES`. Packages named in the environment
variable ``ATTNREG_STUDIES`` (comma-separated, importable from ``sys.path``) are registered
too, in this process and in every worker process a sweep or the report starts; within a
process, :func:`register` adds one. ``explain`` is not a study: it explains a given checkpoint,
and the icl study already explains the layers it trains.
"""

from __future__ import annotations

import importlib
import os

from attnreg.studies.spec import StudySpec

PACKAGES = (
    "attnreg.studies.verify",
    "attnreg.studies.compare",
    "attnreg.studies.icl",
    "attnreg.studies.capacity",
    "attnreg.studies.depth",
    "attnreg.studies.layers",
)
ENVIRONMENT = "ATTNREG_STUDIES"

STUDIES: dict[str, StudySpec] = {}


def register(package: str) -> StudySpec:
    """Import ``package``, add its ``SPEC`` to :data:`STUDIES` under ``SPEC.name`` and return
    it; a ``ValueError`` naming the package if it has no ``StudySpec`` or takes a name already
    registered by another package."""
    spec = getattr(importlib.import_module(package), "SPEC", None)
    if not isinstance(spec, StudySpec):
        raise ValueError(f"study package {package!r}: no SPEC (a StudySpec) in its __init__")
    known = STUDIES.get(spec.name)
    if known is not None and known is not spec:
        raise ValueError(f"study package {package!r}: the name {spec.name!r} is taken")
    STUDIES[spec.name] = spec
    return spec


def get_study(name: str) -> StudySpec:
    """The study called ``name``; the error lists the valid names."""
    if name not in STUDIES:
        raise ValueError(f"study: unknown value {name!r}; valid names are {', '.join(STUDIES)}")
    return STUDIES[name]


def _register_environment_packages() -> None:
    for package in [p.strip() for p in os.environ.get(ENVIRONMENT, "").split(",") if p.strip()]:
        try:
            register(package)
        except ImportError as exc:
            raise ImportError(f"{ENVIRONMENT}: cannot import study package {package!r}") from exc


for _package in PACKAGES:
    register(_package)
_register_environment_packages()
