#!/usr/bin/env bash
# Training-time vs post-hoc outlier treatments (issue 15, results/README.md, "Training-time vs post-hoc"):
# every model under no transform, rotate, smooth and rotate+smooth, each evaluated with the int8
# presets, LLM.int8()'s mixed-precision scheme, the keep-first-token presets and 4-bit, with the
# full-precision statistics of the (transformed) model. One record per (model, transform), one
# `qeval compare` table per model.
#   results/posthoc/run.sh [smollm2|gemma3|stories260k|pair]...     (default: all; from the repository root)
# Needs scripts/models for SmolLM2 and the shared data folder; ~35 min on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/posthoc"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
data="${QEVAL_DATA_DIR:-$root/../shared/data}"
schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,int8-mixed,int8-coarse-keep1,int8-moderate-keep1,w4-zeropoint

# run NAME OUTDIR EVAL-ARGS...: one record per entry of $transforms, then the comparison table.
run() {
  local name=$1 out=$2
  shift 2
  mkdir -p "$out"
  local records=()
  for t in "${transforms[@]}"; do
    local args=() tag=${t// /+}
    tag=${tag//[:=]/-}
    [[ $t == none ]] || for x in $t; do args+=(--transform "$x"); done
    echo "== $name $tag" >&2
    "$qeval" eval "$@" --schemes "$schemes" --stats-for full --threads 2 "${args[@]}" \
      --out "$out/$tag.json" -q > "$out/$tag.md"
    records+=("$out/$tag.json")
  done
  "$qeval" compare "${records[@]}" > "$out/compare.md"
}

selected=("$@")
is_selected() { ((${#selected[@]} == 0)) || [[ " ${selected[*]} " == *" $1 "* ]]; }

if is_selected smollm2; then
  "$root/scripts/models"
  # On the real model QuaRot's online Hadamard on the down projection's input too.
  transforms=("none" "rotate" "smooth" "rotate:online_down=1")
  run smollm2 "$here/smollm2-135m" --model smollm2-135m --data text/wikitext-2-raw-v1/test.joined.txt \
    --seq-len 512 --max-windows 16 --seed 0
fi
if is_selected gemma3; then
  # Gemma-3-270M (issue 35): windows open with BOS (its tokenizer's default). A transform the
  # family does not allow (rotate cannot fold Gemma's sandwich norms) is refused by qeval with
  # the reason; the refusal goes in place of the record, and the run goes on.
  "$root/scripts/models" --model gemma3-270m
  transforms=("none" "smooth" "rotate")
  out="$here/gemma3-270m"
  mkdir -p "$out"
  records=()
  for t in "${transforms[@]}"; do
    args=()
    [[ $t == none ]] || args=(--transform "$t")
    echo "== gemma3 $t" >&2
    if "$qeval" eval --model gemma3-270m --data text/wikitext-2-raw-v1/test.joined.txt --seq-len 512 \
      --max-windows "${GEMMA_WINDOWS:-16}" --seed 0 --schemes "$schemes" --stats-for full --threads 2 "${args[@]}" \
      --out "$out/$t.json" -q > "$out/$t.md" 2> "$out/$t.err"; then
      records+=("$out/$t.json")
      rm -f "$out/$t.err"
    else
      echo "gemma3 $t: refused or failed: $(tail -n 1 "$out/$t.err")" >&2
      rm -f "$out/$t.md"
    fi
  done
  "$qeval" compare "${records[@]}" > "$out/compare.md"
  # Which layer kinds carry the penalty (as for SmolLM2: int8-moderate, one kind at a time).
  "$qeval" sensitivity -q --model gemma3-270m --data text/wikitext-2-raw-v1/test.joined.txt --seq-len 512 \
    --max-windows "${GEMMA_SENSITIVITY_WINDOWS:-8}" --seed 0 --by kind --scheme int8-moderate --threads 2 \
    --out "$out/sensitivity-moderate-none.json" --plot "$out/sensitivity-moderate-none.png" \
    > "$out/sensitivity-moderate-none.md"
fi
transforms=("none" "rotate" "smooth" "rotate smooth")
if is_selected stories260k; then
  run stories260k "$here/stories260k" --seq-len 512 --max-windows 32 --seed 0
fi
if is_selected pair; then
  # The committed pair (results/train/pair) on its held-out TinyStories lines, as its own eval.
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  tail -n +7801 "$data/text/tinystories/validation-head.txt" > "$work/tinystories-heldout.txt"
  for m in A-adam B-orthoadam; do
    run "pair $m" "$here/pair/$m" --model "$root/results/train/pair/$m" --data "$work/tinystories-heldout.txt" \
      --seq-len 128 --max-windows 128
  done
fi
