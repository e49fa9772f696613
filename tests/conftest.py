"""The ``on_cuda`` fixture: a test that takes it runs on the real GPU where there is one (marker
``cuda``), and under the CUDA-ordering simulator with several schedules everywhere (marker
``simcuda``; ``gpufeed.simcuda``): the same test body, so the first GPU run checks the
simulator's model as well as the library."""

import pytest
import torch

#: the simulator's schedules every on_cuda test runs under: 0 as late as allowed, 1 side streams
#: race ahead, 2 the default stream races ahead, 3 random paces (gpufeed.simcuda.device)
SIM_SEEDS = (0, 1, 2, 3)

BACKENDS = [pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])]
BACKENDS += [pytest.param(f"simcuda{seed}", id=f"simcuda{seed}", marks=pytest.mark.simcuda) for seed in SIM_SEEDS]


@pytest.fixture(params=BACKENDS)
def on_cuda(request):
    """None on a real GPU; else the simulator (``sim.syncs``, ``sim.races``...) for the test's body."""
    if request.param == "cuda":
        yield None
        return
    from gpufeed.simcuda import simulated_cuda

    with simulated_cuda(seed=int(request.param.removeprefix("simcuda"))) as sim:
        yield sim
