"""Stand-ins for the hub: what the paper presets name, built in the cache's layout, read offline by the
library's own hub code exactly as a download would be."""
import json

import pytest

from lib.book import standins
from lib.book.chapters import chapters
from lib.book.runner import check_parameters
from lib.book.parameters import ParameterError


def test_the_paper_presets_name_pythia_revisions_and_the_pile():
    found = standins.hub_resources()
    revisions = found.models["EleutherAI/pythia-70m"]
    assert revisions[0] == "main" and "step0" in revisions and "step143000" in revisions
    assert found.datasets == ["monology/pile-uncopyrighted"]
    assert standins.hub_resources(profiles=("ci",)).models == {}  # the ci profile needs no hub


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    cache = tmp_path_factory.mktemp("hub")
    wanted = standins.HubResources({"org/tiny-lm": ["main", "step0", "step8"]}, ["org/texts"])
    texts = [f"Paragraph {i}: the function f(x) returns x + {i}, and the list holds {i} items." for i in range(400)]
    summary = standins.build(cache, wanted, vocab_size=300, dataset_mb=0.05, documents=texts)
    return cache, summary


def test_the_cache_layout_is_the_hubs(hub):
    cache, summary = hub
    repo = cache / "models--org--tiny-lm"
    for revision in ("main", "step0", "step8"):
        commit = (repo / "refs" / revision).read_text()
        assert len(commit) == 40 and (repo / "snapshots" / commit / "config.json").is_file()
        assert (repo / "snapshots" / commit / "tokenizer.json").is_file()
    assert len({(repo / "refs" / r).read_text() for r in ("main", "step0", "step8")}) == 3
    data = cache / "datasets--org--texts"
    rows = (data / "snapshots" / (data / "refs" / "main").read_text() / "train" / "00.jsonl").read_text().splitlines()
    assert rows and all(json.loads(row)["text"].strip() for row in rows)
    assert summary["models"] == {"org/tiny-lm": ["main", "step0", "step8"]} and summary["datasets"] == ["org/texts"]


def test_offline_hub_code_reads_the_standins(hub, monkeypatch, tmp_path):
    import torch
    from huggingface_hub import snapshot_download
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    cache, _ = hub
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path / "book-cache"))
    weights = []
    for revision in ("step0", "step8"):
        folder = snapshot_download("org/tiny-lm", revision=revision, cache_dir=cache, local_files_only=True)
        model = GPTNeoXForCausalLM.from_pretrained(folder)
        weights.append(next(model.parameters()).detach().clone())
    assert not torch.equal(*weights)  # one seed per revision
    tok = AutoTokenizer.from_pretrained(snapshot_download("org/tiny-lm", cache_dir=cache, local_files_only=True))
    assert tok.decode(tok.encode("def f(x): return x")) == "def f(x): return x"

    from lib.text.corpus import load_corpus

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    corpus = load_corpus("hf:org/texts", max_documents=3)
    assert corpus.n_documents == 3 and corpus.provenance["local_snapshot"] == (cache / "datasets--org--texts" / "refs" /
                                                                               "main").read_text()


def test_a_paper_run_offline_is_refused_at_once_without_its_resources(hub, monkeypatch):
    import huggingface_hub.constants as constants

    cache, _ = hub
    modes = chapters()["modes"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache / "empty"))
    with pytest.raises(ParameterError, match="holds no snapshot of dataset 'org/texts'.*what works offline"):
        check_parameters(modes, {"corpus": "hf:org/texts"})
    with pytest.raises(ParameterError, match="holds no snapshot of 'org/tiny-lm'"):
        check_parameters(modes, {"tokenizer": "hf:org/tiny-lm"})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    check_parameters(modes, {"corpus": "hf:org/texts", "tokenizer": "hf:org/tiny-lm"})
    monkeypatch.delenv("HF_HUB_OFFLINE")  # online, a hub name is checked for its form only
    for var in ("HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    check_parameters(modes, {"corpus": "hf:somebody/else"})
