#!/usr/bin/env bash
# Issue 80 item 2: qeval's per-token KL / Δp table against llama.cpp's own
# `llama-perplexity --kl-divergence`, the same function computed by both on the same tokens.
#
#   results/fidelity/llamacpp_kl.sh [CHUNKS (16)] [THREADS (2)] > results/fidelity/llamacpp-kl.md
#
# Base: llamacpp_env.sh's F32 GGUF of SmolLM2-135M-Instruct. Quantised:
# llama-quantize's Q8_0 and Q4_0 of that F32 file, against qeval's gguf-q8_0 / gguf-q4_0 rules on
# the same F32 file (bit-exact weights, quant/schemes/ggml_rules.h) with llama.cpp's CPU activation
# blocks ("activations": "gguf-q8", docs/gguf-types.md), since llama.cpp's CPU back end rounds each
# quantised product's activations to Q8_0 / Q8_K. Text: WikiText-2 test; llama.cpp tokenises the file
# once and takes CHUNKS chunks of 512 tokens, scoring tokens 257..511 of each from positions
# 256..510; qeval's `llamacpp` protocol takes the same chunks and tokens.
# llama.cpp runs with a float32 KV cache and without flash attention (-ctk f32 -ctv f32 -fa off): its
# defaults keep K/V in F16 and round the query to F16, a rounding qeval's float32 model does not have.
#
# Needs llama-perplexity and llama-quantize as llamacpp_env.sh says (it holds the set-up both llama.cpp
# comparisons share).
set -euo pipefail
chunks="${1:-16}"
threads="${2:-2}"
band="${QEVAL_ROUNDING_BAND:-3}"
# shellcheck source=results/fidelity/llamacpp_env.sh
source "$(dirname "$0")/llamacpp_env.sh"
text="$("$qeval" data-dir)/text/wikitext-2-raw-v1/test.joined.txt"
common=(-c 512 --chunks "$chunks" -t "$threads" -ctk f32 -ctv f32 -fa off)

llamacpp_header "qeval against llama-perplexity --kl-divergence" "$threads"
for type in Q8_0 Q4_0; do
  [[ -s "$work/$type.gguf" ]] || "$bin/llama-quantize" "$work/f32.gguf" "$work/$type.gguf" "$type" >"$work/quantize-$type.log" 2>&1
done
# With QEVAL_WORK_DIR kept, llama.cpp's runs are reused when their logs are complete.
start=$(date +%s)
grep -q "Final estimate" "$work/base.log" 2>/dev/null ||
  "$bin/llama-perplexity" -m "$work/f32.gguf" -f "$text" "${common[@]}" --kl-divergence-base "$work/base.kld" \
    >"$work/base.log" 2>&1
for type in Q8_0 Q4_0; do
  grep -q "Same top p" "$work/kld-$type.log" 2>/dev/null ||
    "$bin/llama-perplexity" -m "$work/$type.gguf" "${common[@]}" --kl-divergence-base "$work/base.kld" --kl-divergence \
      >"$work/kld-$type.log" 2>&1
done
llama_s=$(($(date +%s) - start))
for type in q8_0 q4_0; do
  cat >"$work/gguf-$type-a8.json" <<EOF
{"name": "gguf-$type-a8", "description": "llama-quantize ${type^^} with llama.cpp's CPU activation blocks",
 "weights": {"kind": "ggml", "file_type": "$type", "activations": "gguf-q8"},
 "quantize_lm_head": true, "quantize_embedding": true}
EOF
done
start=$(date +%s)
"$qeval" eval -q --model "$work/f32.gguf" --data "$text" --protocol llamacpp --max-windows "$chunks" \
  --schemes "full,$work/gguf-q8_0-a8.json,$work/gguf-q4_0-a8.json" --rounding-band "$band" --stats-for none --threads "$threads" \
  --out "$work/qeval.json" >/dev/null
qeval_s=$(($(date +%s) - start))
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); llama-perplexity (base + 2 runs; 0 when reused) ${llama_s} s, qeval eval (3 schemes, $band rounding variants each) ${qeval_s} s"
echo
python3 - "$work" "$chunks" <<'PY'
import json, math, re, sys
work, chunks = sys.argv[1], sys.argv[2]
record = {s["name"]: s for s in json.load(open(f"{work}/qeval.json"))["schemes"]}
plain = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", open(f"{work}/base.log").read())
plain_ppl = float(plain.group(1))
full = record["full"]["perplexity"]["ppl"]
print(f"Full precision: llama.cpp's plain perplexity of the F32 file (its --kl-divergence-base run) {plain_ppl:.4f} ± "
      f"{float(plain.group(2)):.4f}; qeval's `full` {full:.4f}. llama.cpp's KL mode reads its base back from the "
      "uint16 log-probabilities it stored, each clipped 16 nats below the row's maximum, so its Mean PPL(base) "
      "differs from both.")

def llama_table(path):
    """The statistics block of a llama-perplexity --kl-divergence log: {label: (value, uncertainty)}."""
    out = {}
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.match(r"^(Mean PPL\(Q\)|Mean PPL\(base\)|Mean ln\(PPL\(Q\)/PPL\(base\)\)|Mean    KLD|Maximum KLD|"
                     r"[ \d.]+%   KLD|Median  KLD|Minimum KLD|Mean    Δp|Maximum Δp|[ \d.]+%   Δp|Median  Δp|"
                     r"Minimum Δp|RMS Δp    |Same top p)\s*:\s*(-?[\d.]+)\s*%?(?:\s*±\s*([\d.]+))?", line)
        if m:
            out[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)) if m.group(3) else None)
    return out

def level_key(label):  # "99.9%   KLD" -> "p99.9"
    v = label.split("%")[0].strip()
    return "p" + (v[:-2] if v.endswith(".0") else v)

rows = []
for qtype, scheme in (("Q8_0", "gguf-q8_0-a8"), ("Q4_0", "gguf-q4_0-a8")):
    ll = llama_table(f"{work}/kld-{qtype}.log")
    s = record[scheme]
    t = s["per_token"]
    q = {}
    q["Mean PPL(Q)"] = (s["perplexity"]["ppl"], None)
    q["Mean PPL(base)"] = (record["full"]["perplexity"]["ppl"], None)
    q["Mean ln(PPL(Q)/PPL(base))"] = (s["perplexity"]["paired_dnll_mean"], s["perplexity"]["paired_dnll_se"])
    q["Mean    KLD"] = (t["kl"]["mean"], t["kl"]["uncertainty"])
    for label in ll:
        if label.endswith("KLD") and "%" in label:
            q[label] = (t["kl"]["percentiles"][level_key(label)], None)
        if label.endswith("Δp") and "%" in label:
            q[label] = (100 * t["dp"]["percentiles"][level_key(label)], None)
    q["Maximum KLD"] = (t["kl"]["percentiles"]["max"], None)
    q["Median  KLD"] = (t["kl"]["percentiles"]["median"], None)
    q["Minimum KLD"] = (t["kl"]["percentiles"]["min"], None)
    q["Mean    Δp"] = (100 * t["dp"]["mean"], 100 * t["dp"]["uncertainty"])
    q["Maximum Δp"] = (100 * t["dp"]["percentiles"]["max"], None)
    q["Median  Δp"] = (100 * t["dp"]["percentiles"]["median"], None)
    q["Minimum Δp"] = (100 * t["dp"]["percentiles"]["min"], None)
    q["RMS Δp"] = (100 * t["dp_rms"]["value"], 100 * t["dp_rms"]["uncertainty"])
    q["Same top p"] = (100 * t["same_top"]["rate"], 100 * t["same_top"]["uncertainty"])
    print(f"\n### {qtype}: llama-quantize {qtype} (llama.cpp) against qeval's {scheme}, "
          f"{t['tokens']} tokens ({chunks} chunks of 512)\n")
    band = s.get("rounding_band", {})
    llama_q = ll["Mean PPL(Q)"][0]
    print(f"ln(PPL(Q) / plain PPL(base)): llama.cpp {math.log(llama_q / plain_ppl):+.6f}, qeval "
          f"{s['perplexity']['paired_dnll_mean']:+.6f}; difference "
          f"{s['perplexity']['paired_dnll_mean'] - math.log(llama_q / plain_ppl):+.6f}, against qeval's rounding band "
          f"(σ of ΔNLL over {band.get('variants', 0)} float32-ulp jitters of the quantised layers' inputs) "
          f"{band.get('delta_nll_sd', float('nan')):.6f}\n")
    print("| line | llama.cpp | qeval | qeval − llama.cpp |")
    print("|---|---:|---:|---:|")
    for label, (lv, lu) in ll.items():
        key = "RMS Δp" if label.startswith("RMS") else label
        if key not in q:
            continue
        qv, qu = q[key]
        unit = " %" if "Δp" in label or label == "Same top p" else ""
        def cell(v, u):
            return f"{v:.6f}" + (f" ± {u:.6f}" if u is not None else "") + unit
        print(f"| {label.replace('  ', ' ')} | {cell(lv, lu)} | {cell(qv, qu)} | {qv - lv:+.6f}{unit} |")
PY
