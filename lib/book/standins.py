"""Stand-ins for the Hugging Face hub: what the ``paper`` presets name, built small, offline, in the cache's layout.

The ``paper`` profile reads hub models at named revisions (``EleutherAI/pythia-70m`` at ``step0`` …
``step143000``), their tokenizer, and a streamed dataset (``monology/pile-uncopyrighted``). No
machine that builds the book has a network, so this module writes a *stand-in* for each into a
Hugging Face hub cache, in the cache's own layout::

    <hub cache>/models--EleutherAI--pythia-70m/refs/step0            (a commit hash)
    <hub cache>/models--EleutherAI--pythia-70m/snapshots/<commit>/    (config, weights, tokenizer)
    <hub cache>/datasets--monology--pile-uncopyrighted/refs/main
    <hub cache>/datasets--monology--pile-uncopyrighted/snapshots/<commit>/train/00.jsonl

With ``HF_HUB_OFFLINE=1`` and ``HF_HUB_CACHE`` (or ``HF_HOME``) pointing there, the paper presets
resolve exactly as they would online: the library's own hub code (``snapshot_download`` with
``local_files_only``, ``from_pretrained``) finds each revision through its ``refs/<revision>``.
The models are small GPT-NeoX networks with random weights (one seed per revision), the tokenizer
a byte-level BPE trained on the book's offline corpus, the dataset documents of that corpus. They
exercise the code path, not the papers' numbers: a finding measured on them says nothing.

``python scripts/hub_standins.py --out DIR`` builds them; :func:`hub_resources` lists what the
presets name.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .chapters import chapters

SPECIAL_TOKENS = ("<|endoftext|>", "<|padding|>")  # GPT-NeoX's


@dataclass
class HubResources:
    """What the presets name: model repos with their revisions, and dataset repos."""

    models: dict[str, list[str]] = field(default_factory=dict)   # repo → revisions ("main" for a tokenizer)
    datasets: list[str] = field(default_factory=list)

    def add_model(self, repo: str, revisions) -> None:
        have = self.models.setdefault(repo, [])
        for rev in revisions:
            if rev not in have:
                have.append(rev)


def hub_resources(profiles=("paper",), smoke: bool = True) -> HubResources:
    """Every hub model (with its revisions) and dataset that the chapters' presets of ``profiles`` name
    (with the ``smoke`` overlay where a chapter declares one): ``hf:<name>`` values of corpus
    parameters are datasets, of other parameters (tokenizers) models at ``main``; a ``hub_model``
    parameter with ``hub_revisions`` is a model at those revisions."""
    found = HubResources()
    for chapter in chapters().values():
        for profile in profiles:
            values = dict(chapter.presets.get(profile, {}))
            if smoke and profile == "paper":
                values.update(chapter.presets.get("smoke", {}))
            for name, value in values.items():
                if isinstance(value, str) and value.startswith("hf:") and len(value) > 3:
                    repo = value[3:]
                    if "corpus" in name:
                        if repo not in found.datasets:
                            found.datasets.append(repo)
                    else:
                        found.add_model(repo, ["main"])
            hub = values.get("hub_model")
            if isinstance(hub, str) and hub.count("/") == 1 and not Path(hub).exists():
                found.add_model(hub, ["main", *(values.get("hub_revisions") or [])])
    return found


def _commit(repo: str, revision: str) -> str:
    """A stable 40-hex "commit" for a stand-in revision (the cache's snapshot folder name)."""
    return hashlib.sha1(f"standin:{repo}@{revision}".encode()).hexdigest()


def _repo_folder(cache: Path, kind: str, repo: str) -> Path:
    return cache / f"{kind}s--{repo.replace('/', '--')}"


def _publish(cache: Path, kind: str, repo: str, revision: str, write) -> Path:
    """Write one snapshot with ``write(folder)`` and point ``refs/<revision>`` at it (atomically: the ref is
    written last, so a crash leaves no ref to a half-written snapshot)."""
    folder = _repo_folder(cache, kind, repo)
    commit = _commit(repo, revision)
    snapshot = folder / "snapshots" / commit
    if snapshot.exists():
        shutil.rmtree(snapshot)
    partial = snapshot.with_name(commit + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    write(partial)
    partial.rename(snapshot)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    ref = folder / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)  # a revision such as "refs/pr/1" nests
    ref.write_text(commit)
    return snapshot


def train_tokenizer(documents: list[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-NeoX's special tokens) trained on ``documents``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(documents, trainer=trainer)
    return tok


def _write_tokenizer(tok, folder: Path, context: int) -> None:
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GPTNeoXTokenizerFast", "bos_token": SPECIAL_TOKENS[0], "eos_token": SPECIAL_TOKENS[0],
        "unk_token": SPECIAL_TOKENS[0], "pad_token": SPECIAL_TOKENS[1], "model_max_length": context,
        "add_prefix_space": False}, indent=1))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": SPECIAL_TOKENS[0], "eos_token": SPECIAL_TOKENS[0], "unk_token": SPECIAL_TOKENS[0],
         "pad_token": SPECIAL_TOKENS[1]}, indent=1))


def standin_config(vocab_size: int, context: int = 2048):
    """A small GPT-NeoX of Pythia's shape (rotary on a quarter of each head, parallel residual)."""
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=256, max_position_embeddings=context, rotary_pct=0.25,
                         use_parallel_residual=True, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)


def build(cache: Path | str, resources: HubResources | None = None, *, vocab_size: int = 2048,
          dataset_mb: float = 2.0, context: int = 2048, seed: int = 0, documents) -> dict:
    """Write the stand-ins of ``resources`` (default: :func:`hub_resources`) into the hub cache ``cache``.

    The tokenizer is trained on, and the datasets hold, the first ``dataset_mb`` megabytes of
    ``documents`` (an iterable of texts; ``scripts/hub_standins.py`` passes the book's offline corpus, so
    that this machinery module needs nothing of ``lib.text``).

    Returns a summary ``{"models": {repo: [revisions]}, "datasets": [...], "cache": str}``. Deterministic
    given ``seed``: the same call writes the same files.
    """
    import torch
    from transformers import GPTNeoXForCausalLM
    from transformers.utils import logging as hf_logging

    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 300:
        raise ValueError(f"parameter 'vocab_size' must be an integer >= 300 (bytes and merges); got {vocab_size!r}")
    if not dataset_mb > 0:
        raise ValueError(f"parameter 'dataset_mb' must be a positive number of megabytes; got {dataset_mb!r}")
    cache = Path(cache).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    resources = resources or hub_resources()
    if documents is None or isinstance(documents, str):
        raise ValueError("parameter 'documents' must be an iterable of texts (the corpus the stand-ins hold)")
    source = documents
    documents, size = [], 0
    for doc in source:
        documents.append(doc)
        size += len(doc.encode())
        if size >= dataset_mb * 2 ** 20:
            break
    tok = train_tokenizer(documents, vocab_size) if resources.models else None
    hf_logging.disable_progress_bar()
    for repo, revisions in resources.models.items():
        for i, revision in enumerate(revisions):
            def write(folder: Path, revision=revision) -> None:
                torch.manual_seed(seed + int(hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()[:8], 16))
                model = GPTNeoXForCausalLM(standin_config(tok.get_vocab_size(), context))
                model.save_pretrained(folder, safe_serialization=True)
                _write_tokenizer(tok, folder, context)
            _publish(cache, "model", repo, revision, write)
    for repo in resources.datasets:
        def write(folder: Path) -> None:
            (folder / "train").mkdir()
            with open(folder / "train" / "00.jsonl", "w", encoding="utf-8") as f:
                for doc in documents:
                    f.write(json.dumps({"text": doc, "meta": {"source": "book stand-in"}}) + "\n")
        _publish(cache, "dataset", repo, "main", write)
    return {"models": {r: list(v) for r, v in resources.models.items()}, "datasets": list(resources.datasets),
            "cache": str(cache)}
