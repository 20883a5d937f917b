#!/usr/bin/env bash
# Issue 18, step 2: the peak learning rate of each recipe on a short budget, picked by the
# trainer's validation loss (its last 5 % of windows of the shuffled training mix,
# configs/train/mix.py), before the final pair is trained at those settings.
#   A: Adam      + softmax   + LayerNorm
#   B: OrthoAdam + softmax-1 + RMSNormSingle
# Both GPT-2 style, d 128, 4 layers, 4 heads, seq 128, batch 16 (2,048 tokens a step), β 0.9/0.95,
# clip 1, no weight decay, seed 0, warm-up STEPS/10 then cosine to 0.1·lr; one thread each, the
# two recipes side by side for each learning rate.
#   configs/train/sweep.sh [STEPS (300)] [LRS ("1e-3 3e-3 1e-2 3e-2")]
#   (from the repository root; QEVAL=path/to/qeval OUT=folder WARMUP=steps, default STEPS/10;
#   a run with another warm-up is named A-lr3e-3-wu10; the table covers every run in OUT;
#   EXTRA="--d-model 256" appends `qeval train` options to every run, for another model shape:
#   give it its own OUT; RECIPES="A" sweeps one recipe, e.g. on a core the other has left free)
set -euo pipefail
QEVAL=${QEVAL:-build/qeval}
OUT=${OUT:-results/train/mix/sweep}
DATA=${QEVAL_DATA_DIR:-../shared/data}
STEPS=${1:-300}
LRS=${2:-"1e-3 3e-3 1e-2 3e-2"}
WARMUP=${WARMUP:-$((STEPS / 10))}
SUFFIX=$([[ $WARMUP == $((STEPS / 10)) ]] || echo "-wu$WARMUP")
read -r -a EXTRA_ARGS <<< "${EXTRA:-}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
python3 "$(dirname "$0")/mix.py" "$DATA" "$WORK" > "$OUT/mix.json"

# shellcheck source=configs/train/mix-recipes.sh
source "$(dirname "$0")/mix-recipes.sh"
train() {  # name lr recipe
  local name=$1 lr=$2
  mix_recipe "$3"
  "$QEVAL" train "${MIX_SHAPE[@]}" --steps "$STEPS" --warmup "$WARMUP" --lr "$lr" \
    --val-every "$STEPS" --val-windows 64 --seed 0 "${MIX_RECIPE[@]}" \
    --data "$WORK/mix-train.txt" --tokenizer "$DATA/models/stories260K/tok512.model" \
    --out "$WORK/$name" "${EXTRA_ARGS[@]}" > "$OUT/$name.out" 2> "$OUT/$name.log"
}
for lr in $LRS; do
  pids=()
  for recipe in ${RECIPES:-A B}; do
    train "$recipe-lr$lr$SUFFIX" "$lr" "$recipe" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
done

{
  echo "| recipe | peak lr | warm-up | steps | validation loss |"
  echo "|---|---:|---:|---:|---:|"
  for out in "$OUT"/[AB]-lr*.out; do
    run=$(basename "$out" .out)
    recipe=${run%%-*}
    lr=${run#*-lr}
    lr=${lr%-wu*}
    warmup=$([[ $run == *-wu* ]] && echo "${run##*-wu}" || echo "steps/10")
    steps=$(sed -n 's/^trained \([0-9]*\) steps.*/\1/p' "$out")
    loss=$(sed -n 's/.*validation loss \([0-9.]*\).*/\1/p' "$out" | tail -n 1)
    echo "| $recipe | $lr | $warmup | ${steps:-?} | ${loss:-failed (see $run.log)} |"
  done | sort -t '|' -k3,3g -k4,4 -k2,2
} | tee "$OUT/sweep.md"
