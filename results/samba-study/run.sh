#!/usr/bin/env bash
# SAMBA's Figure 5 at CPU scale (issue 54): the three models of configs/train/samba-study.sh
# (attention-only with a sliding window, Mamba-MLP, Samba-style), each evaluated on the held-out mix
# with every statistic, full precision and three quantised schemes; then `compare` (entropy by layer,
# and how each scheme moves it) and `plot` (entropy_by_layer.png, per-layer curves).
#
#   results/samba-study/run.sh            # train (skipped when the checkpoints exist), evaluate, report
# Checkpoints: $OUT (default ~/.cache/qeval/study-samba, not committed). Records and figures: here.
set -euo pipefail
cd "$(dirname "$0")/../.."
QEVAL=${QEVAL:-build/qeval}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
OUT=${OUT:-$HOME/.cache/qeval/study-samba}
HERE=results/samba-study
WINDOWS=${WINDOWS:-128}
for name in attn-swa mamba-mlp samba; do
  [ -f "$OUT/$name/model.safetensors" ] || QEVAL=$QEVAL OUT=$OUT configs/train/samba-study.sh "$name"
done
for name in attn-swa mamba-mlp samba; do
  "$QEVAL" eval --model "$OUT/$name" --data "$MIX/mix-heldout.txt" --seq-len 256 --max-windows "$WINDOWS" \
    --schemes full,int8-coarse,int8-fine,w4-zeropoint --stats-for all --mamba-channels 0 --out "$HERE/$name.eval.json" \
    > "$HERE/$name.eval.md" 2> "$HERE/$name.eval.log"
done
records=("$HERE/attn-swa.eval.json" "$HERE/mamba-mlp.eval.json" "$HERE/samba.eval.json")
"$QEVAL" compare "${records[@]}" > "$HERE/compare.md"
for name in attn-swa mamba-mlp samba; do "$QEVAL" compare "$HERE/$name.eval.json" > "$HERE/$name.by-scheme.md"; done
"$QEVAL" plot "${records[@]}" --out "$HERE/figures"
"$QEVAL" plot "$HERE/samba.eval.json" --out "$HERE/figures-samba"
