#!/usr/bin/env bash
# qeval eval against Hugging Face eager on a Mixtral-shaped and a Mamba-2-shaped random model at a
# realistic width (issue 45), in the same run: the full-precision row's tokens/s (qeval's record,
# "timing.tokens_per_second", every token of every window) and HF eager's forward over the same
# windows (bench/moe_ssm_hf_eager.py). Not a test: it measures.
#
#   bench/moe_ssm_bench.sh PYTHON OUT_DIR [SEQ_LEN] [WINDOWS]
# PYTHON: a Python with transformers and torch (e.g. a venv with transformers==4.46.3 over Debian's
# torch 1.13); OUT_DIR receives the random checkpoints (made once, ~400 MB, not committed), the
# records and a summary line per model.
set -euo pipefail
py="$1"; out="$2"; seq_len="${3:-2048}"; windows="${4:-2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
qeval="$root/build/qeval"
mkdir -p "$out"
[[ -f "$out/tokens.bin" ]] || "$py" "$root/bench/moe_ssm_hf_eager.py" make "$out"
echo "# $(date -u +%FT%TZ) $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in mixtral-random-hf mamba2-random-hf; do
  "$qeval" eval -q --model "$out/$model" --data "$out/tokens.bin" --token-dtype uint16 --seq-len "$seq_len" \
    --max-windows "$windows" --schemes full --no-attention-stats --out "$out/$model.full.json" >/dev/null
  q=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['schemes'][0]['timing']['tokens_per_second'])" "$out/$model.full.json")
  # HF eager may not fit: its naive Mamba-2 SSD materialises [chunks, T, T, heads, state] products.
  if ! hf=$("$py" "$root/bench/moe_ssm_hf_eager.py" time "$out/$model" "$seq_len" "$windows" 2>/dev/null); then
    echo "$model: qeval $q tok/s; HF eager failed (exit status $?, e.g. killed for memory) at seq_len $seq_len"
    continue
  fi
  h=$(echo "$hf" | tail -1 | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['tokens_per_s'])")
  python3 -c "import sys; q,h=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]}: qeval {q:.1f} tok/s, HF eager {h:.1f} tok/s, ratio {q/h:.2f}x (seq_len $seq_len, $windows windows, load $(cut -d' ' -f1 /proc/loadavg))')" "$model" "$q" "$h"
done
