"""The model's side of ``notebooks/11_together.ipynb``: eager against ``torch.compile``, TensorRT
where it is installed, and how much faster a model may get before the loader becomes the bottleneck.

Everything else in the course speeds up the *feeding*. A model compiler speeds up the model: the
same forward pass in fewer, fused, tuned kernels. NVIDIA's TensorRT builds such an *engine* for
one GPU; Torch-TensorRT (``torch_tensorrt``) builds it from a PyTorch module and hands back a
module that runs it, which can be saved as TorchScript with the engine embedded. It targets
inference of a trained model, and it changes nothing before the model: the loader must then make
as many more images per second as the model gained (:func:`headroom`, :func:`read_model_side`).

``torch.compile`` (TorchInductor: Triton kernels on a GPU, C++ on a CPU) runs everywhere, so the
lesson measures it; :func:`tensorrt_version` says whether TensorRT is here without importing it,
and :func:`try_tensorrt` builds :func:`tensorrt_engine` and checks it where it is (CUDA only).

Example:
    >>> headroom(loader_rate=3000.0, model_rate=1000.0)
    3.0
    >>> quiet = [1.0, 1.01, 0.99, 1.0, 1.02]
    >>> print(read_model_side({"eager": [4000 * x for x in quiet], "torch.compile": [4800 * x for x in quiet]},
    ...                       loader=[4500 * x for x in quiet], train=[1500 * x for x in quiet]))
    ... # doctest: +NORMALIZE_WHITESPACE
    Inference, a forward pass on batches already on the device: eager 4,000 images/s; torch.compile
    4,800, 1.20x faster than eager (1.20x to 1.20x). The course's loader makes 4,500 images/s alone.
    Training at 1,500 images/s: a model up to 3.0x faster (2.9x to 3.1x) could still be fed (an upper
    bound: the loader was timed alone, and beside the model its work shares the device). Inference
    (torch.compile) at 4,800 images/s: the loader is already the bottleneck, 1.07x slower than the
    model (1.05x to 1.09x). A faster model (TensorRT, torch.compile, a smaller network) gains nothing
    where the loader cannot keep up.
    >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    >>> forward = inference(net, "cpu")
    >>> forward(torch.ones(2, 3, 2, 2)).shape, net.training
    (torch.Size([2, 3]), True)
"""

from __future__ import annotations

import copy
import importlib.util
import time
from collections.abc import Callable

import torch

#: Where to go from here: Torch-TensorRT's user guide (compile, save as TorchScript or ExportedProgram)
#: and TensorRT's ``trtexec``, which builds and times an engine from an ONNX file.
TORCH_TENSORRT_DOCS = "https://docs.pytorch.org/TensorRT/user_guide/saving_models.html"
TRTEXEC_DOCS = "https://docs.nvidia.com/deeplearning/tensorrt/10.16.1/performance/benchmarking.html"
#: What :func:`try_tensorrt` says where it cannot run.
NOT_INSTALLED = "torch_tensorrt is not installed here (pip install torch-tensorrt, the build that matches torch): not run."
NEEDS_CUDA = "TensorRT needs CUDA: not run here."


def inference(net: torch.nn.Module, device) -> Callable[[torch.Tensor], torch.Tensor]:
    """``forward(images) -> logits`` of a copy of ``net`` in eval mode and inference mode (``net``
    itself, and its training, are left alone). On CUDA: channels-last and bfloat16 autocast, as
    :func:`gpufeed.measure.suite.make_model` trains; on the CPU: float32. ``forward.module`` is the
    copy, what a compiler takes."""
    device = torch.device(device)
    model = copy.deepcopy(net).to(device).eval()
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return _forward(model, device)


def _forward(model: Callable, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    cuda = device.type == "cuda"

    def forward(images: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            return model(images)

    forward.module = model
    return forward


def agreement(got: torch.Tensor, want: torch.Tensor) -> float:
    """The relative difference of two outputs, ``|got - want| / |want|`` (L2 norms, in float32):
    a compiled model sums in another order (and in bfloat16 on CUDA), so outputs differ a little.

    Example:
        >>> agreement(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0]))
        0.0
    """
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm().clamp_min(1e-12))


def tolerance(device) -> float:
    """The :func:`agreement` a compiled forward must reach: bfloat16 keeps about 3 significant
    digits (CUDA), float32 about 7 (CPU)."""
    return 2e-2 if torch.device(device).type == "cuda" else 1e-4


def compiled_inference(forward: Callable, example: torch.Tensor, device, *, backend: str = "inductor",
                       ) -> tuple[Callable | None, str]:
    """``(compiled forward, note)``: ``torch.compile`` of ``forward.module`` (made by :func:`inference`),
    compiled by a first call on ``example`` and checked against the eager forward; ``(None, why)``
    when compiling fails (no C++ compiler, an unsupported backend) or the outputs disagree.
    """
    try:
        start = time.perf_counter()
        fast = _forward(torch.compile(forward.module, backend=backend, dynamic=False), torch.device(device))
        off = agreement(fast(example), forward(example))  # the first call compiles
        seconds = time.perf_counter() - start
    except Exception as e:  # report and go on: the lesson shows why
        return None, f"torch.compile failed here ({type(e).__name__}: {str(e).strip()[:160]})"
    if not off <= tolerance(device):
        return None, f"torch.compile's output differs from eager by {off:.1e} (allowed {tolerance(device):.0e})"
    return fast, f"compiled in {seconds:.0f} s; output within {off:.1e} of eager (allowed {tolerance(device):.0e})"


def headroom(loader_rate: float, model_rate: float) -> float:
    """How many times faster the model may get before the loader becomes the bottleneck: the
    loader's images/s (timed alone) over the model's (on batches already on the device)."""
    if not (loader_rate > 0 and model_rate > 0):
        raise ValueError(f"headroom: rates must be positive (got loader {loader_rate!r}, model {model_rate!r})")
    return loader_rate / model_rate


def read_model_side(forward: dict[str, list[float]], loader: list[float], train: list[float], note: str = "") -> str:
    """The sentences that read the model's side: the forward pass's images/s per engine, each
    compiler against eager (timed in turns), and whether the loader could feed a faster model, in
    training and in inference (its fastest engine). Every comparison is a verdict
    (:func:`gpufeed.measure.verdict.compare`); the loader was timed alone, so beside the model (its
    work shares the device) the headroom is an upper bound, and is worded so.

    Args:
        forward: images/s samples of the forward pass per engine, ``"eager"`` first, timed in turns.
        loader: images/s samples of the course's loader, timed alone (another run: not paired).
        train: images/s samples of the training step on batches already on the device.
        note: why ``torch.compile`` was not measured, where it was not.
    """
    import statistics

    from gpufeed.measure.verdict import CANNOT_TELL, FASTER, SAME, compare

    med = statistics.median
    eager = forward["eager"]
    said = [f"Inference, a forward pass on batches already on the device: eager {med(eager):,.0f} images/s"]
    said += [f"{name} {med(r):,.0f}, {compare(r, eager, paired=True, higher=True).words('eager')}"
             for name, r in forward.items() if name != "eager"]
    text = "; ".join(said) + (f"; torch.compile not measured: {note}" if "torch.compile" not in forward and note else "")
    fastest = max(forward, key=lambda k: med(forward[k]))
    text += f". The course's loader makes {med(loader):,.0f} images/s alone. "
    waits, unsure = False, None
    for what, rate in (("Training", train), (f"Inference ({fastest})", forward[fastest])):
        v = compare(loader, rate, higher=True)
        head = f"{what} at {med(rate):,.0f} images/s: "
        if v.kind == FASTER:
            text += (f"{head}a model up to {v.ratio:.1f}x faster ({v.interval(1)}) could still be fed (an upper bound: "
                     "the loader was timed alone, and beside the model its work shares the device). ")
        elif v.kind == SAME:
            text += f"{head}the loader ran {v.words('the model')}, so a faster model would wait for it. "
            waits = True
        elif v.kind == CANNOT_TELL:
            text += f"{head}the loader alone was {v.words('the model')}, so this run cannot tell whether it keeps up. "
            unsure = unsure or v
        else:
            text += f"{head}the loader is already the bottleneck, {v.words('the model')}. "
            waits = True
    text += ("A faster model (TensorRT, torch.compile, a smaller network) gains nothing where the loader cannot keep "
             "up." if waits else "Past that, a faster model gains nothing until the loader keeps up.")
    return text + (" " + unsure.advice if unsure else "")


def tensorrt_version() -> str | None:
    """Torch-TensorRT's version where ``torch_tensorrt`` is installed, else None (not imported: it
    loads TensorRT, seconds, and needs CUDA)."""
    if importlib.util.find_spec("torch_tensorrt") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch-tensorrt")
    except PackageNotFoundError:
        return "unknown version"


def tensorrt_engine(forward: Callable, example: torch.Tensor, path=None):
    """A TensorRT engine for ``forward.module`` (made by :func:`inference`) at ``example``'s shape,
    in float16 where TensorRT finds it faster; with ``path``, also saved as a TorchScript module
    with the engine embedded. Needs ``torch_tensorrt`` and CUDA. Returns the compiled module."""
    import torch_tensorrt

    trt = torch_tensorrt.compile(forward.module, ir="dynamo", inputs=[example],
                                 enabled_precisions={torch.float32, torch.float16})
    if path is not None:  # load it with torch.jit.load after `import torch_tensorrt`: no Python model needed
        torch_tensorrt.save(trt, str(path), output_format="torchscript", inputs=[example])
    return trt


def try_tensorrt(forward: Callable, example: torch.Tensor, device) -> tuple[Callable | None, str]:
    """``(engine, note)``: :func:`tensorrt_engine` built and checked against the eager ``forward``
    where ``torch_tensorrt`` and CUDA are here; else ``(None, why)`` in one line: not installed, no
    CUDA, a build that failed (an unsupported layer, a version mismatch with torch), or an output
    further from eager's than :func:`tolerance` allows.

    Example:
        >>> try_tensorrt(None, None, "cpu")[1] in (NOT_INSTALLED, NEEDS_CUDA)
        True
    """
    version = tensorrt_version()
    if version is None or torch.device(device).type != "cuda":
        return None, NOT_INSTALLED if version is None else NEEDS_CUDA
    try:
        trt = tensorrt_engine(forward, example)  # builds the engine: seconds to minutes
        off = agreement(trt(example), forward(example))
    except Exception as e:  # report and go on: the lesson shows why
        return None, f"Torch-TensorRT {version} failed here ({type(e).__name__}: {str(e).strip().splitlines()[0][:160]})"
    note = f"Torch-TensorRT {version}: engine built, output within {off:.1e} of eager"
    if not off <= tolerance(device):
        return None, note + f", more than the {tolerance(device):.0e} allowed: not timed"
    return trt, note
