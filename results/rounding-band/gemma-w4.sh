#!/usr/bin/env bash
# Issue 53's bands for Gemma-3-270M's 4-bit presets (run.sh ran its int8 presets): WikiText-2 test
# and the C4 excerpt, 8 windows of 512 tokens (seed 0), 8 rounding variants each (ε = 2^-22),
# statistics off. From the repository root: results/rounding-band/gemma-w4.sh (~20 min on the
# 2-core Xeon).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/rounding-band"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
"$root/scripts/models" --model gemma3-270m
for text in c4:text/c4/c4-en-validation-excerpt-1025.jsonl wikitext2:text/wikitext-2-raw-v1/test.joined.txt; do
  name=gemma3-270m-${text%%:*}-w4
  echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$qeval" eval --model gemma3-270m --data "${text#*:}" --schemes full,w4-zeropoint,w4-zeropoint-g128 --stats-for none \
    --rounding-band 8 --seq-len 512 --max-windows 8 --seed 0 --threads 2 --out "$here/$name.json" -q > "$here/$name.md"
done
