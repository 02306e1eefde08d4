"""Device resolution and seeding."""
import numpy as np
import pytest
import torch

from lib.book.device import default_dtype, describe_device, resolve_device, seed_everything


def test_auto_resolves_and_cpu_path_is_exercised():
    dev = resolve_device("auto")
    assert dev.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"
    assert default_dtype("cpu") == torch.float32
    assert "cpu" in describe_device("cpu")


def test_bad_devices_fail_clearly():
    with pytest.raises(ValueError, match="parameter 'device'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_seeding_repeats_bit_for_bit():
    a = seed_everything(7)
    x = (a.random(3), np.random.rand(2), torch.randn(4))
    b = seed_everything(7)
    y = (b.random(3), np.random.rand(2), torch.randn(4))
    assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) and torch.equal(x[2], y[2])
    with pytest.raises(ValueError, match="parameter 'seed'"):
        seed_everything(-1)


def test_torch_threads_sets_and_restores_the_thread_count():
    import torch

    from lib.book.device import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    try:
        with torch_threads(1):
            raise KeyError("inside")
    except KeyError:
        pass
    assert torch.get_num_threads() == before          # restored after an error too
