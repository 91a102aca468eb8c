"""What a study declares about itself: :class:`StudySpec`, exported as ``SPEC`` by its package.

A study package's ``__init__`` stays light (its config module and this one): the command line
lists every study, its options and help, from the specs alone. The runner and the ``--json``
view are named ``"module:function"`` and imported only when a study runs, so importing a
study's config never pulls in torch.optim's training loop or matplotlib.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from attnreg.core.validation import check_choice
from attnreg.progress import Progress

if TYPE_CHECKING:  # common imports the figure writer (matplotlib): only when a study runs
    from attnreg.studies.common import StudyResult

PROFILES = ("quick", "full")


class StudyConfig(Protocol):
    """What the registry needs of a study's config: a dataclass with a ``seed`` field."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    seed: int


def comma_list(text: str) -> list[str]:
    """``"a, b,c"`` → ``["a", "b", "c"]``: the parser of a comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True)
class Extra:
    """A study's own option: ``--flag VALUE`` sets config field ``field`` to ``parse(VALUE)``."""

    flag: str
    field: str
    help: str
    parse: Callable[[str], Any] = str


def load(reference: str) -> Any:
    """The object a ``"package.module:name"`` reference names (the module imported now)."""
    module, sep, name = reference.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"reference {reference!r}: expected 'package.module:name'")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class StudySpec:
    """A study, as the command line, the sweeps and the report see it.

    ``config_class``: its config dataclass (every field has a default, one is ``seed``; its
    ``__post_init__`` refuses a bad value with a ``ValueError`` naming the key). ``quick`` /
    ``full``: the profiles, functions returning a config. ``runner``: ``"module:function"`` of
    ``run(config, progress) -> StudyResult``, which computes and writes nothing. ``help``: the
    command's help text; ``title``: its heading on the report page. ``extras``: its own
    options, shorthands for config fields. ``json_view``: ``"module:function"`` of
    ``(StudyResult) -> rows``, what ``--json`` prints (default: the rows). ``report_table``:
    the report shows the rows as a table too (``verify``'s certificate). ``ledger``: its result
    lists claims of the sources (:class:`~attnreg.studies.ledger.Claim`), so the site's claims
    page runs its quick profile.
    """

    name: str
    config_class: type[StudyConfig]
    quick: Callable[[], StudyConfig]
    full: Callable[[], StudyConfig]
    runner: str
    help: str
    title: str
    extras: tuple[Extra, ...] = ()
    json_view: str | None = None
    report_table: bool = False
    ledger: bool = False

    def profile(self, name: str = "quick") -> StudyConfig:
        """A config instance for the ``quick`` or ``full`` profile."""
        check_choice("profile", name, PROFILES)
        return self.quick() if name == "quick" else self.full()

    def field_names(self) -> list[str]:
        """The config's keys."""
        return [f.name for f in fields(self.config_class)]

    def run(
        self,
        config: StudyConfig,
        out_dir: str | Path | None = None,
        progress: Progress | None = None,
    ) -> StudyResult:
        """Run the study with ``config`` (stages shown on ``progress``), then write the result
        into ``out_dir`` (:meth:`StudyResult.write`) if given."""
        from attnreg.studies.common import StudyResult

        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{self.name}: expected a {self.config_class.__name__}, got {type(config).__name__}"
            )
        result = load(self.runner)(config, progress or Progress.quiet())
        assert isinstance(result, StudyResult)
        if out_dir is not None:
            result.write(out_dir)
        return result

    def json_rows(self, result: StudyResult) -> list[dict[str, Any]]:
        """What ``--json`` prints: the ``json_view`` of the result, or its rows."""
        if self.json_view is None:
            return result.rows
        rows: list[dict[str, Any]] = load(self.json_view)(result)
        return rows

    def command(self, profile: str, seed: int) -> str:
        """The command that re-creates the ``profile`` run with ``seed`` (the profile's flag
        left out when both profiles are the same config)."""
        same = self.profile("quick") == self.profile("full")
        return f"attnreg {self.name}{'' if same else f' --{profile}'} --seed {seed}"
