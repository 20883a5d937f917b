#!/usr/bin/env python3
"""Each quantised scheme's float32 → float64 move of its paired ΔNLL against its float32 band.

usage: fp64_vs_band.py FP32_RECORD:FP64_RECORD ... (paths relative to this folder or absolute)
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))


def load(path):
    with open(path if os.path.isabs(path) else os.path.join(here, path)) as f:
        return json.load(f)


print("| fp32 record | scheme | ΔNLL fp32 | ΔNLL fp64 | move | band (sd) | band range | se | move / band | inside the range |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
ratios = []
for pair in sys.argv[1:]:
    f32, f64 = pair.split(":")
    a, b = load(f32), load(f64)
    assert b["precision"]["dtype"] == "fp64", f"{f64}: not a --dtype fp64 record"
    assert a["window_hashes"] == b["window_hashes"], f"{f32} and {f64} evaluate different windows"
    by_name = {s["name"]: s for s in b["schemes"]}
    for s in a["schemes"]:
        if "rounding_band" not in s or s["name"] not in by_name:
            continue
        band = s["rounding_band"]
        d32 = s["vs_full"]["paired_dnll_mean"]
        d64 = by_name[s["name"]]["vs_full"]["paired_dnll_mean"]
        sd = band["delta_nll_sd"]
        lo, hi = min(band["delta_nll"]), max(band["delta_nll"])
        if sd < 1e-7:
            continue  # nothing rounds at run time (4-bit weights, float activations)
        ratios.append(abs(d64 - d32) / sd)
        print(f"| {f32[:-5]} | {s['name']} | {d32:+.5f} | {d64:+.5f} | {d64 - d32:+.5f} | {sd:.5f} | {hi - lo:.5f} | "
              f"{s['vs_full']['paired_dnll_se']:.5f} | {abs(d64 - d32) / sd:.2f} | {'yes' if lo <= d64 <= hi else 'no'} |")
ratios.sort()
n = len(ratios)
print()
rms = (sum(r * r for r in ratios) / n) ** 0.5
print(f"{n} schemes: |move| / band median {ratios[n // 2]:.2f}, mean {sum(ratios) / n:.2f}, root mean square {rms:.2f}, "
      f"largest {ratios[-1]:.2f}; {sum(r <= 2 for r in ratios)} of {n} within 2 bands, {sum(r <= 3 for r in ratios)} within 3. "
      "Were float32 and float64 two independent draws with the band's spread, |move| / band would have mean 1.13 "
      "(2/√π) and root mean square 1.41 (√2).")
