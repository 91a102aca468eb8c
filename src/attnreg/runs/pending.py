"""Files of results set aside while the results store stayed locked, and how they are claimed.

``STORE.pending.jsonl`` holds one result a line. The store recovers it in four steps, so a
crash at any instant leaves every line somewhere on disk:

1. *claim*: the file is renamed to ``STORE.pending.jsonl.<pid>`` (atomic: of two runs starting
   at once, exactly one gets each file). A claim file whose process is gone (killed while
   recovering) is an orphan, and the next run claims it the same way;
2. *store*: the store adds the good lines in one transaction;
3. *set aside*: the bad lines are appended, byte for byte, to ``STORE.pending.rejected.jsonl``;
4. only then the claim file is deleted.

A process that dies between steps leaves its claim file, which is then an orphan. Appends and
claims hold an exclusive ``flock`` on the file, so a claim never takes a half-written line,
and an append that lost the race with a claim goes to a new file. This module moves lines
(bytes) between files; what a line means is the store's business.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import psutil


def pending_path(store: Path) -> Path:
    """``STORE.pending.jsonl``: results waiting to be added to ``store``."""
    return store.with_name(store.name + ".pending.jsonl")


def rejected_path(store: Path) -> Path:
    """``STORE.pending.rejected.jsonl``: set-aside lines the store could not take."""
    return store.with_name(store.name + ".pending.rejected.jsonl")


def append(path: Path, lines: Iterable[bytes]) -> None:
    """Append ``lines`` (each without its newline) to ``path`` and fsync it, holding the
    file's lock; if another process claims the file meanwhile, append to a new one. A last
    line left unfinished by a killed writer is ended first, so it cannot swallow a new one."""
    text = b"".join(line + b"\n" for line in lines)
    if not text:
        return
    while True:
        with path.open("ab+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if not _is_file_at(handle, path):
                continue  # claimed while we waited for the lock: closing releases it
            size = os.fstat(handle.fileno()).st_size
            if size:
                handle.seek(size - 1)
                if handle.read(1) != b"\n":
                    text = b"\n" + text
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            return


def read_lines(path: Path) -> list[bytes]:
    """The non-blank lines of ``path``, without their newlines."""
    return [line for line in path.read_bytes().split(b"\n") if line.strip()]


def claims(pending: Path) -> Iterator[Path]:
    """Claim, one at a time, the files of set-aside results this process may recover: its own
    claim file left by an earlier attempt, then orphans, then ``pending`` itself. Each is
    yielded as this process's claim file ``pending.<pid>``; the caller deletes it once every
    line is stored or set aside (the next file is claimed only after that)."""
    own = pending.with_name(f"{pending.name}.{os.getpid()}")
    if own.exists():
        yield own
    for source in [*orphans(pending), pending]:
        if own.exists() or not _claim(source, own):
            return
        yield own


def orphans(pending: Path) -> list[Path]:
    """Claim files ``pending.<pid>`` of processes no longer alive."""
    found = []
    prefix = pending.name + "."
    try:
        names = os.listdir(pending.parent)
    except FileNotFoundError:
        return []
    for name in sorted(names):
        pid = name[len(prefix) :]
        if name.startswith(prefix) and pid.isdigit() and int(pid) != os.getpid():
            if not _alive(int(pid)):
                found.append(pending.with_name(name))
    return found


def waiting(pending: Path) -> int:
    """How many lines wait to be added: in ``pending`` and in orphaned claim files."""
    total = 0
    for path in [*orphans(pending), pending]:
        try:
            total += len(read_lines(path))
        except FileNotFoundError:
            continue
    return total


def _claim(source: Path, claim: Path) -> bool:
    """Rename ``source`` to ``claim`` under the file's lock; ``False`` if it is gone (another
    process claimed it first)."""
    try:
        handle = source.open("rb")
    except FileNotFoundError:
        return False
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not _is_file_at(handle, source):
            return False
        os.replace(source, claim)
    return True


def _is_file_at(handle: IO[bytes], path: Path) -> bool:
    """Whether ``path`` still names the file open as ``handle`` (not renamed away)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # exists, but we may not look at it
        return True
