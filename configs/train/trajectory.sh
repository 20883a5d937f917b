#!/usr/bin/env bash
# Issue 44: when do the sink and the outliers emerge? The d-256 pair of results/train/mix on
# 512-token windows that open with BOS (its "L512bos" runs: 16 windows a step, each recipe at its
# tuned lr, 1,250 steps = 10.2 M tokens), trained again with a series of kept checkpoints, and
# Adam at half its lr with twice the steps (Gu et al.'s Table 9: the same lr x steps budget).
#
#   configs/train/trajectory.sh train NAME RECIPE STEPS LR KEEP   # e.g. A-lr2e-3 A 1250 2e-3 log:50
#   configs/train/trajectory.sh eval NAME [--watch ...]           # every kept checkpoint of NAME
#   configs/train/trajectory.sh all                               # the three runs, each watched by its evaluation
#   configs/train/trajectory.sh report                            # the tables, figures and gates of the README
#
# RECIPE as in mix-run.sh (A: Adam + softmax + LayerNorm; B: OrthoAdam + softmax-1 + RMSNormSingle).
# Checkpoints go to $RUNS/NAME/step-N (default ~/.cache/qeval/train/trajectory; not committed),
# logs and records to results/train/trajectory/: NAME.train.{out,log}, NAME.json (the series
# record), NAME/step-N.json (one record per checkpoint), NAME.eval.{md,log}.
# Evaluation: the first $WINDOWS (128) held-out windows of 512 tokens, opened by BOS as in training,
# full precision (with the outlier and attention statistics) and int8-coarse.
# Everything runs with one thread per process at the lowest priority, so that builds keep the CPU:
# nice 19 in a session of its own whose autogroup is niced too (with the kernel's autogroups on,
# plain nice only ranks processes within one session, not against other people's builds).
set -euo pipefail
cd "$(dirname "$0")/../.."
QEVAL=${QEVAL:-build/qeval}
DATA=${QEVAL_DATA_DIR:-../shared/data}
OUT=${OUT:-results/train/trajectory}
RUNS=${RUNS:-$HOME/.cache/qeval/train/trajectory}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
WINDOWS=${WINDOWS:-128}
TOK="$DATA/models/stories260K/tok512.model"
# shellcheck source=configs/train/mix-recipes.sh
source configs/train/mix-recipes.sh

lowest() { setsid -w sh -c 'echo 19 > /proc/self/autogroup 2> /dev/null; exec nice -n 19 "$@"' lowest "$@"; }

train() {
  local name=$1 recipe=$2 steps=$3 lr=$4 keep=$5
  mix_recipe "$recipe" || exit 2
  mkdir -p "$OUT" "$RUNS"
  python3 configs/train/mix.py "$DATA" "$MIX" > /dev/null
  local resume=()
  [ "${RESUME:-0}" = 0 ] || resume=(--resume "$RUNS/$name")
  lowest "$QEVAL" train "${MIX_SHAPE[@]}" --d-model 256 --seq-len 512 --batch-size 16 --bos-per-window \
    --steps "$steps" --warmup $((steps / 10)) --lr "$lr" --val-every $((steps / 10)) --val-windows 64 \
    --checkpoint-every $((steps / 10)) --keep-checkpoints "$keep" --seed 0 "${MIX_RECIPE[@]}" "${resume[@]}" \
    --data "$MIX/mix-train.txt" --tokenizer "$TOK" --out "$RUNS/$name" \
    > "$OUT/$name.train.out" 2> "$OUT/$name.train.log"
}

evaluate() {
  local name=$1
  shift
  mkdir -p "$OUT"
  lowest "$QEVAL" eval --model "$RUNS/$name" --data "$MIX/mix-heldout.txt" --seq-len 512 --bos-per-window \
    --max-windows "$WINDOWS" --schemes full,int8-coarse --threads 1 --out "$OUT/$name.json" "$@" \
    > "$OUT/$name.eval.md" 2> "$OUT/$name.eval.log"
}

case ${1:-} in
  train) shift; train "$@" ;;
  eval) shift; evaluate "$@" ;;
  all)
    # Each evaluation follows its run as it trains (--watch) and stops when the run has finished.
    for job in "A-lr2e-3 A 1250 2e-3 log:50" "B-lr3e-3 B 1250 3e-3 log:50" "A-lr1e-3 A 2500 1e-3 log:100"; do
      read -r name _ <<< "$job"
      # shellcheck disable=SC2086  # the job's words are its arguments
      "$0" train $job &
      "$0" eval "$name" --watch --watch-poll 60 --watch-timeout 3600 &
    done
    wait
    ;;
  report)
    "$QEVAL" compare "$OUT/A-lr2e-3.json" "$OUT/B-lr3e-3.json" --labels "Adam 2e-3,OrthoAdam+softmax-1 3e-3" \
      > "$OUT/compare-sink.md"
    "$QEVAL" plot "$OUT/A-lr2e-3.json" "$OUT/B-lr3e-3.json" --out "$OUT/figure-sink" > /dev/null
    "$QEVAL" compare "$OUT/A-lr2e-3.json" "$OUT/A-lr1e-3.json" --labels "Adam 2e-3 x 1250,Adam 1e-3 x 2500" \
      > "$OUT/compare-lr.md"
    "$QEVAL" plot "$OUT/A-lr2e-3.json" "$OUT/A-lr1e-3.json" --x progress --out "$OUT/figure-lr" > /dev/null
    for run in A-lr2e-3 B-lr3e-3 A-lr1e-3; do
      "$QEVAL" check "$OUT/$run.json" --tolerances configs/ci/trajectory-rules.json > "$OUT/check-$run.md" || true
    done
    ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
