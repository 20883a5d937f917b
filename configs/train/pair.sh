#!/usr/bin/env bash
# The Adam vs OrthoAdam pair (issue 5, DESIGN.md §8) on a 2-core CPU:
#   A: Adam      + softmax   + LayerNorm      (configs/train/pair-a-adam.json)
#   B: OrthoAdam + softmax-1 + RMSNormSingle  (configs/train/pair-b-orthoadam.json)
# Both GPT-2 style (learned positions, GELU, biases, tied embeddings), d 128, 4 layers, 4 heads,
# seq 128, batch 16, 200 steps (~0.4 M tokens), peak lr 3e-3 (3x the DESIGN §8 probe, to make
# outliers likelier), warm-up 20 + cosine to 0.1x, clip 1, no weight decay, seed 0, one thread
# each, run side by side; --time-limit 18 stops (and checkpoints) a run that would exceed 20 min.
# Data: TinyStories validation-head with the stories260K 512-token SentencePiece tokenizer,
# split by line: lines 1-7799 train (the trainer holds out its last 5% of windows for its
# validation loss), lines 7801-end (after a blank line) are never trained on and are what
# `qeval eval` measures.
#
# The "hot" variant (configs/train/pair-hot-*.json) is the same with peak lr 1e-2, 250 steps,
# warm-up 25: PAIR=pair-hot OUT=results/train/pair-hot configs/train/pair.sh
# The ablation (configs/train/ablation-hot-*.json) swaps the architectures at that lr: Adam with
# softmax-1 + RMSNormSingle, OrthoAdam with softmax + LayerNorm:
#   PAIR=ablation-hot OUT=results/train/ablation-hot configs/train/pair.sh
#
# usage: configs/train/pair.sh   (from the repository root; QEVAL=path/to/qeval OUT=folder,
#        PAIR=config prefix, SKIP_TRAIN=1 to evaluate existing checkpoints only)
set -euo pipefail
QEVAL=${QEVAL:-build/qeval}
PAIR=${PAIR:-pair}
OUT=${OUT:-results/train/pair}
DATA=${QEVAL_DATA_DIR:-../shared/data}
WORK=${WORK:-$OUT/work}
mkdir -p "$OUT" "$WORK"
SRC="$DATA/text/tinystories/validation-head.txt"
head -n 7799 "$SRC" > "$WORK/tinystories-train.txt"
tail -n +7801 "$SRC" > "$WORK/tinystories-heldout.txt"
TOK="$DATA/models/stories260K/tok512.model"

train() {  # name config
  "$QEVAL" train --config "configs/train/$2" --data "$WORK/tinystories-train.txt" --tokenizer "$TOK" \
    --out "$OUT/$1" > "$OUT/$1.train.out" 2> "$OUT/$1.train.log"
}
if [ "${SKIP_TRAIN:-0}" = 0 ]; then  # SKIP_TRAIN=1: evaluate existing checkpoints only
  train A-adam "$PAIR-a-adam.json" &
  pa=$!
  train B-orthoadam "$PAIR-b-orthoadam.json" &
  pb=$!
  wait $pa
  wait $pb
fi

SCHEMES=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint
# The first 128 held-out windows (16,384 tokens), both models side by side on one thread each.
evaluate() {  # name
  "$QEVAL" eval --model "$OUT/$1" --data "$WORK/tinystories-heldout.txt" --seq-len 128 --max-windows 128 \
    --schemes "$SCHEMES" --threads 1 --out "$OUT/$1.eval.json" > "$OUT/$1.eval.md" 2> "$OUT/$1.eval.log"
}
evaluate A-adam &
pa=$!
evaluate B-orthoadam &
pb=$!
wait $pa
wait $pb
if "$QEVAL" compare --help > /dev/null 2>&1; then
  "$QEVAL" compare "$OUT/A-adam.eval.json" "$OUT/B-orthoadam.eval.json" > "$OUT/compare.md"
fi
