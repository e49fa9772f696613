"""The batches :func:`gpufeed.measure.diagnose` and :func:`gpufeed.measure.watch` take from your loader, and
the step they call: every failure one line.

* :class:`DiagnoseError`: bad input or a failure, in one line that says what to do; the original
  error is chained (``raise ... from``), so a traceback is there for whoever wants it, and the
  command line prints the line alone.
* :class:`Batches`: ``next()`` over the loader, a fresh ``iter()`` where an epoch ends (when the
  loader can start again), the loader's own errors worded with the batch they came on
  (:meth:`Batches.drain` takes the batches a loader made ahead, before a timed window).
* :func:`call`: the step on one batch, its errors worded the same way; out of memory is said so.

Example:
    >>> feed = Batches([[1], [2]], needed=3)
    >>> next(feed), next(feed), next(feed), feed.taken  # a list starts again
    ([1], [2], [1], 3)
    >>> call(lambda b: 1 / 0, [1], "batch 3")
    Traceback (most recent call last):
    ...
    gpufeed.measure.batches.DiagnoseError: diagnose: your step raised ZeroDivisionError on batch 3: division by zero (call step(batch) on one batch by itself to see where)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import torch


class DiagnoseError(ValueError):
    """Bad input to :func:`gpufeed.measure.diagnose` or a failure while it ran, in one line: an empty
    loader, a step that is not callable or that raises, a loader that raises or runs out, too few
    batches, out of memory."""


def line(e: BaseException) -> str:
    """An error in one line: its first line, and for an error a DataLoader worker re-raised ("Caught
    OSError in DataLoader worker process 0." then the worker's traceback) the worker's last line too.

    Example:
        >>> line(OSError("Caught OSError in DataLoader worker process 0.\\nOriginal Traceback (most recent "
        ...             "call last):\\n  File ...\\nOSError: image file is truncated"))
        'Caught OSError in DataLoader worker process 0.: OSError: image file is truncated'
        >>> line(KeyError("label"))
        "'label'"
    """
    lines = [s.strip() for s in str(e).strip().splitlines() if s.strip()]
    if not lines:
        return type(e).__name__
    if len(lines) > 1 and "Original Traceback" in str(e):
        return f"{lines[0]}: {lines[-1]}"
    return lines[0]


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says the device (or the host) ran out of memory."""
    text = str(e).lower()
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


def call(step: Callable, batch, where: str):
    """``step(batch)``; an error is raised again as one :class:`DiagnoseError` line naming ``where``
    (``"batch 3"``), the original chained."""
    try:
        return step(batch)
    except DiagnoseError:
        raise
    except Exception as e:
        if out_of_memory(e):
            raise DiagnoseError(f"diagnose: your step ran out of memory on {where}: {line(e)} (a smaller batch, or "
                                "free what the loop holds; diagnose keeps one more batch for its what-ifs)") from e
        raise DiagnoseError(f"diagnose: your step raised {type(e).__name__} on {where}: {line(e)} (call step(batch) "
                            "on one batch by itself to see where)") from e


def checked(step: Callable) -> Callable:
    """``step``, refused at once (before the loader starts) when it is not callable."""
    if not callable(step):
        raise DiagnoseError(f"diagnose: step must be a function that trains on one batch, step(batch) (got "
                            f"{type(step).__name__}); for a step that takes (images, targets), pass "
                            "lambda batch: step(*batch)")
    return step


class Batches:
    """``next()`` over ``loader``, starting a new epoch (a fresh ``iter``) when one ends, when it can.

    Args:
        loader: any iterable of batches.
        needed: how many batches the caller will take (for the message of a loader that runs out).
    """

    def __init__(self, loader: Iterable, needed: int):
        self.loader, self.needed, self.taken = loader, needed, 0
        start = time.perf_counter()
        self.it = self._iter()
        self.start_s = time.perf_counter() - start  # the time iter(loader) took: a DataLoader's workers start

    def _iter(self):
        try:
            return iter(self.loader)
        except TypeError as e:
            if not hasattr(self.loader, "__iter__") and not hasattr(self.loader, "__getitem__"):
                raise DiagnoseError(f"diagnose: the loader must be an iterable of batches (a DataLoader, a "
                                    f"generator; got {type(self.loader).__name__})") from e
            raise DiagnoseError(f"diagnose: iter(loader) raised TypeError: {line(e)}") from e
        except Exception as e:
            raise DiagnoseError(f"diagnose: iter(loader) raised {type(e).__name__}: {line(e)} (start an epoch "
                                "of the loader by itself to see where)") from e

    def _next(self):
        try:
            return next(self.it)
        except StopIteration:
            raise
        except Exception as e:
            oom = " (out of memory)" if out_of_memory(e) else ""
            raise DiagnoseError(f"diagnose: the loader raised {type(e).__name__}{oom} on batch {self.taken}: "
                                f"{line(e)} (iterate the loader by itself to see where)") from e

    def __iter__(self):
        return self

    def __next__(self):
        for again in (False, True):  # an epoch ends: once more, from a fresh iter() where the loader gives one
            try:
                batch = self._next()
                self.taken += 1
                return batch
            except StopIteration:
                if self.taken == 0:
                    raise DiagnoseError("diagnose: the loader yielded no batch; check its dataset and drop_last (a "
                                        "dataset smaller than one batch yields nothing)") from None
                if again:
                    break
                self.it = self._iter()  # an iterator gives itself: DALI's resets, a generator stays ended
        raise DiagnoseError(f"diagnose: the loader ran out after {self.taken} batches and cannot start again; it "
                            f"needs {self.needed}: pass a loader that can (a DataLoader), an endless generator, "
                            "or fewer batches")

    def drain(self, n: int) -> None:
        """Takes ``n`` batches and drops them: what a loader made ahead while nothing asked it (a
        DataLoader's ``num_workers * prefetch_factor``), so that a timed window starts from none."""
        for _ in range(n):
            next(self)
