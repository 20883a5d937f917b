#!/usr/bin/env bash
# qeval on a GPU against Hugging Face transformers eager (SDPA) at the same dtype and against HF's
# int8 quantise-dequantise simulation, in one run on one machine (issue 32). Needs a CUDA build of
# qeval (scripts/gpu-check builds one) and python3 with torch + transformers (the GPU machines have
# both). Prints the two tables and the ratios; writes JSON lines under OUT_DIR.
#
#   bench/gpu_speed.sh BUILD_DIR OUT_DIR [shapes] [dtype]
set -euo pipefail
build="$1"; out="$2"; shapes="${3:-gpt2-small,llama-3.2-1b,llama-2-7b}"; dtype="${4:-fp16}"
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out"
echo "## load average: $(cut -d' ' -f1-3 /proc/loadavg); $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>/dev/null || true)"
PYTHONUNBUFFERED=1 python3 "$root/bench/gpu_hf_eager.py" --shapes "$shapes" --dtype "$dtype" --json "$out/hf_$dtype.jsonl"
"$build/bench/gpu_eval_bench" --shapes "$shapes" --dtype "$dtype" --json "$out/qeval_$dtype.jsonl"
python3 - "$out/hf_$dtype.jsonl" "$out/qeval_$dtype.jsonl" <<'PY'
import json, sys
hf = [json.loads(l) for l in open(sys.argv[1])]
qe = [json.loads(l) for l in open(sys.argv[2])]
base = {(r["shape"], r["path"]): r["tokens_per_s"] for r in hf}
print("\n| model shape | dtype | qeval scheme | qeval tok/s | vs HF eager | vs HF int8 simulation |\n|---|---|---|---:|---:|---:|")
for r in qe:
    e = base.get((r["shape"], "hf eager")); s = base.get((r["shape"], "hf int8 simulation (moderate)"))
    f = lambda b: f"{r['tokens_per_s'] / b:.2f}x" if b else "-"
    print(f"| {r['shape']} | {r['dtype']} | {r['scheme']} | {r['tokens_per_s']:,.0f} | {f(e)} | {f(s)} |")
PY
