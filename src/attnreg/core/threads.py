"""One way to run a block with a given number of torch intra-op threads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (``None``: leave as is), then restore.

    The studies' matrices are small (tens to hundreds of rows): there intra-op threads cost
    more in start-up and synchronisation than they save, badly so on a loaded machine.
    """
    previous = torch.get_num_threads()
    if n is not None:
        if isinstance(n, bool) or int(n) != n or n < 1:
            raise ValueError(f"n_threads: must be an integer >= 1 or None, got {n!r}")
        if int(n) != previous:
            torch.set_num_threads(int(n))
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
