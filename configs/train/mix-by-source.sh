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
# shellcheck source=configs/train/mix-recipes.sh
source "$(dirname "$0")/mix-recipes.sh"
for run in "$@"; do
  mix_eval_window "$OUT/$run"
  for source in "${SOURCES[@]}"; do
    "$QEVAL" eval --model "$OUT/$run" --data "$MIX/heldout-$source.txt" "${MIX_WINDOW[@]}" \
      --schemes full --threads 1 --quiet \
      --out "$OUT/by-source/$run.$source.eval.json" > "$OUT/by-source/$run.$source.eval.md"
  done
done
