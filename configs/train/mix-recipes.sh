# Issue 18: the recipes of the mixed-text study, sourced by sweep.sh and mix-run.sh so that the
# tuning and the final runs train exactly the same models.
#   MIX_SHAPE: what every run shares (GPT-2 style, d 128, 4 layers, 4 heads, 2,048 tokens a step,
#              cosine to 0.1·lr, β₂ 0.95, clip 1, no weight decay, one thread)
#   mix_recipe RECIPE: the optimizer / attention / norm triple, into the array MIX_RECIPE
#   mix_eval_window RUN_DIR: the window a trained run is evaluated with (its own length and BOS
#              convention, read back from its train_state.json), into the array MIX_WINDOW
#   mix_heldout DATA_DIR: writes the mixed text (configs/train/mix.py) into $MIX (default
#              ~/.cache/qeval/train/mix) and sets MIX_HELDOUT to its held-out file
MIX_SHAPE=(--arch gpt2 --d-model 128 --n-layers 4 --n-heads 4 --seq-len 128 --batch-size 16
           --min-lr-ratio 0.1 --clip 1 --beta2 0.95 --threads 1)

mix_recipe() {
  case $1 in
    A) MIX_RECIPE=(--optimizer adam --softmax softmax --norm layernorm) ;;                   # the baseline
    B) MIX_RECIPE=(--optimizer orthoadam --softmax softmax1 --norm rmsnorm_single) ;;        # Kaul et al.
    A-B) MIX_RECIPE=(--optimizer adam --softmax softmax1 --norm rmsnorm_single) ;;           # ablation
    B-A) MIX_RECIPE=(--optimizer orthoadam --softmax softmax --norm layernorm) ;;            # ablation
    *) echo "mix_recipe: RECIPE must be A, B, A-B or B-A, got '$1'" >&2; return 2 ;;
  esac
}

mix_eval_window() {
  local seq bos
  read -r seq bos < <(python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))["training"]
print(t["seq_len"], 1 if t.get("bos_per_window") else 0)' "$1/train_state.json") || return 2
  MIX_WINDOW=(--seq-len "$seq")
  [ "$bos" = 0 ] || MIX_WINDOW+=(--bos-per-window)
}

mix_heldout() {
  local mix=${MIX:-$HOME/.cache/qeval/train/mix}
  mkdir -p "$mix" || return 2
  python3 "$(dirname "${BASH_SOURCE[0]}")/mix.py" "$1" "$mix" > "$mix/mix.json" || return 2
  MIX_HELDOUT=$mix/mix-heldout.txt
}
