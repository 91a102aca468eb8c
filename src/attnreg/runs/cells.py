"""One run cell: a study, a full config and a seed, executed where a worker runs it.

:func:`execute_cell` never raises for a failing study: the error and its traceback come back
in the :class:`CellResult` so one bad cell cannot stop a sweep. It writes nothing to the store.
"""

from __future__ import annotations

import base64
import contextlib
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnreg import __version__
from attnreg.config import config_from_dict, config_to_dict
from attnreg.core.validation import check_seed
from attnreg.progress import Event, Progress
from attnreg.runs.record import CellResult, cell_key, now
from attnreg.studies.registry import get_study

if TYPE_CHECKING:
    from attnreg.studies.ledger import Claim


@dataclass(frozen=True)
class CellSpec:
    """A cell to run: ``config`` holds every key of the study's config (seed included)."""

    study: str
    config: dict[str, Any]
    seed: int
    version: str = __version__

    @property
    def key(self) -> str:
        """The stable key the store files it under."""
        return cell_key(self.study, self.config, self.seed, self.version)

    def failed(self, error: str, started: float | None = None) -> CellResult:
        """This cell's result as failed with ``error`` (nothing ran, or it did not finish)."""
        stamp = now()
        return CellResult(
            self.study,
            self.config,
            self.seed,
            self.version,
            "failed",
            stamp if started is None else started,
            stamp,
            error=error,
        )


def make_cell(study: str, overrides: dict[str, Any], seed: int, profile: str = "quick") -> CellSpec:
    """Validate ``overrides`` by building the study's config from its ``profile`` with them
    (an unknown key, a wrong type or a bad value → ``ValueError`` naming the key), set the
    seed (0 … 2**63 - 1), and return the cell with its full config. The seed is the run's
    (``--seed``, a sweep's ``seeds``), never an override: one there is refused, not ignored."""
    check_seed("seed", seed)
    if "seed" in overrides:
        raise ValueError(
            f"seed: set by the run (--seed, or a sweep's top-level 'seeds' list), not as a "
            f"config key (got seed = {overrides['seed']!r})"
        )
    spec = get_study(study)
    base = config_to_dict(spec.profile(profile))
    if "seed" not in base:
        raise ValueError(f"study {study!r}: its config has no 'seed' field")
    cfg: Any = config_from_dict(spec.config_class, {**base, **overrides, "seed": seed})
    return CellSpec(study, config_to_dict(cfg), seed)


_EVENTS: Any = None  # in a pool worker: the queue its progress events go to


def send_progress_to(queue: Any) -> None:
    """In a worker process: send the progress events of the cells it runs to ``queue``
    (a multiprocessing queue the parent reads; ``None``: show nothing)."""
    global _EVENTS
    _EVENTS = queue
    if queue is not None:
        queue.cancel_join_thread()  # never wait for the parent to read when exiting


def _emit(event: Event) -> None:
    with contextlib.suppress(Exception):  # progress must never fail a cell
        _EVENTS.put(event)


def check_lines(checks: list[dict[str, Any]]) -> dict[str, str]:
    """The study's pass/fail checks as summary entries ``check: NAME`` → ``pass: value <= limit``
    (so the store and the report show each threshold beside the answers); the value is shown
    with enough digits to differ from the limit (``1.0002 <= 1.02``, not ``1 <= 1.02``)."""
    from attnreg.studies.answers import format_against

    return {
        f"check: {c['check']}": (
            f"{'pass' if c['passed'] else 'FAIL'}: {format_against(c['value'], c['limit'], 4)} "
            f"{c['op']} {c['limit']:g}"
        )
        for c in checks
    }


def ledger_entry(claims: list[Claim]) -> dict[str, Any]:
    """The study's claims as the summary entry :data:`~attnreg.studies.ledger.LEDGER_KEY` (a
    ledger table; none when the study tests no claim), which the report gathers at its top."""
    from attnreg.studies.ledger import LEDGER_KEY, ledger_table

    return {LEDGER_KEY: ledger_table(claims)} if claims else {}


def execute_cell(cell: CellSpec, figures: bool = False, threads: int | None = None) -> CellResult:
    """Run one cell and return its result (figures as base64 PNG when ``figures``); its
    progress goes to the parent as the stage ``study [key]`` (see :func:`send_progress_to`)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    started = now()
    try:
        spec = get_study(cell.study)
        cfg: Any = config_from_dict(spec.config_class, cell.config)
        progress = Progress(_emit if _EVENTS is not None else None)
        with progress.stage(f"{cell.study} [{cell.key[:6]}]") as stage:
            result = spec.run(cfg, progress=stage.progress)
        pictures = []
        for fig in result.figures:
            if figures:
                png = base64.b64encode(fig.png()).decode()
                pictures.append({"name": fig.name, "caption": fig.caption, "png": png})
            fig.close()
        return CellResult(
            cell.study,
            cell.config,
            cell.seed,
            cell.version,
            "done",
            started,
            now(),
            result.rows,
            {**result.summary, **check_lines(result.checks), **ledger_entry(result.claims)},
            pictures,
        )
    except Exception:  # a failing study is a failed cell, reported with its traceback
        return cell.failed(traceback.format_exc(limit=20), started)
