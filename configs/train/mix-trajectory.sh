#!/usr/bin/env bash
# Issue 18: the statistics over training. A run of configs/train/mix-run.sh overwrites its
# checkpoint every tenth of the schedule, so this keeps a copy of each one while the runs train,
# and evaluates the copies afterwards.
#
#   configs/train/mix-trajectory.sh watch            # beside mix-all.sh; stop it (Ctrl-C) when the runs end
#   configs/train/mix-trajectory.sh eval RUN...      # e.g. A-s0 B-s0: results/train/mix/trajectory/RUN-STEP.json
#
# The copies go to $SNAPSHOTS (default ~/.cache/qeval/train/mix-snapshots/RUN-STEP); each is
# evaluated on the first 256 held-out windows, full precision with statistics.
set -euo pipefail
cd "$(dirname "$0")/../.."
QEVAL=${QEVAL:-build/qeval}
OUT=${OUT:-results/train/mix}
SNAPSHOTS=${SNAPSHOTS:-$HOME/.cache/qeval/train/mix-snapshots}
MIX=${MIX:-$HOME/.cache/qeval/train/mix}
step_of() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$1"; }

case ${1:-} in
  watch)
    mkdir -p "$SNAPSHOTS"
    while true; do
      for dir in "$OUT"/*/; do
        run=$(basename "$dir")
        [ -f "$dir/train_state.json" ] || continue
        step=$(step_of "$dir/train_state.json" 2> /dev/null) || continue
        dst="$SNAPSHOTS/$run-$step"
        [ -e "$dst" ] && continue
        rm -rf "$dst.tmp" && mkdir -p "$dst.tmp"
        cp "$dir/config.json" "$dir/model.safetensors" "$dir/train_state.json" "$dir"/tok512.* "$dst.tmp/" 2> /dev/null || true
        # The trainer may have written the next checkpoint while this copied: keep only a consistent copy.
        if [ "$(step_of "$dst.tmp/train_state.json" 2> /dev/null)" = "$step" ]; then mv "$dst.tmp" "$dst"; else rm -rf "$dst.tmp"; fi
      done
      sleep 20
    done
    ;;
  eval)
    shift
    mkdir -p "$OUT/trajectory"
    for run in "$@"; do
      for snap in "$SNAPSHOTS/$run"-*; do
        [[ $(basename "$snap") =~ ^$run-[0-9]+$ ]] || continue
        "$QEVAL" eval -q --model "$snap" --data "$MIX/mix-heldout.txt" --seq-len 128 --max-windows 256 --schemes full \
          --threads 1 --out "$OUT/trajectory/$(basename "$snap").json" > /dev/null
      done
    done
    ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
