"""The `paper` profile's code path, executed offline: every chapter with ``--profile paper --smoke`` on the hub
stand-ins (a small random GPT-NeoX at every revision the paper presets name, a byte-level BPE tokenizer, the
datasets they stream, all in the Hugging Face cache's real layout; lib/book/standins.py).

Nothing here measures the papers' numbers: a smoke run shows that the paper path (its hub loaders, model
families, branches and claims) runs end to end and decides, or leaves undecided with a reason, every claim.
Marked ``slow`` (part of `make test`).
"""
import os
import subprocess
import sys

import pytest

from lib import REPO_ROOT
from lib.book.chapters import all_claims
from lib.book.claims import evaluate
from lib.book.records import load_records
from lib.book.runner import book_chapters

pytestmark = pytest.mark.slow

SMOKE_WALL_LIMIT_S = 300  # per chapter: "a few minutes" on a CPU; the smoke presets aim at 45 s on 2 quiet cores


@pytest.fixture(scope="module")
def smoke_book(tmp_path_factory):
    """Build the stand-in hub cache, then run every chapter with --profile paper --smoke against it, offline."""
    hub = tmp_path_factory.mktemp("hub")
    out = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    built = subprocess.run([sys.executable, "scripts/hub_standins.py", "--out", str(hub)], cwd=REPO_ROOT, env=env,
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    proc = subprocess.run([sys.executable, "-m", "lib", "run", "--all", "--profile", "paper", "--smoke",
                           "--out", str(out)], cwd=REPO_ROOT, env=env, text=True, timeout=3000)
    assert proc.returncode == 0, "a smoke run of the paper profile failed (see the output above)"
    return {c.id: load_records(c.id, out / "records") for c in book_chapters()}


def test_every_chapter_ran_the_paper_profile_at_smoke_sizes(smoke_book):
    for chapter in book_chapters():
        rec = smoke_book[chapter.id]
        assert rec is not None, chapter.id
        meta = rec["meta"]
        assert meta["profile"] == "paper" and meta.get("smoke") is True, (chapter.id, meta.get("profile"))
        assert not meta.get("incomplete"), chapter.id
        assert meta["wall_s"] < SMOKE_WALL_LIMIT_S, (chapter.id, meta["wall_s"])


CLAIMS = all_claims()


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.id for c in CLAIMS])
def test_claim_is_decided_or_undecided_with_a_reason(smoke_book, claim):
    """At smoke sizes a must-hold claim passes or is undecided with its reason; a finding is whatever the
    stand-ins give (reproduces, does not reproduce, undecided), but never invalid or missing."""
    result = evaluate(claim, smoke_book.get(claim.chapter))
    assert result.ok, f"{claim.id} ({claim.kind}, {result.status}) at smoke sizes: ours {result.value!r}"
    if not result.decided:
        assert result.reason, f"{claim.id} is undecided without a reason"
