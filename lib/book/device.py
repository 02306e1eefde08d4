"""Device, dtype and seeding: one place decides where tensors live and how runs repeat.

``device="auto"`` takes CUDA when present and the CPU otherwise; every chapter and
``lib`` function that touches torch goes through :func:`resolve_device`, so a chapter
run on a GPU and on a laptop differs only in this switch.
"""
from __future__ import annotations

import contextlib
import os
import random

import numpy as np

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(device: str = "auto"):
    """Return a ``torch.device`` for ``device`` in {"auto", "cpu", "cuda", "cuda:N"}.

    "auto" picks CUDA when available. Asking for CUDA on a machine without it is an
    error (rather than a silent fall-back), so a GPU run never quietly becomes a CPU run.
    """
    import torch

    if not isinstance(device, str):
        raise ValueError(f"parameter 'device' must be a string among {DEVICE_CHOICES} or 'cuda:N'; got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ValueError(f"parameter 'device' is {device!r} but no CUDA device is available; use 'auto' or 'cpu'")
        return torch.device(device)
    raise ValueError(f"parameter 'device' must be one of {DEVICE_CHOICES} or 'cuda:N'; got {device!r}")


def default_dtype(device) -> "torch.dtype":
    """Training dtype: bf16 autocast on a GPU that supports it, float32 on the CPU."""
    import torch

    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def seed_everything(seed: int, deterministic: bool = True) -> np.random.Generator:
    """Seed Python, NumPy and torch from one integer and return a NumPy ``Generator``.

    On the CPU, two runs with the same seed give bit-for-bit identical numbers: torch
    is asked for deterministic algorithms and single-threaded reductions are not needed
    because torch's CPU kernels are deterministic for a fixed thread count.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"parameter 'seed' must be a non-negative integer; got {seed!r}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard requirement, but keep numpy-only use cheap
        return np.random.default_rng(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(seed)


def describe_device(device) -> str:
    """A short human-readable name of the device (GPU model or CPU core count)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({os.cpu_count()} cores, torch {torch.__version__})"


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with ``torch.set_num_threads(n)``, restoring the previous count after.

    Tiny models (thousands of parameters) gain nothing from intra-op threads, and on a
    shared machine the threads' spin-waiting makes them several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def process_group() -> tuple[int, int]:
    """(rank, world size) of this process. Under ``torchrun`` (WORLD_SIZE > 1 and MASTER_ADDR
    set) it joins the default process group first: NCCL where CUDA is present, gloo on the
    CPU. A plain ``python`` run is rank 0 of 1."""
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return 0, 1
    if not dist.is_initialized():
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "MASTER_ADDR" not in os.environ:
            return 0, 1
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()
