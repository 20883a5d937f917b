#!/usr/bin/env python3
"""Oracle for qeval's percentile rule (eval/percentiles.h; tests/eval/percentiles_test.cpp).

A transcription of llama.cpp's `kl_divergence` (tools/perplexity/perplexity.cpp, as vendored in
llama-cpp-python 0.3.36): values sorted, `percentile` interpolating at fraction*(n - 1), the median
as the middle value or the mean of the two middle ones. It is evaluated twice on each random set:
in float64 with the decimal fractions (what qeval computes: it must match to the bit) and as
llama.cpp writes it, values, fractions and positions in float32 (qeval must be within float32
rounding of it).

    /usr/bin/python3 tests/oracle/percentiles_oracle.py   # numpy (Debian python3-numpy) > tests/oracle/percentiles_fixture.json
"""
import json
import random

import numpy as np

# (name, fraction) as qeval records them; llama.cpp prints these for dp (KL: all but p75, p25).
LEVELS = [("p99.9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90), ("p75", 0.75), ("median", 0.5),
          ("p25", 0.25), ("p10", 0.10), ("p5", 0.05), ("p1", 0.01), ("p0.1", 0.001)]


def llama_percentile(values, fraction, f):
    """llama.cpp's lambda: `values` sorted; `f` the float type (np.float64 or np.float32)."""
    fraction = f(fraction)
    if fraction <= 0:
        return values[0]
    if fraction >= 1:
        return values[-1]
    p = f(fraction * f(len(values) - 1))
    ip = int(p)
    p = f(p - f(ip))
    return f(f(f(1) - p) * values[ip] + p * values[min(ip + 1, len(values) - 1)])


def llama_median(values, f):
    n = len(values)
    return values[n // 2] if n % 2 else f(f(0.5) * f(values[n // 2] + values[n // 2 - 1]))


def table(values, f):
    v = sorted(f(x) for x in values)
    out = {"count": len(v), "max": float(v[-1]), "min": float(v[0])}
    for name, fraction in LEVELS:
        out[name] = float(llama_median(v, f) if name == "median" else llama_percentile(v, fraction, f))
    return out


def main():
    rng = random.Random(80)
    cases = []
    for n in [1, 2, 3, 4, 5, 10, 101, 1000]:
        kind = "kl" if n % 2 else "dp"
        if kind == "kl":  # KL-like: non-negative, heavy-tailed
            values = [rng.expovariate(1.0) ** 3 for _ in range(n)]
        else:  # dp-like: in [-1, 1], with exact ties
            values = [round(rng.uniform(-1, 1), 2 if n > 100 else 17) for _ in range(n)]
        cases.append({"kind": kind, "values": values, "float64": table(values, np.float64),
                      "float32": table(values, np.float32)})
    print(json.dumps({"generator": "tests/oracle/percentiles_oracle.py", "cases": cases}, indent=None))


if __name__ == "__main__":
    main()
