#!/usr/bin/env python3
"""Keeping the first position of the cache against not, paired window by window (issue 62).

For every scheme S-keep1 of a qeval record whose S is in the same record, the difference of
their paired penalties: per window, the two schemes' sums of (NLL − full precision's NLL) over the
window's tokens (per_window[w].diff_sum) subtracted, summed over windows and divided by the
tokens; its standard error from the spread of the per-window differences (a ratio estimate, as
qeval's paired ΔNLL se), and in how many windows keeping was better.

    results/kv-cache/keep_vs_not.py RECORD.json[.gz] ...
"""
import gzip
import json
import math
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def paired(keep, plain):
    windows = sorted(set(keep["per_window"]) & set(plain["per_window"]), key=int)
    d = [keep["per_window"][w]["diff_sum"] - plain["per_window"][w]["diff_sum"] for w in windows]
    n = [keep["per_window"][w]["tokens"] for w in windows]
    total = sum(n)
    mean = sum(d) / total
    k = len(windows)
    # Ratio estimator: residuals d_w − mean·n_w, variance of their sum scaled to per token.
    var = sum((dw - mean * nw) ** 2 for dw, nw in zip(d, n)) * k / (k - 1) / total**2 if k > 1 else float("nan")
    better = sum(1 for dw in d if dw < 0)
    return mean, math.sqrt(var), better, k


def band(scheme):
    b = scheme.get("rounding_band") or {}
    return b.get("delta_nll_sd")


def main(paths):
    print("| record | pair | keep − not, ΔNLL ± se | keep better in | bands (keep / not) |")
    print("|---|---|---:|---:|---:|")
    for path in paths:
        record = load(path)
        schemes = {s["name"]: s for s in record["schemes"]}
        for name, keep in schemes.items():
            if not name.endswith("-keep1") or name[: -len("-keep1")] not in schemes:
                continue
            plain = schemes[name[: -len("-keep1")]]
            mean, se, better, k = paired(keep, plain)
            bk, bp = band(keep), band(plain)
            bands = "—" if bk is None or bp is None else f"{bk:.5f} / {bp:.5f}"
            print(f"| {path.split('/')[-1]} | {plain['name']} | {mean:+.5f} ± {se:.5f} | {better} of {k} windows | {bands} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
