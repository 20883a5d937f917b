#!/usr/bin/env bash
# Issue 18: the outlier statistics of trained runs on each source of the held-out mix alone
# (TinyStories, Austen, Tiny Shakespeare, C4), to see which kind of text Adam's outliers come from.
#
#   configs/train/mix-by-source.sh RUN [RUN...]      (RUN: a folder name under results/train/mix)
#
# Full precision only, every window of the run's own length and BOS convention, one thread.
# Writes results/train/mix/by-source/RUN.SOURCE.eval.{json,md}; mix-report.py tabulates them.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,5p' "$0"; exit 2; }
QEVAL=${QEVAL:-build/qeval}
DATA=${QEVAL_DATA_DIR:-../shared/data}
OUT=${OUT:-results/train/mix}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
SOURCES=(tinystories austen tinyshakespeare c4)

mkdir -p "$OUT/by-source" "$MIX"
python3 "$(dirname "$0")/mix.py" "$DATA" "$MIX" > /dev/null  # deterministic: writes heldout-SOURCE.txt
for run in "$@"; do
  read -r seq bos < <(python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["training"]
print(t["seq_len"], 1 if t.get("bos_per_window") else 0)' "$OUT/$run/train_state.json")
  bos_flag=()
  [ "$bos" = 0 ] || bos_flag=(--bos-per-window)
  for source in "${SOURCES[@]}"; do
    "$QEVAL" eval --model "$OUT/$run" --data "$MIX/heldout-$source.txt" --seq-len "$seq" "${bos_flag[@]}" \
      --schemes full --threads 1 --quiet \
      --out "$OUT/by-source/$run.$source.eval.json" > "$OUT/by-source/$run.$source.eval.md"
  done
done
