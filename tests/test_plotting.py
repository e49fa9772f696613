import matplotlib.pyplot as plt

from gpufeed.measure import plotting
from gpufeed.measure.harness import Measurement


def test_bars_label_ratios_units_and_machine(tmp_path):
    ms = [Measurement("slow", [4.0, 4.2], nbytes=4e9), Measurement("fast", [1.0, 1.1], nbytes=4e9)]
    fig, ax = plotting.bars(ms, rate="bytes", machine={"cpu": "Test CPU", "cores": 4, "gpu": "NVIDIA H200", "quick": True})
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "slow (1.00x)" and labels[1].startswith("fast (3.")
    assert ax.get_xlabel().startswith("GB/s")
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("measured on Test CPU (4 cores), NVIDIA H200") and "quick mode" in t for t in texts)
    path = plotting.save(fig, tmp_path / "p" / "bars.png")
    assert path.stat().st_size > 1000
    plt.close(fig)


def test_style_applies():
    plotting.use_style()
    assert plt.rcParams["axes.spines.top"] is False
