"""One interface for causal language models: token sequences in, next-token log-probabilities out.

Everything the book measures about a language model goes through one object, the
next-token distribution

    p(z | h),  z in the vocabulary,  h = (x_1, ..., x_t) a history,

which :class:`CausalLM` returns as log-probabilities. A *logit matrix* (Golowich, Liu &
Shetty) stacks the vectors log p(. | h) for many histories h as rows;
:meth:`CausalLM.last_token_logprobs` is the query that builds it. In the Hilbert-space
picture (Chen & Murfet) the same conditional distributions, viewed as functions of the
history, are the vectors whose span is studied. Both only need the map h -> p(. | h), so
any Hugging Face causal LM (``AutoModelForCausalLM``) and the book's own miniature Pythia
suite (:mod:`lib.models.mini_pythia`) are used through this one class.

Memory is checked *before* anything large is allocated: :func:`estimate_param_count`
counts a model's parameters from its config alone (on the ``meta`` device, so exactly and
for free), and :func:`check_fits_in_memory` refuses with a :class:`MemoryError` that gives
the needed and available GiB and what to do instead.
"""
from __future__ import annotations

import inspect
import os
import re
import socket
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
import numpy as np
import torch

from ..book.device import resolve_device
from . import gguf_file

GiB = 2**30
HUB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)?$")


class ModelUnavailableError(OSError):
    """A model named on the Hugging Face hub cannot be had: no network and not in the local cache."""


# --------------------------------------------------------------------------------------
# memory
# --------------------------------------------------------------------------------------

def _cgroup_available() -> int | None:
    """Memory left under a cgroup (v2 or v1) limit, if the process runs under one."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= 2**60:
            return None
        return max(int(limit) - usage, 0)
    return None


def available_memory(device) -> int:
    """Bytes that can still be allocated on ``device``.

    CUDA: free device memory (``torch.cuda.mem_get_info``) plus what torch's caching
    allocator holds but does not use. CPU: ``MemAvailable`` from ``/proc/meminfo`` (or
    ``os.sysconf`` where there is no ``/proc``), capped by a cgroup memory limit if any.
    """
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):  # pragma: no cover - exotic platforms
            available = 2**62  # unknown: do not refuse
    cgroup = _cgroup_available()
    return int(min(available, cgroup) if cgroup is not None else available)


def check_fits_in_memory(n_bytes: float, device, what: str, hint: str | None = None) -> int:
    """Raise :class:`MemoryError` if ``n_bytes`` clearly exceed the memory available on ``device``.

    ``what`` says what needs the memory (it starts the message); ``hint`` replaces the
    generic advice. Returns the available bytes when it fits.
    """
    device = torch.device(device)
    available = available_memory(device)
    if n_bytes > available:
        advice = hint or ("use a smaller model, batch or context, a lower-precision dtype "
                          "(e.g. dtype=torch.bfloat16), or a device with more memory")
        raise MemoryError(
            f"{what} needs about {n_bytes / GiB:.2f} GiB but only {available / GiB:.2f} GiB is available "
            f"on {device}; refusing before allocating it. To fix: {advice}.")
    return available


def estimate_param_count(config) -> int:
    """Number of parameters of ``AutoModelForCausalLM.from_config(config)``, without allocating them.

    The model is built on the ``meta`` device (shapes only, no storage), so the count is
    exact for every architecture transformers knows; tied weights are counted once. If
    that fails (e.g. a remote-code architecture), a GPT-style formula is used:
    ``12 L d^2 + (1 or 2) V d``.
    """
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        return int(sum(p.numel() for p in model.parameters()))
    except Exception:  # noqa: BLE001 - fall back to the formula for anything unbuildable
        d = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or getattr(config, "d_model", None)
        n_layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
        vocab = getattr(config, "vocab_size", None)
        if not (d and n_layers and vocab):
            raise
        tied = getattr(config, "tie_word_embeddings", True)
        return int(12 * n_layers * d * d + (1 if tied else 2) * vocab * d)


def forward_flops(config, tokens: float, context: float, logits_at: float | None = None) -> float:
    """Floating-point operations of a GPT-style forward pass over ``tokens`` tokens, each attending
    to ``context`` positions on average, with the unembedding (logits over the vocabulary) at
    ``logits_at`` of them (default: all).

    Per token and layer: the q, k, v and output projections (4d² multiply-adds) and the MLP
    (2·d·d_ff, d_ff = 4d for Pythia), i.e. 2·(4d² + 2·d·d_ff) FLOPs, and attention, scores and
    weighted values, 2·2·context·d FLOPs; the unembedding is 2·d·V FLOPs per position it is
    computed at (Kaplan et al. 2020, Table 1, with the attention term kept). Norms, softmax and
    embeddings are left out: below a few per cent at these widths.
    """
    d, n_layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    d_ff = getattr(config, "intermediate_size", None) or 4 * d
    per_token = n_layers * (2 * (4 * d * d + 2 * d * d_ff) + 4 * context * d)
    return float(tokens * per_token + (tokens if logits_at is None else logits_at) * 2 * d * vocab)


def estimate_training_bytes(config, batch_size: int, context_length: int, activation_bytes: int = 4) -> int:
    """Rough peak memory of one AdamW training step of a GPT-style model, in bytes.

    * weights, gradients and the two AdamW moments in float32: 16 bytes per parameter;
    * activations kept for the backward pass, per layer about ``B T (34 d + 5 a T)``
      half-precision bytes (Korthikanti et al. 2022), scaled to ``activation_bytes`` per
      element (4 for float32 on the CPU, 2 under bf16 autocast);
    * the logits, their float32 copy and their gradient: ``3 B T V`` float32 values.

    Meant to catch a configuration that clearly cannot fit, not to plan to the last MiB.
    """
    n_params = estimate_param_count(config)
    d = config.hidden_size
    n_layers = config.num_hidden_layers
    heads = config.num_attention_heads
    tokens = batch_size * context_length
    per_layer = tokens * (34 * d + 5 * heads * context_length) * activation_bytes / 2
    logits = 3 * tokens * config.vocab_size * 4
    return int(16 * n_params + n_layers * per_layer + logits)


def _as_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        return getattr(torch, dtype)
    raise ValueError(f"parameter 'dtype' must be None, 'auto', a torch.dtype or its name (e.g. 'bfloat16'); got {dtype!r}")


@contextmanager
def quiet_transformers():
    """Silence transformers' per-call progress bars (e.g. "Writing model shards") inside the block."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


# --------------------------------------------------------------------------------------
# the model wrapper
# --------------------------------------------------------------------------------------

def _as_token_batch(sequences, vocab_size: int) -> torch.Tensor:
    """(B, T) int64 CPU tensor from an int array / tensor / list of equal-length lists, validated."""
    if isinstance(sequences, torch.Tensor):
        if sequences.dtype.is_floating_point or sequences.dtype.is_complex or sequences.dtype == torch.bool:
            raise ValueError(f"parameter 'sequences' must hold integer token ids; got dtype {sequences.dtype}")
        batch = sequences.detach().to("cpu", torch.long)
    else:
        try:
            array = np.asarray(sequences)
        except ValueError as err:  # ragged lists
            raise ValueError("parameter 'sequences' must be a (B, T) batch of equal-length token sequences; "
                             f"got ragged input ({err})") from None
        if array.size and not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"parameter 'sequences' must hold integer token ids; got dtype {array.dtype}")
        batch = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
    if batch.ndim != 2 or batch.shape[0] < 1 or batch.shape[1] < 1:
        raise ValueError("parameter 'sequences' must be a non-empty (B, T) batch of token sequences "
                         f"(use seq[None] for a single one); got shape {tuple(batch.shape)}")
    low, high = int(batch.min()), int(batch.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(f"parameter 'sequences' holds token ids in [{low}, {high}] but the model's vocabulary "
                         f"is 0..{vocab_size - 1}")
    return batch


def _check_batch_size(batch_size) -> int:
    if not isinstance(batch_size, (int, np.integer)) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"parameter 'batch_size' must be a positive integer; got {batch_size!r}")
    return int(batch_size)


def heldout_windows(tokens: np.ndarray, context_length: int, n_windows: int, seed: int) -> np.ndarray:
    """``n_windows`` windows of ``context_length + 1`` tokens at random starts drawn from ``seed``.

    The same (tokens, context_length, n_windows, seed) always give the same windows.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"parameter 'tokens' must be a 1-D integer array; got shape {tokens.shape}, dtype {tokens.dtype}")
    for name, value in (("context_length", context_length), ("n_windows", n_windows)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"parameter '{name}' must be a positive integer; got {value!r}")
    if len(tokens) < context_length + 1:
        raise ValueError(f"parameter 'tokens' needs at least context_length + 1 = {context_length + 1} tokens "
                         f"for one window; got {len(tokens)}")
    starts = np.random.default_rng(seed).integers(0, len(tokens) - context_length, size=n_windows)
    return tokens[starts[:, None] + np.arange(context_length + 1)].astype(np.int64)


class CausalLM:
    """A causal LM on a device, queried for next-token distributions p(z | h).

    Wraps any ``transformers`` causal LM (``AutoModelForCausalLM``): ``CausalLM(model)``, no
    tokenizer (every query takes token ids); the model is moved to ``device`` and put in eval
    mode. The library's functions that take a model wrap a bare ``transformers`` model themselves
    (:func:`as_causal_lm`, where it is, on its own device). All queries take a (B, T) batch of token ids (NumPy
    array, torch tensor, or list of equal-length lists), run under ``torch.inference_mode``
    in chunks of ``batch_size`` sequences on the model's device, and return float32 CPU
    tensors.
    """

    def __init__(self, model, device="auto"):
        self._device = device if isinstance(device, torch.device) else resolve_device(device)
        self.model = model.to(self._device).eval()

    # -- properties ---------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def vocab_size(self) -> int:
        """Size of the output distribution (the LM head's width; may exceed the tokenizer's)."""
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if head is not None and getattr(head, "out_features", None):
            return int(head.out_features)
        return int(self.model.config.vocab_size)

    @property
    def n_params(self) -> int:
        """Number of parameters (tied weights counted once)."""
        return int(sum(p.numel() for p in self.model.parameters()))

    @property
    def config(self):
        return self.model.config

    def __repr__(self) -> str:
        return f"CausalLM({type(self.model).__name__}, {self.n_params:,} params, vocab {self.vocab_size}, {self.device})"

    # -- queries ------------------------------------------------------------------------
    def _logits(self, chunk: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        kwargs = {"use_cache": False}
        if last_only and self._keeps_logits():
            kwargs["logits_to_keep"] = 1
        logits = self.model(input_ids=chunk.to(self._device), **kwargs).logits
        return logits[:, -1] if last_only else logits

    def _keeps_logits(self) -> bool:
        import inspect

        return "logits_to_keep" in inspect.signature(self.model.forward).parameters

    def next_token_logprobs(self, sequences, batch_size: int = 64) -> torch.Tensor:
        """log p(. | sequences[b, :t+1]) for every prefix: a (B, T, V) float32 CPU tensor.

        Row [b, t] is the log-softmax of the logits after reading tokens 0..t of sequence b,
        i.e. the model's distribution of token t+1. The full tensor is B*T*V*4 bytes; use
        :meth:`last_token_logprobs` when only the end of each sequence matters.
        """
        batch = _as_token_batch(sequences, self.vocab_size)
        batch_size = _check_batch_size(batch_size)
        n, t = batch.shape
        check_fits_in_memory(n * t * self.vocab_size * 4, "cpu", f"next_token_logprobs of a {n}x{t} batch",
                             hint="ask for fewer or shorter sequences at a time, or use last_token_logprobs")
        out = torch.empty(n, t, self.vocab_size, dtype=torch.float32)
        with torch.inference_mode():
            for i in range(0, n, batch_size):
                logits = self._logits(batch[i:i + batch_size])
                out[i:i + batch_size] = torch.log_softmax(logits.float(), dim=-1).cpu()
        return out

    def last_token_logprobs(self, sequences, batch_size: int = 64) -> torch.Tensor:
        """log p(. | sequences[b]) after each whole sequence: a (B, V) float32 CPU tensor.

        This is the row of a logit matrix for history h = sequences[b].
        """
        batch = _as_token_batch(sequences, self.vocab_size)
        batch_size = _check_batch_size(batch_size)
        out = torch.empty(batch.shape[0], self.vocab_size, dtype=torch.float32)
        with torch.inference_mode():
            for i in range(0, batch.shape[0], batch_size):
                logits = self._logits(batch[i:i + batch_size], last_only=True)
                out[i:i + batch_size] = torch.log_softmax(logits.float(), dim=-1).cpu()
        return out

    def sequence_logprob(self, sequences, batch_size: int = 64) -> torch.Tensor:
        """sum_{t>=1} log p(x_t | x_0..x_{t-1}) per sequence: a (B,) float64 tensor.

        The first token is conditioned on, not scored (there is no distribution for it
        without a beginning-of-sequence token); a length-1 sequence scores 0.
        """
        batch = _as_token_batch(sequences, self.vocab_size)
        batch_size = _check_batch_size(batch_size)
        out = torch.zeros(batch.shape[0], dtype=torch.float64)
        if batch.shape[1] < 2:
            return out
        with torch.inference_mode():
            for i in range(0, batch.shape[0], batch_size):
                chunk = batch[i:i + batch_size]
                logp = torch.log_softmax(self._logits(chunk[:, :-1]).float(), dim=-1).cpu()
                picked = logp.gather(-1, chunk[:, 1:, None]).squeeze(-1)
                out[i:i + batch_size] = picked.double().sum(dim=1)
        return out

    def heldout_loss(self, tokens, context_length: int, n_windows: int, seed: int = 0,
                     batch_size: int = 64) -> float:
        """Mean next-token cross-entropy (nats) on ``n_windows`` deterministic windows of ``tokens``.

        Windows of ``context_length + 1`` tokens start at positions drawn from ``seed``
        (:func:`heldout_windows`); every one of the ``context_length`` predictions in each
        window is scored. This is the held-out loss recorded by :func:`lib.models.mini_pythia.train_suite`.
        """
        windows = torch.from_numpy(heldout_windows(tokens, context_length, n_windows, seed))
        if int(windows.max()) >= self.vocab_size:
            raise ValueError(f"parameter 'tokens' holds token id {int(windows.max())} but the model's vocabulary "
                             f"is 0..{self.vocab_size - 1}")
        batch_size = _check_batch_size(batch_size)
        total = 0.0
        with torch.inference_mode():
            for i in range(0, len(windows), batch_size):
                chunk = windows[i:i + batch_size].to(self._device)
                logits = self._logits(chunk[:, :-1]).float()
                total += torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1), reduction="sum").item()
        return total / windows[:, 1:].numel()

    # -- loading ------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, name_or_path, device="auto", dtype=None, local_files_only: bool | None = None,
                        *, init_seed: int = 0, **kwargs) -> "CausalLM":
        """Load a causal LM by hub name (``"EleutherAI/pythia-70m"``), local directory, or GGUF file.

        * A GGUF model (:mod:`lib.models.gguf_file`): ``"gguf:<path>"`` (any GGUF file whose
          architecture transformers' GGUF loader knows), ``"smollm2-135m"`` or ``"gemma3-270m"`` (the
          files pinned packages install). ``revision``: ``"final"`` (default; the file's weights) or
          ``"init"`` (the untrained twin drawn with ``init_seed``). Both are dequantised once into the
          book's cache (:func:`lib.models.gguf_file.dequantised_dir`) and read from there; a missing
          file, a file that is not GGUF and an architecture the loader does not know are refused first.

        * A local directory (e.g. one written by ``save_pretrained``, such as a checkpoint
          of the book's mini suite from :mod:`lib.models.mini_pythia`) is loaded with
          ``local_files_only=True`` and needs no network.
        * A hub name needs the network, or the model already in the local Hugging Face
          cache. ``local_files_only=None`` means: offline if ``HF_HUB_OFFLINE`` is set or
          the hub host cannot be reached, so an offline machine fails at once with
          :class:`ModelUnavailableError` rather than after retries.
        * ``dtype``: None = float32 (exact log-probabilities for rank and spectrum
          computations); ``"auto"`` = the checkpoint's own dtype; or any torch dtype.
        * Before weights are read, the parameter count is computed from the config and
          :func:`check_fits_in_memory` refuses a model that cannot fit on ``device``.

        Extra keyword arguments go to ``AutoModelForCausalLM.from_pretrained``.
        """
        from transformers import AutoConfig, AutoModelForCausalLM

        device = device if isinstance(device, torch.device) else resolve_device(device)
        name = os.fspath(name_or_path)
        if gguf_file.is_gguf_name(name):
            revision = gguf_file.check_revision(kwargs.pop("revision", None))

            def fits(config, what=name):  # dequantised float32, held twice while it is written
                n_params = estimate_param_count(config)
                check_fits_in_memory(2 * 4 * n_params, "cpu", f"dequantising {what!r} ({n_params / 1e6:,.1f}M parameters)")

            name = str(gguf_file.dequantised_dir(name, revision, seed=init_seed, check_memory=fits))
        path = Path(name).expanduser()
        is_local = path.exists()
        if is_local:
            if not path.is_dir():
                raise ValueError(f"parameter 'name_or_path' is the file {name!r}; give the directory that holds "
                                 "config.json and the weights (as written by save_pretrained)")
            name, local_files_only = str(path), True
        elif not HUB_NAME.match(name) or name.startswith((".", "~")) or name.count("/") > 1:
            raise FileNotFoundError(
                f"no such local model directory: {name!r}. A local model is a directory written by "
                "save_pretrained (e.g. a checkpoint of the book's mini suite, lib.models.mini_pythia.train_suite); "
                "a hub model is named 'org/name'.")
        elif local_files_only is None:
            local_files_only = hub_offline() or not hub_reachable()

        try:
            config = AutoConfig.from_pretrained(name, local_files_only=local_files_only,
                                                revision=kwargs.get("revision"))
        except (OSError, ValueError) as err:
            if is_local or not isinstance(err, OSError):
                raise FileNotFoundError(f"{name!r} is not a saved model directory (no readable config.json): {err}") from None
            raise ModelUnavailableError(
                f"cannot load {name!r} from the Hugging Face hub: "
                + ("no network is available (offline mode or the hub cannot be reached) and it is not in the local "
                   "Hugging Face cache" if local_files_only else f"the hub request failed ({err})")
                + f" (and there is no local directory {name!r} either). Hub models need the network (or a copy in the "
                "cache made earlier). What works offline: a local "
                "path, e.g. a directory written by save_pretrained, or the book's own mini Pythia suite trained by "
                "lib.models.mini_pythia.train_suite (suite.load(size) or CausalLM.from_pretrained(checkpoint_dir)).") from None

        if dtype is None:
            load_dtype = torch.float32
        elif dtype == "auto":
            load_dtype = _as_dtype(str(getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
                                       or "float32").replace("torch.", ""))
        else:
            load_dtype = _as_dtype(dtype)
        n_params = estimate_param_count(config)
        n_bytes = n_params * torch.empty((), dtype=load_dtype).element_size()
        check_fits_in_memory(n_bytes, device, f"loading {name!r} ({n_params / 1e6:,.1f}M parameters in {load_dtype})")
        if device.type != "cpu":  # weights pass through host memory on their way to the device
            check_fits_in_memory(n_bytes, "cpu", f"loading {name!r} into host memory")
        with quiet_transformers() if is_local else nullcontext():  # keep download bars for hub models
            model = AutoModelForCausalLM.from_pretrained(name, dtype=load_dtype, local_files_only=local_files_only,
                                                         **kwargs)
        return cls(model, device)


def is_transformers_model(obj) -> bool:
    """Whether ``obj`` is a ``transformers`` model (an instance of ``transformers.PreTrainedModel``, e.g.
    what ``AutoModelForCausalLM`` returns). Read without importing transformers: where it is not loaded,
    no object can be one."""
    modeling = sys.modules.get("transformers.modeling_utils")
    return modeling is not None and isinstance(obj, modeling.PreTrainedModel)


def reads_input_ids(obj) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module`` whose ``forward`` takes ``input_ids``: a language model
    (a ``transformers`` model, or a wrapper around one), never a callable on a tuple of token ids."""
    if not isinstance(obj, torch.nn.Module):
        return False
    try:
        return "input_ids" in inspect.signature(obj.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a forward without a signature
        return False


def causal_lm_problem(model) -> str | None:
    """Why a ``transformers`` model cannot be read as a causal LM by :class:`CausalLM`, or None.

    :class:`CausalLM` reads the next-token distribution p(· | h) off the model's output logits, so
    the model needs a language-model head (``get_output_embeddings()``; ``AutoModel`` gives the
    backbone alone) and must be a decoder (an encoder–decoder such as T5 predicts the next token of
    its decoder's input, not of h)."""
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return (f"{type(model).__name__} is an encoder-decoder model; the book reads causal (decoder-only) "
                "language models, loaded with AutoModelForCausalLM")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        return (f"{type(model).__name__} has no language-model head (get_output_embeddings() is None), so it gives "
                "hidden states, not next-token logits; load it with AutoModelForCausalLM")
    return None


def as_causal_lm(model, name: str = "model") -> CausalLM:
    """A ``transformers`` causal LM wrapped in :class:`CausalLM` where it already is (its own device), put
    in eval mode (dropout off: every query of the book reads the model deterministically); a
    :class:`CausalLM` itself. Anything else is refused with a ``TypeError`` naming ``name``, what is
    allowed and what was given: a model without a language-model head or an encoder–decoder says so
    (:func:`causal_lm_problem`)."""
    if isinstance(model, CausalLM):
        return model
    if not is_transformers_model(model):
        raise TypeError(f"parameter {name!r} must be a CausalLM or a transformers causal LM "
                        f"(AutoModelForCausalLM); got {type(model).__name__}")
    problem = causal_lm_problem(model)
    if problem is not None:
        raise TypeError(f"parameter {name!r}: {problem}")
    return CausalLM(model, device=model.device)


def hub_offline() -> bool:
    """Whether the environment asks for offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host accepts a TCP connection within ``timeout`` seconds."""
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False





def sequence_loss(model, batch) -> torch.Tensor:
    """Per-sequence next-token cross-entropy (nats per token) of a ``transformers`` causal LM.

    ``batch = (ids,)`` with ``ids`` a (B, T) token tensor; returns the (B,) means over
    positions 1..T−1 of −log p(ids[t] | ids[:t]). The per-sample loss ℓ_i of
    :func:`lib.llc.estimate_llc` for a language model, with one window as one sample.

    The cross entropy takes the logits as B·(T−1) rows of V classes: given as the (B, V, T−1)
    transpose instead (the same numbers), its log-softmax and backward run over strided memory:
    a bare forward + backward of mini-Pythia p-tiny (V = 2,048) is then 1.2× slower on two CPU
    cores, and of p-small at the paper's vocabulary 5× slower on a GPU (``benchmarks/README.md``).
    """
    (ids,) = batch
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
    B, T1, V = logits.shape
    per_token = torch.nn.functional.cross_entropy(logits.reshape(B * T1, V).float(), ids[:, 1:].reshape(B * T1),
                                                  reduction="none")
    return per_token.view(B, T1).mean(-1)


__all__ = ["CausalLM", "ModelUnavailableError", "as_causal_lm", "available_memory", "causal_lm_problem",
           "is_transformers_model", "reads_input_ids", "check_fits_in_memory", "sequence_loss",
           "estimate_param_count", "estimate_training_bytes", "forward_flops", "heldout_windows", "quiet_transformers", "hub_offline",
           "hub_reachable", "HUB_NAME"]
