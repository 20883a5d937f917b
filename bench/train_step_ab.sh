#!/usr/bin/env bash
# Training throughput of two qeval binaries on the same recipe, alternated (old, new, old, new)
# on one core, so a trainer change is measured against its baseline in the same run.
#
#   bench/train_step_ab.sh OLD_QEVAL NEW_QEVAL [RECIPE] [extra `qeval train` options...]
#
# RECIPE is one of configs/train/mix-recipes.sh (default A-B: Adam + softmax-1 + RMSNormSingle);
# the shape defaults to the d-256 first-token runs (512 × 16, BOS per window), 12 steps after
# 2 of warm-up. Needs the training mix (configs/train/mix.py, as mix-run.sh writes it).
# Prints each run's tok/s (the trainer's own figure at the last step), the load average, and
# new / old.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,5p' "$0"; exit 2; }
OLD=$1 NEW=$2 RECIPE=${3:-A-B}
shift $(( $# >= 3 ? 3 : 2 ))
EXTRA=("$@")
DATA=${QEVAL_DATA_DIR:-../shared/data}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
CPU=${CPU:-0}
# shellcheck source=configs/train/mix-recipes.sh
source "$(dirname "$0")/../configs/train/mix-recipes.sh"
mix_recipe "$RECIPE"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # binary label -> tok/s
  taskset -c "$CPU" "$1" train "${MIX_SHAPE[@]}" --d-model 256 --seq-len 512 --batch-size 16 --bos-per-window \
    --steps 14 --warmup 2 --lr 2e-3 --val-every 1000 --val-windows 1 --checkpoint-every 1000 --seed 0 \
    "${MIX_RECIPE[@]}" --data "$MIX/mix-train.txt" --tokenizer "$DATA/models/stories260K/tok512.model" \
    --out "$work/$2" "${EXTRA[@]}" > /dev/null 2> "$work/$2.log"
  grep -o '[0-9]* tok/s' "$work/$2.log" | tail -n 1 | cut -d' ' -f1
}
declare -A sum=([old]=0 [new]=0)
for round in 1 2; do
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    t=$(run "$bin" "$which$round")
    echo "round $round $which: $t tok/s   (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
    sum[$which]=$(( sum[$which] + t ))
  done
done
python3 -c "import sys; o, n = map(float, sys.argv[1:]); print(f'recipe $RECIPE: new / old = {n / o:.3f}')" "${sum[old]}" "${sum[new]}"
