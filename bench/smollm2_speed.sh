#!/usr/bin/env bash
# qeval against PyTorch eager on SmolLM2-135M, in one run, on the same windows: WikiText-2 test
# tokenised once (Hugging Face `tokenizers` built from the GGUF's vocabulary, which equals qeval's
# tokenizer, tests/loaders/tokenizers) into a uint16 token file; then `qeval eval --data
# tokens.bin` (statistics off) and bench/eager_eval.py (Debian's python3-torch) evaluate its first
# WINDOWS windows of 512 with the same thread count. Prints tokens/s per scheme, the ratio, each
# side's PPL (qeval's kernels vs eager's simulation: close, not equal), and the load average.
#
#   bench/smollm2_speed.sh [WINDOWS (8)] [THREADS (2)]
# Run on a quiet machine (no build beside it). Needs scripts/models, gguf and tokenizers (pip).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
windows="${1:-8}"
threads="${2:-2}"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
model="$("$root/scripts/models" --path smollm2-135m)"
"$root/scripts/models" >/dev/null
data="$("$qeval" data-dir)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
schemes=(full int8-coarse int8-moderate int8-fine int8-vectorwise w4-zeropoint w4-zeropoint-g128)

python3 - "$model" "$data/text/wikitext-2-raw-v1/test.joined.txt" "$work/tokens.bin" "$root/tests/oracle" <<'EOF'
import sys
import numpy as np
sys.path.insert(0, sys.argv[4])
from hf_gguf_tokenizer_oracle import build
ids = build(sys.argv[1], "file").encode(open(sys.argv[2], encoding="utf-8").read()).ids
np.asarray(ids, dtype="<u2").tofile(sys.argv[3])
EOF

# Debian's python runs the eager side; llama.cpp's pure-Python gguf package is borrowed from the
# python3 that has it, alone on the path (its numpy would not fit Debian's interpreter).
mkdir -p "$work/site"
ln -s "$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')" "$work/site/gguf"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$qeval" eval -q --model "$model" --data "$work/tokens.bin" --seq-len 512 --max-windows "$windows" \
  --schemes "$(IFS=,; echo "${schemes[*]}")" --stats-for none --threads "$threads" --out "$work/qeval.json" >/dev/null
PYTHONPATH="$work/site" /usr/bin/python3 "$root/bench/eager_eval.py" "$model" "$work/tokens.bin" 512 "$windows" \
  "$threads" "${schemes[@]}" > "$work/eager.jsonl"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work/qeval.json" "$work/eager.jsonl" "$windows" "$threads" <<'EOF'
import json, sys
record = json.load(open(sys.argv[1]))
eager = {e["scheme"]: e for e in map(json.loads, open(sys.argv[2]))}
print(f"\nSmolLM2-135M, WikiText-2 test, {sys.argv[3]} windows of 512, {sys.argv[4]} threads, statistics off\n")
print("| scheme | qeval path | qeval tok/s | PyTorch eager tok/s | ratio | qeval PPL | eager PPL |")
print("|---|---|---:|---:|---:|---:|---:|")
for s in record["schemes"]:
    e = eager[s["name"]]
    q = s["timing"]["tokens_per_second"]
    path = s["description"].get("execution", "fp32").split(" (")[0]
    print(f"| {s['name']} | {path} | {q:.0f} | {e['tokens_per_second']:.0f} | {q / e['tokens_per_second']:.2f}× "
          f"| {s['perplexity']['ppl']:.4f} | {e['ppl']:.4f} |")
EOF
