#!/usr/bin/env bash
# The study's entropies on each held-out part of the mix separately (configs/train/mix.py's
# heldout-<domain>.txt): does a difference between the models keep its sign from text to text?
# Full precision only, every statistic, up to 48 windows of 256 tokens per domain.
#   results/samba-study/domains.sh    (after run.sh: the checkpoints in $OUT)
set -euo pipefail
cd "$(dirname "$0")/../.."
QEVAL=${QEVAL:-build/qeval}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
OUT=${OUT:-$HOME/.cache/qeval/study-samba}
HERE=results/samba-study/domains
mkdir -p "$HERE"
for domain in austen c4 tinyshakespeare tinystories; do
  for name in attn-swa mamba-mlp samba; do
    "$QEVAL" eval -q --model "$OUT/$name" --data "$MIX/heldout-$domain.txt" --seq-len 256 --max-windows 48 \
      --schemes full --mamba-channels 0 --out "$HERE/$domain.$name.json" > /dev/null 2> "$HERE/$domain.$name.log"
  done
done
python3 - "$HERE" > "$HERE/summary.md" <<'PY'
import json, sys
here = sys.argv[1]
print("| domain | windows | attn-swa attention entropy by layer | samba attention (layers 2, 4) | mamba-mlp selection by layer | samba selection (layers 1, 3) | mamba-mlp implicit by layer | samba implicit (layers 1, 3) |")
print("| --- | ---: | --- | --- | --- | --- | --- | --- |")
for domain in ["austen", "c4", "tinyshakespeare", "tinystories"]:
    st = {n: json.load(open(f"{here}/{domain}.{n}.json"))["schemes"][0]["statistics"] for n in ["attn-swa", "mamba-mlp", "samba"]}
    f = lambda xs: ", ".join(f"{x:.4f}" for x in xs)
    print(f"| {domain} | {st['samba']['windows']} | {f(st['attn-swa']['attention']['entropy_per_layer'])} | "
          f"{f(st['samba']['attention']['entropy_per_layer'])} | {f(st['mamba-mlp']['selection']['entropy_per_layer'])} | "
          f"{f(st['samba']['selection']['entropy_per_layer'])} | {f(st['mamba-mlp']['implicit_attention']['entropy_per_layer'])} | "
          f"{f(st['samba']['implicit_attention']['entropy_per_layer'])} |")
PY
cat "$HERE/summary.md"
