"""The studies attnreg knows, by name: their config class, profiles and runner.

Each study package provides a config dataclass (every field with a default, one of them
``seed``), a runner ``(config, out_dir, progress) -> StudyResult`` and ``quick_config()`` /
``full_config()`` for its profiles. ``explain`` is not listed: it explains a given checkpoint,
and the icl study already explains the layers it trains. Modules are imported lazily, so a
broken or slow study never stops the others from being listed or run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, TypeAlias

from attnreg.studies.common import StudyResult

if TYPE_CHECKING:  # the config modules are leaves: no cycle, and nothing heavy at run time
    from attnreg.studies.capacity.config import CapacityConfig
    from attnreg.studies.compare.config import CompareConfig
    from attnreg.studies.icl.config import ICLConfig
    from attnreg.studies.verify.config import VerifyConfig

    StudyConfig: TypeAlias = VerifyConfig | CompareConfig | ICLConfig | CapacityConfig


@dataclass(frozen=True)
class StudySpec:
    """Where a study lives: ``module:config_class``, ``module:runner`` and the module's
    ``quick_config()`` / ``full_config()``."""

    name: str
    module: str
    config_class: str
    runner: str = "run_study"
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
        self, config: StudyConfig, out_dir: str | None = None, progress: bool = False
    ) -> StudyResult:
        """Run the study with ``config``, saving figures into ``out_dir``; ``progress`` shows
        a progress bar on stderr where the runner has one."""
        fn = getattr(importlib.import_module(self.module), self.runner)
        result = fn(config, out_dir, progress=progress)
        assert isinstance(result, StudyResult)
        return result

    def field_names(self) -> list[str]:
        """The config's keys."""
        return [f.name for f in fields(self.config_cls())]


STUDIES: dict[str, StudySpec] = {
    "verify": StudySpec("verify", "attnreg.studies.verify", "VerifyConfig", cli="attnreg verify"),
    "compare": StudySpec(
        "compare", "attnreg.studies.compare", "CompareConfig", runner="run", cli="attnreg compare"
    ),
    "icl": StudySpec("icl", "attnreg.studies.icl", "ICLConfig", runner="run", cli="attnreg icl"),
    "capacity": StudySpec(
        "capacity",
        "attnreg.studies.capacity",
        "CapacityConfig",
        runner="run",
        cli="attnreg capacity",
    ),
}


def get_study(name: str) -> StudySpec:
    """The study called ``name``; the error lists the valid names."""
    if name not in STUDIES:
        raise ValueError(f"study: unknown value {name!r}; valid names are {', '.join(STUDIES)}")
    return STUDIES[name]
