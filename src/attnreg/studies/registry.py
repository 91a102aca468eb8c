"""The studies attnreg knows, by name: their config class, profiles and runner.

Each study package provides a config dataclass (every field with a default, one of them
``seed``), a runner ``run(config, progress) -> StudyResult`` that computes and writes nothing,
and ``quick_config()`` / ``full_config()`` for its profiles. :meth:`StudySpec.run` is the one
protocol the command line, the sweeps and the report use: run the study, then write the result
into ``out_dir`` if one is given. ``explain`` is not listed: it explains a given checkpoint,
and the icl study already explains the layers it trains. Modules are imported lazily, so a
broken or slow study never stops the others from being listed or run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from attnreg.progress import Progress
from attnreg.studies.common import StudyResult

if TYPE_CHECKING:  # the config modules are leaves: no cycle, and nothing heavy at run time
    from attnreg.studies.capacity.config import CapacityConfig
    from attnreg.studies.compare.config import CompareConfig
    from attnreg.studies.icl.config import ICLConfig
    from attnreg.studies.verify.config import VerifyConfig

    StudyConfig: TypeAlias = VerifyConfig | CompareConfig | ICLConfig | CapacityConfig


@dataclass(frozen=True)
class StudySpec:
    """Where a study lives: its package ``module`` with ``config_class``, ``run``,
    ``quick_config()`` and ``full_config()``; ``cli`` is its command."""

    name: str
    module: str
    config_class: str
    cli: str = ""

    def config_cls(self) -> type:
        """The study's config dataclass."""
        cls: type = getattr(importlib.import_module(self.module), self.config_class)
        return cls

    def profile(self, name: str = "quick") -> StudyConfig:
        """A config instance for the ``quick`` or ``full`` profile: the module's
        ``quick_config()`` / ``full_config()`` (another name: the config's defaults)."""
        factory = getattr(importlib.import_module(self.module), f"{name}_config", None)
        config: StudyConfig = factory() if callable(factory) else self.config_cls()()
        return config

    def run(
        self,
        config: StudyConfig,
        out_dir: str | Path | None = None,
        progress: Progress | None = None,
    ) -> StudyResult:
        """Run the study with ``config`` (stages shown on ``progress``), then write the result
        into ``out_dir`` (:meth:`StudyResult.write`) if given."""
        fn = importlib.import_module(self.module).run
        result = fn(config, progress or Progress.quiet())
        assert isinstance(result, StudyResult)
        if out_dir is not None:
            result.write(out_dir)
        return result

    def field_names(self) -> list[str]:
        """The config's keys."""
        return [f.name for f in fields(self.config_cls())]


STUDIES: dict[str, StudySpec] = {
    "verify": StudySpec("verify", "attnreg.studies.verify", "VerifyConfig", cli="attnreg verify"),
    "compare": StudySpec("compare", "attnreg.studies.compare", "CompareConfig", "attnreg compare"),
    "icl": StudySpec("icl", "attnreg.studies.icl", "ICLConfig", "attnreg icl"),
    "capacity": StudySpec(
        "capacity", "attnreg.studies.capacity", "CapacityConfig", "attnreg capacity"
    ),
}


def get_study(name: str) -> StudySpec:
    """The study called ``name``; the error lists the valid names."""
    if name not in STUDIES:
        raise ValueError(f"study: unknown value {name!r}; valid names are {', '.join(STUDIES)}")
    return STUDIES[name]
