#!/usr/bin/env bash
# Issue 18: every run of the mixed-text study, two at a time (one thread each on a 2-core
# machine), then the tables, the comparison and the per-layer curves.
#
#   configs/train/mix-all.sh            (from the repository root; QEVAL=path/to/qeval)
#
# A job starts when fewer than two `qeval` processes are running, so the list can also be
# started while other runs finish (SKIP="A-s0 B-s0" leaves jobs out). Each job is
# configs/train/mix-run.sh NAME RECIPE STEPS SEED [options].
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-results/train/mix}
JOBS=(
  "A-s0 A 10000 0"          # the final pair: 20.5 M tokens each
  "B-s0 B 10000 0"
  "A-s1-10k A 10000 1"      # seeds 2 and 3 at the same budget
  "B-s1-10k B 10000 1"
  "A-s2-10k A 10000 2"
  "B-s2-10k B 10000 2"
  # Seeds 2 and 3 on a quarter of the budget (5.1 M tokens): the ablations, first-token, learning-rate
  # and depth runs below use this budget and sit beside them.
  "A-s1 A 2500 1"
  "B-s1 B 2500 1"
  "A-s2 A 2500 2"
  "B-s2 B 2500 2"
  "A-B-s1 A-B 2500 1"       # the ablations, beside seed 1
  "B-A-s1 B-A 2500 1"
  # First-token attention: windows of 512 that all open with BOS, as many tokens a step.
  "A-s1-L512bos A 2500 1 --seq-len 512 --batch-size 4 --bos-per-window"
  "B-s1-L512bos B 2500 1 --seq-len 512 --batch-size 4 --bos-per-window"
  # Off the tuned learning rate: the issue's probe used 1e-2 (more outliers, a larger PPL gap).
  "A-s1-lr1e-2 A 2500 1 --lr 1e-2"
  "B-s1-lr1e-2 B 2500 1 --lr 1e-2"
  # Depth probe: 8 layers instead of 4 (Adam's kurtosis grows layer by layer), seed 1's budget.
  "A-s1-L8 A 2500 1 --n-layers 8"
  "B-s1-L8 B 2500 1 --n-layers 8"
  # Width probe: d 256 instead of 128 (3.4 M parameters), seed 1's budget.
  "A-s1-d256 A 2500 1 --d-model 256"
  "B-s1-d256 B 2500 1 --d-model 256"
  # The d-256 pair at each recipe's own tuned lr (sweep-d256/sweep.md: A 2e-3, B 3e-3) on the
  # quarter budget, seed 0; and A on seed 1, beside the width probe's 5e-3 (A-s1-d256).
  "A-d256-s0 A 2500 0 --d-model 256 --lr 2e-3"
  "B-d256-s0 B 2500 0 --d-model 256 --lr 3e-3"
  "A-d256-s1 A 2500 1 --d-model 256 --lr 2e-3"
  # The same tuned d-256 pair on twice the tokens (10.2 M; warm-up and schedule scale with the
  # steps): whether more tokens move the kurtosis ratio at d 256, as 4x the tokens did at d 128.
  "A-d256-s0-5k A 5000 0 --d-model 256 --lr 2e-3"
  "B-d256-s0-5k B 5000 0 --d-model 256 --lr 3e-3"
  # And on the full budget of the d-128 seeds (20.5 M tokens): 2.1 h (A) and 2.8 h (B) side by
  # side on the AVX2 EPYC, 99 and 132 min on a Zen 4 EPYC; add --time-limit MINUTES to stop with a
  # checkpoint, RESUME=1 to go on (on the same machine: the checkpoints are ignored).
  "A-d256-s0-10k A 10000 0 --d-model 256 --lr 2e-3"
  "B-d256-s0-10k B 10000 0 --d-model 256 --lr 3e-3"
  # Seeds 1 and 2 of that pair, on the same full budget: Adam's outliers grow while the lr is
  # near its peak (trajectory/), so a shorter schedule would not test the same thing.
  "A-d256-s1-10k A 10000 1 --d-model 256 --lr 2e-3"
  "B-d256-s1-10k B 10000 1 --d-model 256 --lr 3e-3"
  "A-d256-s2-10k A 10000 2 --d-model 256 --lr 2e-3"
  "B-d256-s2-10k B 10000 2 --d-model 256 --lr 3e-3"
  # The ablations of that pair, seed 0, full budget; each at the lr of the recipe whose
  # optimizer it has (A-B: Adam's 2e-3; B-A: OrthoAdam's 3e-3).
  "A-B-d256-s0-10k A-B 10000 0 --d-model 256 --lr 2e-3"
  "B-A-d256-s0-10k B-A 10000 0 --d-model 256 --lr 3e-3"
  # First-token attention at d 256: windows of 512 that all open with BOS, 16 a step (8,192
  # tokens; 4 a step stall on a plateau, probe-window-d64/), at the pair's lr, on the tokens of
  # A-d256-s0-5k (10.2 M): 62 and 75 min side by side on a Zen 4 EPYC.
  "A-d256-s0-L512bos A 1250 0 --d-model 256 --lr 2e-3 --seq-len 512 --batch-size 16 --bos-per-window"
  "B-d256-s0-L512bos B 1250 0 --d-model 256 --lr 3e-3 --seq-len 512 --batch-size 16 --bos-per-window"
)
running() { pgrep -x qeval | wc -l; }
for job in "${JOBS[@]}"; do
  read -r name _ <<< "$job"
  [[ " ${SKIP:-} " == *" $name "* ]] && continue
  while [ "$(running)" -ge 2 ]; do sleep 15; done
  # shellcheck disable=SC2086  # the job's words are its arguments
  configs/train/mix-run.sh $job &
  sleep 15  # let it start its qeval before the next slot is counted
done
wait

SEEDS="A-s0 B-s0 A-s1-10k B-s1-10k A-s2-10k B-s2-10k"
# shellcheck disable=SC2086  # the run names are separate arguments
configs/train/mix-by-source.sh $SEEDS
# shellcheck disable=SC2086
configs/train/mix-fine-split.sh $SEEDS
# shellcheck disable=SC2046  # one argument per run folder
python3 configs/train/mix-weights.py $(for r in $SEEDS A-s1 B-s1 A-B-s1 B-A-s1; do echo "$OUT/$r"; done) > "$OUT/weights.md"
python3 configs/train/mix-report.py "$OUT" > "$OUT/summary.md"
QEVAL=${QEVAL:-build/qeval}
"$QEVAL" compare "$OUT/A-s0.eval.json" "$OUT/B-s0.eval.json" > "$OUT/compare.md"
"$QEVAL" compare "$OUT/A-d256-s0.eval.json" "$OUT/B-d256-s0.eval.json" > "$OUT/compare-d256.md"
"$QEVAL" compare "$OUT/A-d256-s0-5k.eval.json" "$OUT/B-d256-s0-5k.eval.json" > "$OUT/compare-d256-5k.md"
"$QEVAL" compare "$OUT/A-d256-s0-10k.eval.json" "$OUT/B-d256-s0-10k.eval.json" > "$OUT/compare-d256-10k.md"
D256_SEEDS="A-d256-s0-10k B-d256-s0-10k A-d256-s1-10k B-d256-s1-10k A-d256-s2-10k B-d256-s2-10k"
# shellcheck disable=SC2046  # one argument per record
"$QEVAL" compare $(for r in $D256_SEEDS; do echo "$OUT/$r.eval.json"; done) > "$OUT/compare-d256-seeds.md"
# shellcheck disable=SC2046  # one argument per record
"$QEVAL" compare $(for r in $SEEDS; do echo "$OUT/$r.eval.json"; done) > "$OUT/compare-seeds.md"
"$QEVAL" compare "$OUT/A-s1.eval.json" "$OUT/A-B-s1.eval.json" "$OUT/B-A-s1.eval.json" "$OUT/B-s1.eval.json" \
  > "$OUT/compare-ablations.md"
"$QEVAL" compare "$OUT"/{A,A-B,B-A,B}-d256-s0-10k.eval.json > "$OUT/compare-ablations-d256.md"
"$QEVAL" compare "$OUT/A-d256-s0-L512bos.eval.json" "$OUT/B-d256-s0-L512bos.eval.json" > "$OUT/compare-d256-L512bos.md"
"$QEVAL" plot "$OUT/A-s0.eval.json" "$OUT/B-s0.eval.json" --out "$OUT/figures"
"$QEVAL" plot "$OUT"/{A,A-B,B-A,B}-d256-s0-10k.eval.json --out "$OUT/figures-ablations-d256"
"$QEVAL" plot "$OUT/A-d256-s0-L512bos.eval.json" "$OUT/B-d256-s0-L512bos.eval.json" --out "$OUT/figures-d256-L512bos"
