"""Whether two runs of the benchmarks agree: every ratio a benchmark reports, side by side, with its change.

    python benchmarks/stability.py RUN1_DIR RUN2_DIR [--max-change 10] [--json PATH]

Each directory holds the JSON files that ``--json`` wrote (``make bench`` writes them to
``_build/bench/``), one per benchmark, by the same name in both. A ratio is a pair of timings taken in
the same comparison:

* the harness's comparisons (``benchmarks/harness.py``, ``Comparison.as_dict``: a dict with
  ``sides`` and ``threads``), wherever they sit in the JSON: every side's best time over the first
  side's (so a ratio > 1 means the first side is faster), at each thread count, judged loaded by
  the harness's rule (``is_loaded``) on the loads it recorded;
* ``bench_llc.py``'s rows (``rows``: one per arm, ``case_label`` and ``chain_steps_per_s``): every
  arm's chain-steps/s over the first "ours" arm's of the same case.

A ratio is *stable* when the two runs' values differ by at most ``--max-change`` % (default 10) of
the first. Each ratio also carries its two sides' own changes between the runs
(``change_top_percent`` for the side over, ``change_bottom_percent`` for the side under), printed
under an unstable ratio, so that a baseline whose speed moved is told apart from code of ours that
did. A comparison flagged ``loaded`` in either run (the harness's load rule) is listed but not
counted. Exits 1 when a counted ratio is unstable or a benchmark is missing from one run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.harness import comparisons, is_loaded  # noqa: E402


def harness_ratios(node, path: str = "") -> dict[str, dict]:
    """{path/threads/side: {ratio, loaded}} for every harness comparison of two or more sides in a JSON tree."""
    found = {}
    for where, comparison in comparisons(node, path):
        if len(comparison["sides"]) < 2:
            continue
        sides = list(comparison["sides"].items())
        first, base = sides[0][0], sides[0][1]["best_s"]
        loads = [x for pair in comparison.get("load_average_1min", []) for x in pair]
        # judged by the harness's current rule where the loads were recorded, else by the run's own flag
        loaded = (is_loaded(loads, comparison["threads"], comparison.get("cores")) if loads
                  else bool(comparison.get("loaded")))
        for name, times in sides[1:]:
            if base and times.get("best_s"):
                found[f"{where} [{comparison['threads']} thr] {name}/{first}"] = dict(
                    ratio=times["best_s"] / base, loaded=loaded, top=(name, times["best_s"]), bottom=(first, base))
    return found


def llc_ratios(data: dict) -> dict[str, dict]:
    """{case: arm / ours: {ratio, loaded}} from bench_llc.py's rows (chain-steps/s, so > 1: the arm is faster)."""
    found, ours = {}, {}
    for row in data.get("rows", []):
        case = row.get("case_label", row.get("case", "?"))
        if row["arm"].startswith("ours") and case not in ours:
            ours[case] = row
    for row in data.get("rows", []):
        case = row.get("case_label", row.get("case", "?"))
        base = ours.get(case)
        if base is None or row is base:
            continue
        found[f"{case}: {row['arm']} / {base['arm']}"] = dict(
            ratio=row["chain_steps_per_s"] / base["chain_steps_per_s"],
            loaded=not (row.get("clean", True) and base.get("clean", True)),
            top=(row["arm"], row["chain_steps_per_s"]), bottom=(base["arm"], base["chain_steps_per_s"]))
    return found


def ratios_of(path: Path) -> dict[str, dict]:
    data = json.loads(path.read_text())
    return llc_ratios(data) if "rows" in data and "goals" in data else harness_ratios(data)


def compare(one: Path, two: Path, max_change: float) -> tuple[list[dict], list[str]]:
    """Every ratio of every benchmark found in both directories, with its change; and the benchmarks missing."""
    names_one, names_two = {p.name for p in one.glob("*.json")}, {p.name for p in two.glob("*.json")}
    missing = sorted(names_one ^ names_two)
    rows = []
    for name in sorted(names_one & names_two):
        a, b = ratios_of(one / name), ratios_of(two / name)
        for key in sorted(a.keys() & b.keys()):
            change = 100 * abs(b[key]["ratio"] - a[key]["ratio"]) / a[key]["ratio"]
            counted = not (a[key]["loaded"] or b[key]["loaded"])
            row = dict(benchmark=name[:-5], ratio=key, run1=a[key]["ratio"], run2=b[key]["ratio"],
                       change_percent=change, counted=counted, stable=change <= max_change)
            for part in ("top", "bottom"):  # each side's own value (seconds, or chain-steps/s) in both runs
                if part in a[key] and part in b[key]:
                    side, v1 = a[key][part]
                    row.update({f"{part}_side": side, f"{part}_run1": v1, f"{part}_run2": b[key][part][1],
                                f"change_{part}_percent": 100 * (b[key][part][1] - v1) / v1})
            rows.append(row)
    return rows, missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run1", type=Path)
    ap.add_argument("run2", type=Path)
    ap.add_argument("--max-change", type=float, default=10.0, help="largest change counted stable, in %% (default 10)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    for folder in (args.run1, args.run2):
        if not folder.is_dir() or not any(folder.glob("*.json")):
            ap.error(f"{folder}: not a folder of benchmark JSON files (each script's --json output)")
    rows, missing = compare(args.run1, args.run2, args.max_change)
    width = max((len(r["benchmark"]) + len(r["ratio"]) for r in rows), default=20) + 3
    for r in rows:
        mark = ("stable" if r["stable"] else "UNSTABLE") if r["counted"] else "loaded: not counted"
        print(f"{r['benchmark'] + ': ' + r['ratio']:<{width}} {r['run1']:9.3f} {r['run2']:9.3f} "
              f"{r['change_percent']:6.1f} %  {mark}")
        if r["counted"] and not r["stable"] and "top_side" in r:
            print("    " + "; ".join(f"{r[part + '_side']}: {r[part + '_run1']:.4g} → {r[part + '_run2']:.4g} "
                                     f"({r[f'change_{part}_percent']:+.1f} %)" for part in ("top", "bottom")))
    counted = [r for r in rows if r["counted"]]
    unstable = [r for r in counted if not r["stable"]]
    print(f"\n{len(counted)} ratios counted ({len(rows) - len(counted)} loaded), {len(unstable)} changed by more than "
          f"{args.max_change:g} %; largest change {max((r['change_percent'] for r in counted), default=0):.1f} %")
    if missing:
        print("in one run only: " + ", ".join(missing))
    if args.json:
        args.json.write_text(json.dumps(dict(rows=rows, missing=missing, max_change_percent=args.max_change), indent=2))
    return 1 if unstable or missing else 0


if __name__ == "__main__":
    sys.exit(main())
