"""What the setup cell of every notebook calls: :func:`setup`.

It reads the mode, picks the device, applies the plot style and prints one short block, so that
every notebook's output starts by saying where and how it ran. It also keeps what the libraries
under the lessons print for their own developers off the page (:func:`quiet_libraries`), and shows
a noisy measurement as the harness's ``[noisy]`` line rather than a Python warning
(:func:`gpufeed.measure.noise.show_noisy_as_marks`).

Example:
    >>> s = setup(verbose=False)
    >>> s.device.type in ("cpu", "cuda"), isinstance(s.quick, bool)
    (True, True)
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass

from gpufeed import config

#: Environment variables that quiet torch's native logs, for this process and the ones it starts
#: (DataLoader workers, torchrun's ranks); a value the learner set stays. ``KINETO_LOG_LEVEL``:
#: torch.profiler's engine logs every start and stop of a profile (its "USDT" probe lines) and, on a
#: machine without CUDA, that it found no GPU; 6 is above its highest level. ``TORCH_CPP_LOG_LEVEL``:
#: torch's C++ warnings, among them c10d's and gloo's while processes meet; errors still show.
#: Both are read when torch loads or the profiler first starts: setup() sets them before either.
QUIET_ENV = {"KINETO_LOG_LEVEL": "6", "TORCH_CPP_LOG_LEVEL": "ERROR"}
#: Python loggers whose warnings speak to torch's developers, not to a learner: where CUDA_HOME
#: points on a machine without CUDA (torch.utils.cpp_extension, imported by torch.compile's CPU
#: path), and torch.distributed's notes while ranks start and stop. Their errors still show.
QUIET_LOGGERS = ("torch.utils.cpp_extension", "torch.distributed")
#: Python warnings that restate what a lesson teaches: torch.profiler's note that a schedule's
#: events are cleared after each cycle (lesson 02 hands each cycle to ``on_trace_ready``).
QUIET_WARNINGS = (r"Warning: Profiler clears events at the end of each cycle",)


#: What the setup cell says of each mode (:func:`gpufeed.config.mode`).
MODE_WORDS = {
    "quick": "quick (GPUFEED_QUICK=1: tiny sizes, to show the lesson runs)",
    "site": "site (GPUFEED_MODE=site: the course site's sizes)",
    "full": "full (set GPUFEED_QUICK=1 for tiny sizes)",
}


@dataclass
class Session:
    """The notebook's settings: ``device`` to compute on, ``quick`` mode, the ``machine`` record and
    the ``mode`` (``"quick"``, ``"site"`` or ``"full"``: :func:`gpufeed.config.mode`)."""

    device: object
    quick: bool
    machine: dict
    mode: str = "full"

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def quiet_libraries() -> None:
    """Keeps the libraries' notes for their own developers out of a lesson's output: the variables
    of :data:`QUIET_ENV` (where the learner has not set them), the loggers of
    :data:`QUIET_LOGGERS` at ERROR and the warnings of :data:`QUIET_WARNINGS` ignored. Call it before torch is imported (:func:`setup` does).

    Example:
        >>> quiet_libraries()
        >>> logging.getLogger("torch.utils.cpp_extension").level == logging.ERROR
        True
        >>> os.environ["KINETO_LOG_LEVEL"] != ""
        True
    """
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def setup(lesson: str | None = None, verbose: bool = True) -> Session:
    """Quiets the libraries' developer notes, shows noisy measurements as ``[noisy]`` lines, picks
    the device, applies the plot style, prints versions and the mode; with ``lesson`` (``"08"``),
    shows that lesson's evidence box (:mod:`gpufeed.measure.evidence`): its headline claims and
    where this page's evidence for each comes from on this machine."""
    quiet_libraries()  # first: torch reads its log levels when it loads

    import gpufeed
    from gpufeed.measure.machine import describe, machine_info
    from gpufeed.measure.noise import show_noisy_as_marks
    from gpufeed.measure.plotting import use_style

    show_noisy_as_marks()
    use_style()
    info = machine_info()
    s = Session(device=config.device(), quick=config.quick_mode(), machine=info, mode=config.mode())
    if verbose:
        mode = MODE_WORDS[s.mode]
        print(f"gpufeed {gpufeed.__version__} · torch {info['torch']} · torchvision {info['torchvision']}")
        print(f"machine: {describe(info)}")
        print(f"device:  {s.device}   mode: {mode}")
        if not s.cuda:
            print("no CUDA GPU here: cells that need one say so and show the committed GPU reference")
        if lesson is not None:
            from gpufeed.measure import evidence

            evidence.show(lesson, cuda=s.cuda)
    return s
