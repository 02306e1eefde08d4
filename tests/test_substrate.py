"""lib.substrate.training_windows: the windows two chapters measure a language model's loss on."""
import numpy as np
import pytest
import torch

from lib import substrate


def test_windows_are_slices_of_the_stream_at_seeded_starts():
    stream = np.arange(1000)
    w = substrate.training_windows(stream, 6, 8, seed=3)
    assert w.shape == (6, 8) and w.dtype == torch.int64
    assert torch.all(w[:, 1:] - w[:, :-1] == 1)  # contiguous slices of an increasing stream
    starts = np.random.default_rng(3).integers(0, 1000 - 8 - 1, size=6)
    assert w[:, 0].tolist() == starts.tolist()
    assert torch.equal(w, substrate.training_windows(stream, 6, 8, seed=3))
    assert not torch.equal(w, substrate.training_windows(stream, 6, 8, seed=4))


def test_a_stream_too_short_for_the_windows_is_refused():
    with pytest.raises(ValueError, match="too few for windows of 8"):
        substrate.training_windows(np.arange(9), 2, 8, seed=0)
