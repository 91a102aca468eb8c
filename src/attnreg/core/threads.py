"""One way to run a block with a given number of torch intra-op threads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where the
    platform has no affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def check_count(name: str, value: object, what: str = "threads") -> int:
    """An integer from 1 to :func:`usable_cores` — the most ``what`` (threads or worker
    processes) this machine can run at once; else a ``ValueError`` naming ``name`` and the
    limit. More than that only time-slices the same cores, and far more crashes torch's thread
    pool (100,000 threads: a segmentation fault)."""
    limit = usable_cores()
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or int(value) != value
        or int(value) < 1
    ):
        raise ValueError(f"{name}: must be an integer from 1 to {limit}, got {value!r}")
    if int(value) > limit:
        raise ValueError(
            f"{name}: {int(value)} {what} is more than the {limit} cores this process may use "
            f"(the limit); use 1 to {limit}"
        )
    return int(value)


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (``None``: leave as is), then restore.

    The studies' matrices are small (tens to hundreds of rows): there intra-op threads cost
    more in start-up and synchronisation than they save, badly so on a loaded machine.
    """
    previous = torch.get_num_threads()
    if n is not None:
        n = check_count("n_threads", n)
        if int(n) != previous:
            torch.set_num_threads(int(n))
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
