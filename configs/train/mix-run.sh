#!/usr/bin/env bash
# Issue 18: one training run of the mixed-text study, then its evaluation on the held-out mix.
#
#   configs/train/mix-run.sh NAME RECIPE STEPS SEED [extra `qeval train` options...]
#
# RECIPE (the optimizer / attention / norm triple; everything else is shared):
#   A     Adam      + softmax   + LayerNorm        (the baseline)
#   B     OrthoAdam + softmax-1 + RMSNormSingle    (Kaul et al.'s recipe)
#   A-B   Adam      + softmax-1 + RMSNormSingle    (ablation: B's architecture, A's optimizer)
#   B-A   OrthoAdam + softmax   + LayerNorm        (ablation: A's architecture, B's optimizer)
# Shared (configs/train/mix-recipes.sh; the lr chosen by sweep.sh, results/train/mix/sweep/sweep.md): GPT-2 style (learned
# positions, GELU, biases, tied embeddings), d 128, 4 layers, 4 heads, 2,048 tokens a step
# (seq 128 × batch 16 unless the extra options change them), peak lr $LR (5e-3), warm-up STEPS/10 then
# cosine to 0.1·lr, β 0.9/0.95, clip 1, no weight decay, one thread. Extra options come last and
# win (e.g. --seq-len 512 --batch-size 4 --bos-per-window).
#
# Data: configs/train/mix.py writes mix-train.txt / mix-heldout.txt to $MIX (default
# ~/.cache/qeval/train/mix; regenerated each time, it is deterministic). The trainer's validation
# loss uses the last 5 % of mix-train's windows; `qeval eval` measures mix-heldout.txt, every
# window of the run's own length, every int8 scheme and w4, with the outlier statistics.
#
# Writes results/train/mix/NAME/ (the checkpoint, without the optimizer moments) and
# NAME.train.{out,log}, NAME.eval.{json,md,log}. SKIP_TRAIN=1 evaluates an existing checkpoint.
# Resumable: a run stopped by --time-limit continues with RESUME=1 (same arguments).
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,4p' "$0"; exit 2; }
NAME=$1 RECIPE=$2 STEPS=$3 SEED=$4
shift 4
QEVAL=${QEVAL:-build/qeval}
DATA=${QEVAL_DATA_DIR:-../shared/data}
OUT=${OUT:-results/train/mix}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
TOK="$DATA/models/stories260K/tok512.model"
LR=${LR:-5e-3}

# shellcheck source=configs/train/mix-recipes.sh
source "$(dirname "$0")/mix-recipes.sh"
mix_recipe "$RECIPE" || exit 2

mkdir -p "$OUT" "$MIX"
python3 "$(dirname "$0")/mix.py" "$DATA" "$MIX" > "$MIX/mix.json"

if [ "${SKIP_TRAIN:-0}" = 0 ]; then
  resume=()
  [ "${RESUME:-0}" = 0 ] || resume=(--resume "$OUT/$NAME")
  "$QEVAL" train "${MIX_SHAPE[@]}" --steps "$STEPS" --warmup $((STEPS / 10)) --lr "$LR" \
    --val-every $((STEPS / 10)) --val-windows 64 --checkpoint-every $((STEPS / 10)) \
    --seed "$SEED" "${MIX_RECIPE[@]}" "${resume[@]}" \
    --data "$MIX/mix-train.txt" --tokenizer "$TOK" --out "$OUT/$NAME" "$@" \
    > "$OUT/$NAME.train.out" 2> "$OUT/$NAME.train.log"
fi

# The evaluation uses the run's own window length and BOS convention (read back from the
# checkpoint, so SKIP_TRAIN=1 needs no options).
mix_eval_window "$OUT/$NAME"
"$QEVAL" eval --model "$OUT/$NAME" --data "$MIX/mix-heldout.txt" "${MIX_WINDOW[@]}" \
  --schemes full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint --threads 1 \
  --out "$OUT/$NAME.eval.json" > "$OUT/$NAME.eval.md" 2> "$OUT/$NAME.eval.log"
