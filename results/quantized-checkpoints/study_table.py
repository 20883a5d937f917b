#!/usr/bin/env python3
"""The study's table from a run_study.sh record: each llm-compressor artifact beside qeval's preset
of the same format (paired ΔNLL ± se, KL, top-1, the artifact's weight error against the parent
and bytes per weight), and whether the preset predicts the artifact's penalty.

  results/quantized-checkpoints/study_table.py <(zcat results/quantized-checkpoints/records/wikitext-2.json.gz)
"""
import json
import sys

# artifact folder -> qeval scheme of the same format
PAIRS = {
    "smollm2-gptq-w4a16": "gptq-w4-g64",
    "smollm2-awq-w4a16": "awq-w4-g64",
    "smollm2-fp8-dynamic": "fp8-e4m3",
    "smollm2-w8a8-int8": "int8-vectorwise",
    "smollm2-nvfp4": "nvfp4",
}


def row(s):
    v = s["vs_full"]
    stats = s.get("statistics") or {}
    kurt = stats.get("summary", {}).get("kurtosis_mean") if isinstance(stats, dict) else None
    return v["paired_dnll_mean"], v["paired_dnll_se"], v["kl_mean"], v["top1_agreement"], kurt


def main():
    record = json.load(open(sys.argv[1]))
    schemes = {s["name"]: s for s in record["schemes"]}
    full = record["schemes"][0]["perplexity"]
    print(f"{record['data']['path'].split('/')[-1] if isinstance(record.get('data'), dict) else ''}: "
          f"{full['windows']} windows, {full['tokens']} scored tokens, full PPL {full['ppl']:.4f}\n")
    print("| row | ΔNLL ± se (nats) | KL | top-1 | weight error (median / max rel. Frobenius) | bytes / parameter | activations |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for s in record["schemes"][1:]:
        d, se, kl, top1, _ = row(s)
        a = s["description"].get("artifact")
        if a:
            w = a["weight_error"].get("stored", {})
            err = f"{w.get('median_relative_frobenius', float('nan')):.4f} / {w.get('max_relative_frobenius', float('nan')):.4f}"
            bpw = f"{a['bytes_per_weight']:.3f}" if "bytes_per_weight" in a else ""
            act = a["activations"]["applied"]
            if act == "declared":
                spec = a["activations"]["spec"]
                act = f"declared: {spec.get('kind')} {spec.get('granularity')}"
        else:
            err, bpw, act = "", "", ""
        print(f"| {s['name']} | {d:+.4f} ± {se:.4f} | {kl:.4f} | {100 * top1:.1f} % | {err} | {bpw} | {act} |")
    print("\n| format | artifact ΔNLL | qeval's preset ΔNLL | preset − artifact ± se over windows |")
    print("|---|---:|---:|---:|")
    for name, s in schemes.items():
        folder = name.split(":")[0]
        preset = PAIRS.get(folder)
        if not preset or preset not in schemes:
            continue
        da, sa, *_ = row(s)
        dp, sp, *_ = row(schemes[preset])
        # Both rows score the same tokens against the same full precision: the difference per window
        # (NLL_preset − NLL_artifact, per token) and its standard error over the windows.
        wa, wp = s["per_window"], schemes[preset]["per_window"]
        per = [(wp[w]["nll_sum"] - wa[w]["nll_sum"]) / wa[w]["tokens"] for w in wa]
        mean = sum(per) / len(per)
        se = (sum((x - mean) ** 2 for x in per) / (len(per) - 1) / len(per)) ** 0.5 if len(per) > 1 else float("nan")
        print(f"| {folder} vs {preset} | {da:+.4f} ± {sa:.4f} | {dp:+.4f} ± {sp:.4f} | {dp - da:+.4f} ± {se:.4f} |")


if __name__ == "__main__":
    main()
