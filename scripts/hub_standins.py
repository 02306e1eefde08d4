"""Build stand-ins for every Hugging Face hub model, revision, tokenizer and dataset the `paper` presets name.

    python scripts/hub_standins.py --out /tmp/hf-standins
    HF_HUB_CACHE=/tmp/hf-standins HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
        .venv/bin/lowrank-book run --all --profile paper --smoke --out /tmp/smoke

The stand-ins are small random GPT-NeoX models, a byte-level BPE tokenizer trained on the book's
offline corpus and a dataset of that corpus's documents, written in the hub cache's own layout
(refs/<revision> → snapshots/<commit>/), so the paper path runs offline end to end. They exercise
the code, not the papers' numbers (lib/book/standins.py says more).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.book.standins import build, hub_resources  # noqa: E402
from lib.text.corpus import load_corpus  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="the hub cache folder to write (use it as HF_HUB_CACHE)")
    ap.add_argument("--vocab-size", type=int, default=2048, help="the stand-in tokenizer's vocabulary (default 2048)")
    ap.add_argument("--dataset-mb", type=float, default=2.0, help="megabytes of text per stand-in dataset (default 2)")
    ap.add_argument("--list", action="store_true", help="only list what the presets name")
    args = ap.parse_args(argv)
    if args.list:
        found = hub_resources()
        print(json.dumps({"models": found.models, "datasets": found.datasets}, indent=1))
        return 0
    if args.out is None:
        ap.error("--out is required (the hub cache folder to write)")
    summary = build(args.out, vocab_size=args.vocab_size, dataset_mb=args.dataset_mb,
                    documents=load_corpus("default").documents)
    print(json.dumps(summary, indent=1))
    print(f"use it with: HF_HUB_CACHE={args.out} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
