#!/usr/bin/env bash
# Issue 62 item 6: qeval's quantised KV caches on SmolLM2-135M's GGUF beside llama.cpp's own
# perplexity with the same cache types (`-fa -ctk/-ctv q8_0`, `q4_0`) against its F16 cache, on the
# same windows: WikiText-2 test through the GGUF's tokenizer (Hugging Face `tokenizers`, equal to
# qeval's), the first WINDOWS windows of 512 tokens, every token after the first scored.
# llama.cpp (this version, as llama-cpp-python 0.3.36 vendors it) rotates Q, K and V by a
# Walsh-Hadamard matrix whenever the cache type is quantised (its attn_rot_k / attn_rot_v);
# LLAMA_ATTN_ROT_DISABLE=1 turns that off. Both are run: llama.cpp's default against qeval's
# kv-*-hadamard presets, llama.cpp without the rotation against kv-q8_0 / kv-q4_0.
# What still differs, by construction: qeval's baseline keeps K/V in float32 and computes with the
# dequantised (fp32) weights; llama.cpp's baseline cache is F16, its weights stay Q4_1 against Q8
# activations, and with a quantised K it also rounds Q to Q8_0 before Q·K. So the two penalties
# are expected to agree within their standard errors, not bit for bit.
#
#   bench/kv_cache_llamacpp.sh [WINDOWS (32)] [THREADS (2)]
# Needs scripts/models, `tokenizers` (scripts/test installs it) and llama-cpp-python 0.3.36 in
# $QEVAL_LLAMACPP_PYTHON (default /work/cache/llamacpp-venv/bin/python; `python3 -m venv DIR &&
# DIR/bin/pip install llama-cpp-python==0.3.36`).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
windows="${1:-32}"
threads="${2:-2}"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
llamacpp_python="${QEVAL_LLAMACPP_PYTHON:-/work/cache/llamacpp-venv/bin/python}"
"$llamacpp_python" -c "import llama_cpp" || { echo "llama-cpp-python is not importable by $llamacpp_python" >&2; exit 2; }
"$root/scripts/models" --model smollm2-135m >/dev/null
smollm2="$("$root/scripts/models" --path smollm2-135m)"
wikitext="$("$qeval" data-dir)/text/wikitext-2-raw-v1/test.joined.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$smollm2" "$wikitext" "$work/smollm2.bin" "$root/tests/oracle" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[4])
from hf_gguf_tokenizer_oracle import build
text = open(sys.argv[2], encoding="utf-8").read()
np.asarray(build(sys.argv[1], "file").encode(text).ids, dtype="<u2").tofile(sys.argv[3])
PY
echo "# qeval vs llama.cpp, quantised KV caches: $(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $threads threads"
echo "CPU SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_vnni' | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$qeval" eval -q --model "$smollm2" --data "$work/smollm2.bin" --seq-len 512 --max-windows "$windows" \
  --schemes full,kv-q8_0,kv-q4_0,kv-q4_0-keep1,kv-q8_0-hadamard,kv-q4_0-hadamard --stats-for none --threads "$threads" \
  --out "$work/qeval.json" >/dev/null
(cd "$root/bench" && "$llamacpp_python" llamacpp_kv_eval.py "$smollm2" "$work/smollm2.bin" 512 "$windows" "$threads" \
  f16 q8_0 q4_0) > "$work/llamacpp.jsonl"
(cd "$root/bench" && LLAMA_ATTN_ROT_DISABLE=1 "$llamacpp_python" llamacpp_kv_eval.py "$smollm2" "$work/smollm2.bin" 512 \
  "$windows" "$threads" f16 q8_0 q4_0) > "$work/llamacpp-unrotated.jsonl"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "$windows" <<'PY'
import json, sys
work, windows = sys.argv[1], sys.argv[2]
record = {s["name"]: s for s in json.load(open(f"{work}/qeval.json"))["schemes"]}
rotated = {r["cache_type"]: r for r in map(json.loads, open(f"{work}/llamacpp.jsonl"))}
unrotated = {r["cache_type"]: r for r in map(json.loads, open(f"{work}/llamacpp-unrotated.jsonl"))}
print(f"\nSmolLM2-135M (Q4_1 GGUF), WikiText-2 test, {windows} windows of 512, paired per-token ΔNLL ± se "
      "against each engine's own unquantised cache\n")
print("| cache | qeval scheme | qeval PPL | qeval ΔNLL ± se | llama.cpp cache | llama.cpp PPL | llama.cpp ΔNLL ± se | difference / combined se |")
print("|---|---|---:|---:|---|---:|---:|---:|")
def cell(v, se):
    return f"{v:+.5f} ± {se:.5f}"
full = record["full"]["perplexity"]
print(f"| unquantised | full (fp32 K/V) | {full['ppl']:.4f} | — | f16 | {rotated['f16']['ppl']:.4f} | — | — |")
for fmt in ("q8_0", "q4_0"):
    for scheme, llama, what in ((f"kv-{fmt}", unrotated, f"{fmt}, LLAMA_ATTN_ROT_DISABLE=1"),
                                (f"kv-{fmt}-hadamard", rotated, f"{fmt} (default: rotated)")):
        q = record[scheme]["perplexity"]
        l = llama[fmt]
        diff = q["paired_dnll_mean"] - l["paired_dnll_mean"]
        z = diff / (q["paired_dnll_se"] ** 2 + l["paired_dnll_se"] ** 2) ** 0.5
        print(f"| {fmt} | {scheme} | {q['ppl']:.4f} | {cell(q['paired_dnll_mean'], q['paired_dnll_se'])} | {what} "
              f"| {l['ppl']:.4f} | {cell(l['paired_dnll_mean'], l['paired_dnll_se'])} | {z:+.2f} |")
k = record["kv-q4_0-keep1"]["perplexity"]
print(f"| q4_0, first position kept | kv-q4_0-keep1 | {k['ppl']:.4f} | {cell(k['paired_dnll_mean'], k['paired_dnll_se'])} "
      "| (llama.cpp has no such option) | | | |")
PY
