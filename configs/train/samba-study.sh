#!/usr/bin/env bash
# The layer-pattern study: three models of one width, trained alike on the mixed-text corpus of
# issue 18 (configs/train/mix.py, the data recipe of mix-run.sh), differing only in their layers:
#   attn-swa   attention only, sliding window 64 in every layer (as Mistral)
#   mamba-mlp  every block a Mamba (S6) mixer + dense MLP (no positional encoding: nothing rotates)
#   samba      layers alternate Mamba + MLP, sliding-window (64) attention + MLP (Samba-style)
# Shared: Llama style (RMSNorm, RoPE on the attention layers, SwiGLU MLP of 352, no biases, untied
# head), d 128, 4 layers, 4 heads; Mamba with state 16, expand 2, conv 4, dt rank 8 (A fixed at its
# S4D-real init: docs/usage.md "Training a layer pattern"); seq 256 × batch 16 = 4,096 tokens a step,
# AdamW (no weight decay) lr 2e-3, warm-up STEPS/10 then cosine to 0.1·lr, β 0.9/0.95, clip 1, seed
# 0, one thread per run; validation loss every STEPS/10 steps on 64 held-out windows (the last 5 % of
# the stream). STEPS (360) was chosen so the slowest model (mamba-mlp, ~1 s a step on this 2-core
# machine with a second run beside it) ends within 8 minutes.
#
#   configs/train/samba-study.sh            # all three, two at a time, then the summary table
#   configs/train/samba-study.sh samba      # one model
#
# Writes, for each NAME, $OUT/NAME/ (the checkpoint `qeval eval --model` loads), NAME.train.{out,log}
# and NAME.wall_s (seconds), then $OUT/summary.md: parameters, wall time, final train and
# validation loss. The checkpoints stay outside the repository (default ~/.cache/qeval/study-samba).
# The tokenizer is the llama2.c export of stories260K's (tok512.bin); mix-run.sh reads the
# SentencePiece file (tok512.model), which cuts mix-train.txt into 0.12 % fewer tokens:
# TOK=…/tok512.model to match it.
set -euo pipefail
QEVAL=${QEVAL:-build/qeval}
DATA=${QEVAL_DATA_DIR:-../shared/data}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
OUT=${OUT:-$HOME/.cache/qeval/study-samba}
TOK=${TOK:-$DATA/models/stories260K/tok512.bin}
STEPS=${STEPS:-360}
LR=${LR:-2e-3}
SEED=${SEED:-0}

SHARED=(--arch llama --d-model 128 --n-layers 4 --n-heads 4 --seq-len 256 --batch-size 16
        --steps "$STEPS" --warmup $((STEPS / 10)) --lr "$LR" --min-lr-ratio 0.1 --clip 1
        --optimizer adamw --beta1 0.9 --beta2 0.95 --weight-decay 0
        --val-every $((STEPS / 10)) --val-windows 64 --seed "$SEED" --threads 1)

model_options() {
  case $1 in
    attn-swa) MODEL=(--attention-window 64) ;;
    mamba-mlp) MODEL=(--layer-pattern mamba:dense) ;;
    samba) MODEL=(--layer-pattern mamba:dense,attention:dense --attention-window 64) ;;
    *) echo "samba-study.sh: NAME must be attn-swa, mamba-mlp or samba, got '$1'" >&2; return 2 ;;
  esac
}

train() {
  local name=$1 start
  model_options "$name"
  start=$(date +%s.%N)
  "$QEVAL" train "${SHARED[@]}" "${MODEL[@]}" --data "$MIX/mix-train.txt" --tokenizer "$TOK" --out "$OUT/$name" \
    > "$OUT/$name.train.out" 2> "$OUT/$name.train.log"
  python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$start" "$(date +%s.%N)" \
    > "$OUT/$name.wall_s"
}

summary() {
  python3 - "$OUT" attn-swa mamba-mlp samba <<'EOF'
import json, math, struct, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| model | parameters | wall time | steps | final train loss | final val loss |")
print("|---|---:|---:|---:|---:|---:|")
for name in sys.argv[2:]:
    ck = out / name
    if not (ck / "train_state.json").exists():
        continue
    raw = (ck / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
    params = sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    state = json.loads((ck / "train_state.json").read_text())
    last = state["history"][-1]
    wall = float((out / f"{name}.wall_s").read_text())
    print(f"| {name} | {params:,} | {wall / 60:.1f} min ({wall:.0f} s) | {state['step']} | "
          f"{last['train_loss']:.4f} | {last['val_loss']:.4f} |")
EOF
}

mkdir -p "$OUT" "$MIX"
python3 "$(dirname "$0")/mix.py" "$DATA" "$MIX" > "$MIX/mix.json"
if [ $# -gt 0 ]; then
  for name in "$@"; do train "$name"; done
else
  # Two at a time: the slowest beside the other two in turn.
  train mamba-mlp &
  slow=$!
  train samba
  train attn-swa
  wait "$slow"
fi
summary | tee "$OUT/summary.md"
