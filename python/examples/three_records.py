"""A notebook-style look at three committed records (trains and evaluates nothing):

    python python/examples/three_records.py      # from the repository root, qeval built (scripts/build)

The same cells in a notebook show each Record as its penalties table with its figures.
"""
from pathlib import Path

import pandas as pd

import qeval

pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 30)
pd.set_option("display.precision", 5)

repo = Path(__file__).resolve().parents[2]
paths = [repo / "results/posthoc/stories260k/none.json",                 # an eval record
         repo / "results/rounding-band/gemma3-270m-wikitext2.json",       # one with rounding bands
         repo / "results/train/trajectory/A128-lr2.5e-3.json"]            # a series record
records = [qeval.Record.load(p) for p in paths]  # each verified by `qeval compare` first

for r in records:
    print(f"\n=== {r!r}")
    if r.kind == "series":
        print(r.series()[["tokens", "lr", "val_loss", "ppl", "dppl", "paired_dnll_mean", "paired_dnll_se"]].head(12))
        continue
    print("\n-- penalties()")
    print(r.penalties().drop(columns=["execution", "nll_mean", "tokens"]))
    if len(r.statistics()):  # records evaluated with statistics
        print("\n-- statistics()")
        print(r.statistics())
        print("\n-- statistics(per_layer=True), full precision")
        print(r.statistics(per_layer=True).loc["full"])
    print("\n-- timings()")
    print(r.timings())

print("\n=== qeval.compare() of the three stories260K records (none, rotate, smooth)")
print(qeval.compare([repo / f"results/posthoc/stories260k/{t}.json" for t in ("none", "rotate", "smooth")]))
