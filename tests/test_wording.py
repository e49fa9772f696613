"""The ratio in words (gpufeed.measure.wording): either way round, refusing what is not a ratio, one band."""

from gpufeed.measure import wording


def test_times_reads_a_ratio_either_way():
    assert wording.times(3.0) == "3.00x faster"
    assert wording.times(1 / 3) == "3.00x slower"  # never "0.33x faster"
    assert wording.times(1.001) == wording.times(0.999) == "as fast"
    assert wording.times(0.25, more="more", less="fewer", same="as many") == "4.00x fewer"
    assert wording.times(0.25, "eager") == "4.00x slower than eager"
    assert wording.times(1.0, "eager", same="as many") == "as many as eager"


def test_times_refuses_a_ratio_that_is_not_positive():
    import pytest

    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="positive"):
            wording.times(bad)


def test_band_is_the_widest_spread_and_at_least_the_floor():
    from types import SimpleNamespace as M

    assert wording.band() == 0.05  # nothing measured: the floor
    assert wording.band(M(spread=0.0), M(spread=0.0)) == 0.05  # a perfect tie still has a floor
    assert wording.band(M(spread=0.05)) == 0.05  # at the floor exactly
    assert wording.band(M(spread=0.2), M(spread=0.07)) == 0.2  # the noisier of the two decides
    assert wording.band(M(spread=0.07), floor=0.1) == 0.1


def test_a_ratio_inside_the_band_reads_as_the_same_and_outside_it_does_not():
    from types import SimpleNamespace as M

    flat = wording.band(M(spread=0.25), M(spread=0.03))  # 0.25: exact in binary, so the edge is testable
    assert wording.times(1.2, flat=flat) == wording.times(1 / 1.2, flat=flat) == "as fast"  # a win inside the spread
    assert wording.times(1.25, flat=flat) == "as fast"  # at the threshold: still inside
    assert wording.times(1.3, flat=flat) == "1.30x faster"
    assert wording.times(1 / 1.3, flat=flat) == "1.30x slower"  # a loss past it: the same band either way
    assert wording.times(1 / 1.25, flat=flat) == "as fast"


def test_times_picks_its_decimals_by_size_when_asked():
    grid = {1.004: "as fast", 1.006: "1.01x faster", 9.994: "9.99x faster", 9.996: "10.0x faster",
            10.0: "10.0x faster", 99.94: "99.9x faster", 99.96: "100x faster", 338.68: "339x faster",
            1 / 338.68: "339x slower", 2345.0: "2,345x faster"}
    for ratio, words in grid.items():
        assert wording.times(ratio, digits=None) == words, ratio
    assert wording.times(1.04, flat=0.05, digits=None) == "as fast"  # a band still decides a tie first
