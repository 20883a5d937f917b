#!/usr/bin/env python3
"""Are AWQ's most-protected input channels the outlier channels qeval measures?

Reads one record holding awq-w4-g128 (each mapping's 16 largest scales) and int8-mixed (per
linear, the input features with |x| >= 6 and in how many evaluated windows). For each AWQ
mapping kind it prints: how many input channels are outliers, how many of AWQ's 16 largest
scales fall on them, what chance alone would give (16 · outliers / K), and whether the most
frequent outlier channel is among the 16. Standard library only.

  results/calibrated/awq_outliers.py results/calibrated/smollm2-135m-wikitext2-others.json.gz
"""
import gzip
import json
import sys
from collections import defaultdict


def load(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def scheme(record, name):
    for s in record["schemes"]:
        if s["name"] == name:
            return s
    sys.exit(f"{name} is not in the record")


def main(path):
    record = load(path)
    awq = scheme(record, "awq-w4-g128")["description"]["calibrated_weights"]
    mixed = scheme(record, "int8-mixed")["outlier_features"]
    outliers = {}  # linear -> {feature: windows}
    in_features = {}
    for layer in mixed["layers"]:
        outliers[layer["name"]] = {f: n for f, n in layer["features"]}
        in_features[layer["name"]] = layer["in_features"]
    rows = defaultdict(lambda: {"mappings": 0, "outliers": 0, "hits": 0, "chance": 0.0, "top_in": 0, "with": 0})
    per_layer = []
    for m in awq["mappings"]:
        if "skipped" in m:
            continue
        kind = m["name"].split(".", 2)[2]  # "attn_norm → attn.q, attn.k, attn.v"
        first = m["balance"][0]
        features = outliers.get(first, {})
        top = [e["channel"] for e in m["largest_scales"]]
        hits = sum(1 for c in top if c in features)
        r = rows[kind]
        r["mappings"] += 1
        r["outliers"] += len(features)
        r["hits"] += hits
        r["chance"] += len(top) * len(features) / in_features[first]
        if features:
            r["with"] += 1
            most = max(features, key=lambda f: (features[f], -f))
            r["top_in"] += most in top
        per_layer.append((m["name"], len(features), hits, top[:4], sorted(features, key=lambda f: -features[f])[:4]))
    print(f"{path}: AWQ's 16 largest scales per mapping vs int8-mixed's outlier channels (|x| >= 6, "
          f"{mixed['sequences']} windows)\n")
    print("| mapping | layers | outlier channels (mean) | of AWQ's top 16 on outliers (mean) | by chance | "
          "most frequent outlier in AWQ's top 16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, r in rows.items():
        n = r["mappings"]
        print(f"| {kind} | {n} | {r['outliers'] / n:.1f} | {r['hits'] / n:.2f} | {r['chance'] / n:.2f} | "
              f"{r['top_in']} of {r['with']} |")
    if "-v" in sys.argv:
        for name, n, hits, top, most in per_layer:
            print(f"{name}: {n} outlier channels, {hits} of AWQ's top 16; AWQ top {top}, outliers {most}")


if __name__ == "__main__":
    main(sys.argv[1])
