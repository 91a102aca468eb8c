"""Nested progress you can watch: studies → stages → steps.

Code that runs long takes a :class:`Progress` and opens stages on it::

    with progress.stage("train lsa-1", total=steps) as stage:
        for step in range(steps):
            ...
            stage.advance(label=f"loss {loss:.3g}")
        # stage.progress opens stages nested inside this one

A :class:`Progress` only emits events ``(kind, path, count, label)`` — ``kind`` is
``"start"`` (``count`` = total, or ``None`` when unknown), ``"advance"`` (``count`` = steps
completed so far) or ``"end"``; ``path`` is the tuple of stage names from the root. Where the
events go is the caller's choice: nowhere (:meth:`Progress.quiet`), a rich display on a
terminal (:func:`terminal_progress`), or a queue to the parent process of a sweep worker.
Advances are sent at most every ``interval`` seconds, so a stage may advance per step.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape

Event = tuple[str, tuple[str, ...], int | None, str]
Emit = Callable[[Event], None]


class Progress:
    """A place to open progress stages; ``emit`` receives the events (``None``: quiet)."""

    def __init__(
        self, emit: Emit | None = None, path: tuple[str, ...] = (), interval: float = 0.1
    ) -> None:
        self.emit = emit
        self.path = path
        self.interval = interval

    @classmethod
    def quiet(cls) -> Progress:
        """A progress that shows nothing."""
        return cls(None)

    @property
    def enabled(self) -> bool:
        """Whether the events go anywhere."""
        return self.emit is not None

    @contextmanager
    def stage(self, name: str, total: int | None = None) -> Iterator[Stage]:
        """A stage of ``total`` steps (``None``: unknown) nested under this progress's path."""
        stage = Stage(self, (*self.path, name), total)
        stage.send("start", total)
        try:
            yield stage
        finally:
            stage.send("end", stage.completed)


@dataclass
class Stage:
    """One running stage: :meth:`advance` it; open nested stages on :attr:`progress`."""

    parent: Progress
    path: tuple[str, ...]
    total: int | None
    completed: int = 0
    label: str = ""
    _sent: float = field(default=0.0, repr=False)

    @property
    def progress(self) -> Progress:
        """A progress whose stages nest inside this one."""
        return Progress(self.parent.emit, self.path, self.parent.interval)

    def advance(self, steps: int = 1, label: str | None = None) -> None:
        """``steps`` more steps done; ``label`` describes the current one (e.g. a loss)."""
        self.completed += steps
        if label is not None:
            self.label = label
        now = time.monotonic()
        finished = self.total is not None and self.completed >= self.total
        if finished or now - self._sent >= self.parent.interval:
            self._sent = now
            self.send("advance", self.completed)

    def send(self, kind: str, count: int | None) -> None:
        """Emit one event (a no-op when the progress is quiet)."""
        if self.parent.emit is not None:
            self.parent.emit((kind, self.path, count, self.label))


class Display:
    """Shows progress events as indented rows of a rich progress display (``bar``; default:
    a new one on stderr); a finished nested stage disappears, a finished top-level one stays
    if ``keep_finished`` (else it goes too: a sweep's bar counts its finished cells).
    ``fields`` are extra task fields the display's columns read."""

    def __init__(self, bar: Any = None, keep_finished: bool = True, **fields: Any) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        self.bar = bar or RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.keep_finished = keep_finished
        self.fields = fields
        self.tasks: dict[tuple[str, ...], Any] = {}

    def __call__(self, event: Event) -> None:
        kind, path, count, label = event
        text = escape("  " * (len(path) - 1) + path[-1] + (f" · {label}" if label else ""))
        task = self.tasks.get(path)
        if kind == "start":
            if task is not None:
                self.bar.remove_task(task)
            self.tasks[path] = self.bar.add_task(text, total=count, **self.fields)
        elif task is None:
            return
        elif kind == "advance":
            self.bar.update(task, completed=count, description=text)
        else:
            self.end(path, count or 0)

    def end(self, path: tuple[str, ...], done: int) -> None:
        """Remove the rows nested under ``path``, and ``path``'s own row unless it is a
        top-level stage (that one stays, shown complete after its ``done`` steps)."""
        for other in [p for p in self.tasks if p[: len(path)] == path and p != path]:
            self.bar.remove_task(self.tasks.pop(other))
        task = self.tasks[path]
        if len(path) > 1 or not self.keep_finished:
            self.bar.remove_task(self.tasks.pop(path))
        else:
            self.bar.update(task, total=max(done, 1), completed=max(done, 1))


@contextmanager
def terminal_progress(enabled: bool = True) -> Iterator[Progress]:
    """A progress drawn on stderr when ``enabled`` and stderr is a terminal; quiet otherwise."""
    if not (enabled and sys.stderr.isatty()):
        yield Progress.quiet()
        return
    display = Display()
    with display.bar:
        yield Progress(display)
