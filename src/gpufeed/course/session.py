"""What the setup cell of every notebook calls: :func:`setup`.

It reads the mode, picks the device, applies the plot style and prints one short block, so that
every notebook's output starts by saying where and how it ran.

Example:
    >>> s = setup(verbose=False)
    >>> s.device.type in ("cpu", "cuda"), isinstance(s.quick, bool)
    (True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufeed import config


@dataclass
class Session:
    """The notebook's settings: ``device`` to compute on, ``quick`` mode, and the ``machine`` record."""

    device: object
    quick: bool
    machine: dict

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def setup(verbose: bool = True) -> Session:
    """Picks the device, applies the plot style, prints versions and the mode."""
    import gpufeed
    from gpufeed.measure.machine import describe, machine_info
    from gpufeed.measure.plotting import use_style

    use_style()
    info = machine_info()
    s = Session(device=config.device(), quick=config.quick_mode(), machine=info)
    if verbose:
        mode = "quick (GPUFEED_QUICK=1: tiny sizes)" if s.quick else "full (set GPUFEED_QUICK=1 for tiny sizes)"
        print(f"gpufeed {gpufeed.__version__} · torch {info['torch']} · torchvision {info['torchvision']}")
        print(f"machine: {describe(info)}")
        print(f"device:  {s.device}   mode: {mode}")
        if not s.cuda:
            print("no CUDA GPU here: cells that need one say so and show the committed GPU reference")
    return s
