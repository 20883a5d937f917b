#!/usr/bin/env bash
# Issue 18: where int8-fine's penalty comes from, to see why OrthoAdam's is larger than Adam's.
#   1. by half: per-channel int8 weights alone (float activations) and per-feature int8 input
#      activations alone (float weights), beside int8-fine itself (configs/train/schemes/);
#   2. by layer kind: int8-fine on one kind of linear at a time (qeval sensitivity --by kind),
#      with the inputs' statistics.
#
#   configs/train/mix-fine-split.sh RUN [RUN...]    (RUN: a folder name under results/train/mix)
#
# Every held-out window at the run's own length and BOS convention, one thread. Writes the tables (the paired ΔNLL ± se
# is all the study reads from them) to results/train/mix/fine-split/RUN.{halves,kinds}.md.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,8p' "$0"; exit 2; }
QEVAL=${QEVAL:-build/qeval}
OUT=${OUT:-results/train/mix}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
HALVES=int8-fine,configs/train/schemes/int8-fine-weights.json,configs/train/schemes/int8-fine-activations.json

mkdir -p "$OUT/fine-split"
# shellcheck source=configs/train/mix-recipes.sh
source "$(dirname "$0")/mix-recipes.sh"
for run in "$@"; do
  mix_eval_window "$OUT/$run"
  common=(--model "$OUT/$run" --data "$MIX/mix-heldout.txt" "${MIX_WINDOW[@]}" --threads 1)
  "$QEVAL" eval "${common[@]}" --schemes "$HALVES" --stats-for none --quiet > "$OUT/fine-split/$run.halves.md"
  "$QEVAL" sensitivity "${common[@]}" --scheme int8-fine --by kind --top 0 > "$OUT/fine-split/$run.kinds.md" 2> /dev/null
done
