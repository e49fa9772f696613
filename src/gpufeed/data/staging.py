"""Folders that appear all at once or not at all: the atomic-write pattern the dataset writers
share.

A writer fills a hidden *staging* folder beside its destination, ``.<name>.partial-<host>-<pid>``,
writes its manifest last, and renames the staging folder into place. A rename within one file
system is atomic, so a reader sees either no folder or a complete one; a run that is killed (even
with SIGKILL, which no ``finally`` survives) leaves only a hidden staging folder without a
manifest, which the next run on the same host removes (a pid says nothing about another host's
processes, so on storage shared between machines another host's staging folder is left alone).
:func:`locked` holds a file lock beside the destination, so that processes building the same
folder at once (the ranks of one job) take turns: the first builds, the next find it built.
:func:`read_manifest` reads a manifest back (every writer's format and version checked the same
way). Used by :mod:`gpufeed.measure.synth` and :mod:`gpufeed.data.memmap` and
:mod:`gpufeed.course.lesson04.formats` (``notebooks/05_memmap.ipynb`` explains it).

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "data"
    >>> with staged(out, error=ValueError) as tmp:
    ...     _ = (tmp / "manifest.json").write_text("{}")  # write everything, the manifest last
    ...     out.exists()
    False
    >>> sorted(p.name for p in out.iterdir()), sorted(p.name for p in out.parent.iterdir())
    (['manifest.json'], ['data'])
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the file system holding ``path``, capped by ``GPUFEED_FREE_BYTES_LIMIT``.

    The cap lets a test (or a careful learner) play a small disk: with
    ``GPUFEED_FREE_BYTES_LIMIT=1000000`` every writer behaves as if only 1 MB were free.
    """
    free = shutil.disk_usage(path).free
    limit = os.environ.get("GPUFEED_FREE_BYTES_LIMIT", "").strip()
    if limit:
        try:
            free = min(free, int(limit))
        except ValueError:
            raise ValueError(f"GPUFEED_FREE_BYTES_LIMIT={limit!r} is not a number of "
                             "bytes") from None
    return free


def read_manifest(folder: str | os.PathLike, name: str, fmt: str, *, version: int | None = None,
                  error: type[Exception] = ValueError, hint: str = "rebuild it") -> dict | None:
    """The JSON manifest ``folder/name`` when it is an object whose ``"format"`` is ``fmt``, else
    None.

    None means "not ours": no file, unreadable JSON, or another format (a staging folder before
    its manifest is written, a foreign folder). A manifest of format ``fmt`` but another
    ``version`` (when ``version`` is given) is ours and unusable: it raises ``error``, one line
    ending with ``hint``.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> read_manifest(d, "m.json", "demo") is None  # no manifest yet
        True
        >>> _ = (d / "m.json").write_text('{"format": "demo", "version": 2}')
        >>> read_manifest(d, "m.json", "demo")["version"], read_manifest(d, "m.json", "other")
        (2, None)
        >>> read_manifest(d, "m.json", "demo", version=1, hint="rebuild it with --overwrite")
        Traceback (most recent call last):
        ...
        ValueError: ... has format version 2, this gpufeed reads version 1; rebuild it with
        --overwrite
    """
    path = Path(folder) / name
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        # missing, unreadable, or not JSON (UnicodeDecodeError is a ValueError)
        return None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        return None
    if version is not None and doc.get("version") != version:
        raise error(f"{Path(folder)} has format version {doc.get('version')}, this gpufeed reads "
                    f"version {version}; {hint}")
    return doc


def host() -> str:
    """This machine's name as staging folders carry it (characters other than letters, digits,
    ``.``, ``_`` and ``-`` replaced by ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def staging_path(out: Path) -> Path:
    """The hidden folder this process fills before renaming it to ``out``."""
    return out.parent / f".{out.name}.partial-{host()}-{os.getpid()}"


def stale_staging(out: Path) -> list[Path]:
    """Staging folders for ``out`` left by runs on this host that were killed (their process no
    longer exists); another host's are never judged by a pid here. A name without a host (written
    by an older gpufeed) counts as this host's."""
    stale, prefix = [], f".{out.name}.partial-"
    for candidate in out.parent.glob(f"{prefix}*"):
        where, _, pid = candidate.name[len(prefix):].rpartition("-")
        if where and where != host():
            continue  # another machine's build: alive or not, a pid here cannot tell
        try:
            os.kill(int(pid), 0)
            continue  # that run is still going
        except (ValueError, ProcessLookupError):
            stale.append(candidate)
        except PermissionError:
            continue  # a live process of another user
    return stale


def remove_stale_staging(out: Path) -> list[Path]:
    """Removes what :func:`stale_staging` finds (a live run's staging folder is left alone) and
    returns what it removed."""
    stale = stale_staging(out)
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def prepare_parent(out: Path, error: type[Exception], flag: str) -> None:
    """Creates ``out``'s parent folder and checks that it is writable, or raises ``error``."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise error(f"cannot create {out.parent}: {e.strerror}; choose another {flag}") from e
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise error(f"cannot write to {out.parent}: permission denied; choose another {flag} or "
                    "fix its permissions")


def check_space(need: int, free: int, where: Path, error: type[Exception], hint: str) -> None:
    """Raises ``error`` when ``need`` bytes do not fit in ``free`` bytes; ``hint`` says what to
    shrink."""
    if need > free:
        raise error(
            f"not enough disk space in {where}: the dataset needs about {need / 1e6:.0f} MB, "
            f"{free / 1e6:.0f} MB are free; free some space, or {hint}"
        )


def replace_folder(staging: Path, out: Path) -> None:
    """Renames ``staging`` to ``out``; an existing ``out`` (empty, or being overwritten) is moved
    aside first and deleted after, so ``out`` is never missing its manifest."""
    if out.exists():
        trash = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(trash)
        staging.rename(out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        staging.rename(out)


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``out`` for the block: ``flock`` on a hidden lock file beside it
    (``.<name>.lock``), which a second process asking for it waits on (saying so on stderr).
    ``flock`` is per open file, so two threads of one process take turns too; on NFS v4 Linux
    carries it to the server, so processes of different hosts take turns. The holder deletes the
    lock file on the way out, and a waiter that then got a deleted file's lock tries again.
    Without ``fcntl`` (Windows) there is no lock. ``out``'s parent must exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path, said = out.parent / f".{out.name}.lock", False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    print(f"note: another process is building {out}; waiting for it (lock "
                          f"{path.name})",
                          file=sys.stderr)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                # not a file its last holder deleted
                ours = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                ours = False
        except BaseException:
            os.close(fd)
            raise
        if ours:
            break
        os.close(fd)
    try:
        yield
    finally:
        with suppress(OSError):
            os.unlink(path)  # while still held: a waiter then sees it gone and takes a fresh one
        os.close(fd)


@contextmanager
def staged(out: Path, error: type[Exception], flag: str = "--out") -> Iterator[Path]:
    """Yields a fresh staging folder for ``out``; renames it into place when the block ends cleanly.

    On any exception (Ctrl-C included) the staging folder is deleted and nothing is kept. A full
    disk or a permission problem becomes ``error`` with a message that says what to do.
    """
    removed = remove_stale_staging(out)
    if removed:  # say so: the learner should know the earlier run did not finish
        names = ", ".join(p.name for p in removed)
        print(f"note: an earlier run for {out} was interrupted; removed its leftovers ({names}) "
              "and starting clean", file=sys.stderr)
    staging = staging_path(out)
    try:
        staging.mkdir()
        yield staging
        replace_folder(staging, out)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        if e.errno == errno.ENOSPC:
            raise error(f"the disk holding {out.parent} filled up; nothing was kept. Free some "
                        "space and run again") from e
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise error(f"cannot write to {out.parent}: {e.strerror}; choose another {flag}") from e
        raise
    except BaseException:  # Ctrl-C included: leave nothing half-written behind
        shutil.rmtree(staging, ignore_errors=True)
        raise
