"""What measured copies say as rates and bounds: arithmetic on
:class:`~gpufeed.measure.harness.Measurement` objects, no timing (that is :mod:`gpufeed.measure.ceilings`).

* :func:`byte_rates`: a measurement's samples as GB/s, what the verdict method compares when two
  copies moved different byte counts (lesson 00);
* :func:`fetch_fraction`: the loader's raw fetch against the streaming copy of the same rows
  (:func:`gpufeed.measure.ceilings.loader_bounds`), the number the bench quotes;
* :func:`pipeline_bytes`, :func:`stream_bytes_per_s`, :func:`bandwidth_bound`: the images/s a
  crop/flip/normalise pipeline could reach if it moved its bytes at the streaming copy's rate
  (``python -m gpufeed bench``).

Torch-free.

Example:
    >>> stream = Measurement("stream", [1.0], items=100, nbytes=100 * 1000)  # 200 kB/s moved
    >>> byte_rates(stream), bandwidth_bound(stream, pipeline_bytes(4, 1, channels=1))
    ([0.0001], 6250.0)
"""

from __future__ import annotations

from gpufeed.measure.harness import Measurement


def byte_rates(m: Measurement) -> list[float]:
    """A measurement's samples as GB/s (10^9 bytes), one per sample: what the verdict method
    compares when two copies moved different byte counts (ratios of times would mislead).

    Example:
        >>> byte_rates(Measurement("copy", [0.5, 0.25], nbytes=1e9))
        [2.0, 4.0]
    """
    if not m.nbytes:
        raise ValueError(f"byte_rates: {m.name!r} has no byte count (nbytes) to turn its times into rates")
    return [m.nbytes / s / 1e9 for s in m.samples]


def fetch_fraction(stream: Measurement, fetch: Measurement) -> float:
    """The raw fetch's images/s over the streaming copy's, from :func:`gpufeed.measure.ceilings.loader_bounds`: 1 is a
    shuffled gather as fast as copying the same rows in file order into the same ring.

    Example:
        >>> stream = Measurement("stream", [0.5], items=100)  # 200 images/s
        >>> fetch_fraction(stream, Measurement("fetch", [1.0], items=100))
        0.5
    """
    return fetch.items_per_s / stream.items_per_s


def pipeline_bytes(crop: int, out_itemsize: int, channels: int = 3) -> int:
    """Bytes a crop/flip/normalise pipeline must move per image at the least: the ``uint8`` crop
    read once from the stored image, the output (``out_itemsize`` bytes a value: 4 for float32, 1
    for the crops as bytes) written once.

    Example:
        >>> pipeline_bytes(224, 4), pipeline_bytes(224, 1)  # float32 out: 150,528 read + 602,112 written
        (752640, 301056)
    """
    return channels * crop * crop * (1 + out_itemsize)


def stream_bytes_per_s(stream: Measurement) -> float:
    """Bytes/s the streaming copy of
    :func:`gpufeed.measure.ceilings.loader_bounds` moved: each row read once and written
    once, so twice the bytes it copied.

    Example:
        >>> stream_bytes_per_s(Measurement("stream", [1.0], items=100, nbytes=100 * 1000))
        200000.0
    """
    return 2 * stream.nbytes / stream.median


def bandwidth_bound(stream: Measurement, nbytes: int) -> float:
    """Images/s of a pipeline that moves ``nbytes`` per image (read and written,
    :func:`pipeline_bytes`) at the rate the streaming copy moved bytes (:func:`stream_bytes_per_s`).

    Example:
        >>> stream = Measurement("stream", [1.0], items=100, nbytes=100 * 1000)  # 200 kB/s moved
        >>> bandwidth_bound(stream, 4000)
        50.0
    """
    return stream_bytes_per_s(stream) / nbytes
