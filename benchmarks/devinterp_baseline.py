"""devinterp's LLC estimator on one case of ``bench_llc.py``; runs INSIDE a devinterp venv.

    .venv-devinterp2/bin/python benchmarks/devinterp_baseline.py SPEC.json   (or '-' for stdin)
    .venv-devinterp1/bin/python benchmarks/devinterp_baseline.py '{"case": ...}'

SPEC (JSON; written by ``bench_llc.py``): ``case`` ("rrr" or "transformer"), ``data``
(a ``.pt`` file with the state dict at w* and the data), ``eps`` (SGLD ``lr``), ``gamma``
(``localization``), ``nbeta``, ``chains``, ``draws``, ``batch_size``, ``seed``,
``threads``. Works with devinterp 1.3.x (``devinterp.slt.sampler.
estimate_learning_coeff_with_summary`` with ``devinterp.optim.sgld.SGLD``) and 2.0.x
(``devinterp.slt.sampling.sample`` with ``SGMCMC.sgld`` + ``devinterp.slt.llc.compute_llc``,
which stores every minibatch's per-token losses and input ids in a zarr store).

Prints one JSON object: wall seconds of the sampling call only (``seconds``; imports,
data loading and, for 2.x, reading the zarr store back for the LLC are reported
separately), chain-steps/s, λ̂ mean and std over chains (ddof = 1, from the per-chain
values devinterp returns), devinterp's own mean/std, init loss, peak RSS of this process
(``ru_maxrss``), the bytes left on disk by the run (everything the run created under
a fresh temporary cwd/TMPDIR/HF_HOME, measured before it is deleted) and the thread pools
in force (torch and every OpenMP/BLAS pool limited to ``threads``; ``llc_side.py``).

Both versions' SGLD step is, as read in their source (``optim/sgld.py``; 2.x
``optim/sgmcmc.py`` with a ``GaussianPrior`` centred at the initial weights):
    Δw = −(lr/2) (nβ ∇L_B(w) + γ (w − w*)) + √lr · N(0, 1),
L_B the mean loss over the minibatch, and the draw at step t is L_B(w_t) evaluated
before the step (so draw 0 is at w*); λ̂_c = nβ (mean_t L_{B_t}(w_t) − init_loss).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

T_START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent))  # llc_side, tiny_transformer (torch only)

from llc_side import Sandbox, llc_summary, load_case, peak_rss_bytes, start_side  # noqa: E402


def _version() -> str:
    from importlib.metadata import version

    return version("devinterp")


# ----- devinterp 1.x ---------------------------------------------------------------------

def run_v1(spec, model, blob) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    from devinterp.optim.sgld import SGLD
    from devinterp.slt.sampler import estimate_learning_coeff_with_summary

    if spec["case"] == "rrr":
        loader = DataLoader(TensorDataset(blob["x"], blob["y"]), batch_size=spec["batch_size"], shuffle=True)

        def evaluate(model, data):  # devinterp.utils.evaluate_mse
            x, y = data
            return F.mse_loss(model(x), y)
    else:
        from tiny_transformer import per_token_loss

        loader = DataLoader(TensorDataset(blob["tokens"]), batch_size=spec["batch_size"], shuffle=True)

        def evaluate(model, data):
            return per_token_loss(model, data[0]).mean()

    t0 = time.perf_counter()
    out = estimate_learning_coeff_with_summary(
        model, loader, evaluate=evaluate, sampling_method=SGLD,
        optimizer_kwargs=dict(lr=spec["eps"], localization=spec["gamma"], nbeta=spec["nbeta"]),
        num_chains=spec["chains"], num_draws=spec["draws"], num_burnin_steps=0, cores=1,
        seed=spec["seed"], device="cpu", verbose=False)
    seconds = time.perf_counter() - t0
    per_chain = [float(out[f"llc-chain/{i}"]) for i in range(spec["chains"])]
    trace = out["loss/trace"]
    return dict(seconds=seconds, per_chain=per_chain, devinterp_llc_mean=float(out["llc/mean"]),
                devinterp_llc_std=float(out["llc/std"]), init_loss=None,
                first_loss=[float(trace[c][0]) for c in range(len(trace))], post_seconds=0.0)


# ----- devinterp 2.x ---------------------------------------------------------------------

def run_v2(spec, model, blob) -> dict:
    import torch
    from datasets import Dataset

    from devinterp.slt.llc import compute_llc
    from devinterp.slt.sampling import sample
    from llc_side import rrr_sample_loss

    if spec["case"] == "rrr":
        # 2.x samples from a Dataset with an "input_ids" column and a per-token loss
        # (batch, seq-1); a row here is its own index twice, and the per-token loss is the
        # per-sample mean squared error (its mean over the batch is F.mse_loss).
        x, y = blob["x"], blob["y"]
        n = x.shape[0]
        ids = torch.arange(n).unsqueeze(1).repeat(1, 2)
        dataset = Dataset.from_dict({"input_ids": ids.tolist()}).with_format("torch")

        def loss_fn(model, input_ids):
            i = input_ids[:, 0]
            return rrr_sample_loss(model, x[i], y[i]).unsqueeze(1)
    else:
        from tiny_transformer import per_token_loss

        dataset = Dataset.from_dict({"input_ids": blob["tokens"].tolist()}).with_format("torch")
        loss_fn = per_token_loss

    t0 = time.perf_counter()
    samples = sample(model, dataset, {}, lr=spec["eps"], n_beta=spec["nbeta"], localization=spec["gamma"],
                     num_chains=spec["chains"], num_draws=spec["draws"], batch_size=spec["batch_size"],
                     num_burnin_steps=0, init_seed=spec["seed"], device="cpu", loss_fn=loss_fn)
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    res = compute_llc(samples)
    per_chain = [float(v) for v in res.llc_per_chain.values]
    trace = res.loss_trace.values
    out = dict(seconds=seconds, per_chain=per_chain, devinterp_llc_mean=float(res.llc_mean.values),
               devinterp_llc_std=float(res.llc_std.values), init_loss=float(res.init_loss.values),
               first_loss=[float(v) for v in trace[:, 0]])
    out["post_seconds"] = time.perf_counter() - t1
    return out


def main(argv=None) -> int:
    started = start_side(sys.argv[1:] if argv is None else argv, __doc__)
    if started is None:
        return 2
    spec, pools = started
    import torch

    version = _version()
    major = int(version.split(".")[0])
    with Sandbox() as box:  # everything the run writes lands in a fresh directory, measured and removed
        t_imp = time.perf_counter()
        for mod in (["datasets", "devinterp.slt.sampling", "devinterp.slt.llc"] if major >= 2
                    else ["devinterp.slt.sampler", "devinterp.optim.sgld"]):
            importlib.import_module(mod)
        import_seconds = time.perf_counter() - t_imp
        model, blob = load_case(spec)
        torch.manual_seed(spec["seed"])
        out = (run_v2 if major >= 2 else run_v1)(spec, model, blob)

    steps = spec["chains"] * spec["draws"]
    result = dict(
        side=f"devinterp {version}", devinterp=version, torch=torch.__version__, threads=spec["threads"],
        thread_pools=pools, case=spec["case"], chains=spec["chains"], draws=spec["draws"],
        batch_size=spec["batch_size"], eps=spec["eps"], gamma=spec["gamma"], nbeta=spec["nbeta"], seed=spec["seed"],
        chain_steps=steps, chain_steps_per_s=steps / out["seconds"], **llc_summary(out.pop("per_chain")),
        peak_rss_bytes=peak_rss_bytes(), disk_bytes=box.disk_bytes, io_write_bytes=box.io["write_bytes"],
        io_wchar=box.io["wchar"], import_seconds=import_seconds, process_seconds=time.perf_counter() - T_START, **out)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
