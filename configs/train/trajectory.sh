#!/usr/bin/env bash
# Issue 44: when do the sink and the outliers emerge? The Adam / OrthoAdam + softmax-1 pair of
# results/train/mix on 512-token windows that open with BOS, 16 windows a step (its "L512bos"
# recipe), trained again with a series of kept checkpoints; and Adam at half its lr with twice
# the steps (Gu et al.'s Table 9: the same lr x steps budget).
#
#   configs/train/trajectory.sh train NAME RECIPE STEPS LR KEEP [options]  # e.g. A128-lr5e-3 A 625 5e-3 log:50 --d-model 128
#   configs/train/trajectory.sh eval NAME [--watch ...]           # every kept checkpoint of NAME
#   configs/train/trajectory.sh all                               # the three runs, each watched by its evaluation
#   configs/train/trajectory.sh report                            # the tables, figures and gates of results/README.md
#
# RECIPE as in mix-run.sh (A: Adam + softmax + LayerNorm; B: OrthoAdam + softmax-1 + RMSNormSingle);
# extra `qeval train` options come last and win. The mix study's L512bos pair is d 256 at 1,250
# steps (A 2e-3, B 3e-3); "all" runs it at d 128 and 625 steps, both at the d-128 study's 5e-3,
# because d 256 did not fit the CPU this was run on (results/train/trajectory/README.md).
# Checkpoints go to $RUNS/NAME/step-N (default ~/.cache/qeval/train/trajectory; not committed),
# logs and records to results/train/trajectory/: NAME.train.{out,log}, NAME.json (the series
# record), NAME/step-N.json (one record per checkpoint), NAME.eval.{md,log}.
# Evaluation: the first $WINDOWS (64) held-out windows of 512 tokens, opened by BOS as in training,
# full precision (with the outlier and attention statistics) and int8-coarse.
# Everything runs with one thread per process at a low priority, so that builds keep the CPU:
# nice $NICE in a session of its own whose autogroup is niced too (with the kernel's autogroups on,
# plain nice only ranks processes within one session, not against other people's builds).
set -euo pipefail
cd "$(dirname "$0")/../.."
QEVAL=${QEVAL:-build/qeval}
DATA=${QEVAL_DATA_DIR:-../shared/data}
OUT=${OUT:-results/train/trajectory}
RUNS=${RUNS:-$HOME/.cache/qeval/train/trajectory}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
WINDOWS=${WINDOWS:-64}
TOK="$DATA/models/stories260K/tok512.model"
# shellcheck source=configs/train/mix-recipes.sh
source configs/train/mix-recipes.sh

NICE=${NICE:-19}  # the results here: 7 up to the restart, 19 after it (at 19 the runs got a few % of a core beside other builds)
lowest() { setsid -w sh -c "echo $NICE > /proc/self/autogroup 2> /dev/null; exec nice -n $NICE \"\$@\"" lowest "$@"; }

train() {
  local name=$1 recipe=$2 steps=$3 lr=$4 keep=$5
  shift 5
  mix_recipe "$recipe" || exit 2
  mkdir -p "$OUT" "$RUNS"
  python3 configs/train/mix.py "$DATA" "$MIX" > /dev/null
  local resume=()
  if [ "${RESUME:-0}" != 0 ]; then  # a resumed run appends to its logs
    resume=(--resume "$RUNS/$name")
    echo "# resumed from $RUNS/$name at $(date -u '+%F %T') UTC" | tee -a "$OUT/$name.train.out" >> "$OUT/$name.train.log"
    exec 3>> "$OUT/$name.train.out" 4>> "$OUT/$name.train.log"
  else
    exec 3> "$OUT/$name.train.out" 4> "$OUT/$name.train.log"
  fi
  lowest "$QEVAL" train "${MIX_SHAPE[@]}" --d-model 256 --seq-len 512 --batch-size 16 --bos-per-window \
    --steps "$steps" --warmup $((steps / 10)) --lr "$lr" --val-every $((steps / 10)) --val-windows 64 \
    --checkpoint-every $((steps / 10)) --keep-checkpoints "$keep" --seed 0 "${MIX_RECIPE[@]}" "${resume[@]}" \
    --data "$MIX/mix-train.txt" --tokenizer "$TOK" --out "$RUNS/$name" "$@" >&3 2>&4
}

evaluate() {
  local name=$1
  shift
  mkdir -p "$OUT"
  # The evaluation log is appended to (a series evaluated again skips the checkpoints with records).
  echo "# eval $name $* at $(date -u '+%F %T') UTC" >> "$OUT/$name.eval.log"
  lowest "$QEVAL" eval --model "$RUNS/$name" --data "$MIX/mix-heldout.txt" --seq-len 512 --bos-per-window \
    --max-windows "$WINDOWS" --schemes full,int8-coarse --threads 1 --out "$OUT/$name.json" "$@" \
    > "$OUT/$name.eval.md" 2>> "$OUT/$name.eval.log"
}

case ${1:-} in
  train) shift; train "$@" ;;
  eval) shift; evaluate "$@" ;;
  all)
    # Each evaluation follows its run as it trains (--watch) and stops when the run has finished.
    for job in "A128-lr5e-3 A 625 5e-3 log:50" "B128-lr5e-3 B 625 5e-3 log:50" "A128-lr2.5e-3 A 1250 2.5e-3 log:100"; do
      read -r name _ <<< "$job"
      # shellcheck disable=SC2086  # the job's words are its arguments
      "$0" train $job --d-model 128 &
      "$0" eval "$name" --watch --watch-poll 60 --watch-timeout 3600 &
    done
    wait
    ;;
  report)
    "$QEVAL" compare "$OUT/A128-lr5e-3.json" "$OUT/B128-lr5e-3.json" > "$OUT/compare-sink.md"
    "$QEVAL" plot "$OUT/A128-lr5e-3.json" "$OUT/B128-lr5e-3.json" --out "$OUT/figure-sink" > /dev/null
    "$QEVAL" compare "$OUT/A128-lr5e-3.json" "$OUT/A128-lr2.5e-3.json" > "$OUT/compare-lr.md"
    "$QEVAL" plot "$OUT/A128-lr5e-3.json" "$OUT/A128-lr2.5e-3.json" --x progress --out "$OUT/figure-lr" > /dev/null
    for run in A128-lr5e-3 B128-lr5e-3 A128-lr2.5e-3; do
      "$QEVAL" check "$OUT/$run.json" --tolerances configs/ci/trajectory-rules.json > "$OUT/check-$run.md" || true
    done
    python3 results/train/trajectory/summary.py "$OUT" > "$OUT/summary.md"  # (a) step by step, (b) at equal lr x steps
    ;;
  *) sed -n '2,23p' "$0"; exit 2 ;;
esac
