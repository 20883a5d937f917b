#!/usr/bin/env bash
# Makes SmolLM2-135M's llm-compressor artifacts outside the repository (make_smollm2_artifacts.py
# says what each is), each step in its own process under /usr/bin/time -v, then checks that qeval
# reads every one. From the repository root:
#   results/quantized-checkpoints/make_smollm2_artifacts.sh                  every step, then check
#   results/quantized-checkpoints/make_smollm2_artifacts.sh gptq-w4a16 check-gptq-w4a16
#                                                some steps; check-parent, check-ARTIFACT: one check
# Environment: QEVAL_ARTIFACTS (default /work/cache/quantized-checkpoints/smollm2-135m), QEVAL
# (default build/qeval), SAMPLES (128 calibration sequences of 512 tokens).
# Per step OUT/logs/STEP.json (the script's record), STEP.time (/usr/bin/time -v), STEP.out;
# check writes OUT/logs/check-NAME.{inspect,eval}.txt and the eval records OUT/logs/check-NAME.json;
# check-parent also evaluates the GGUF the parent came from with the same command.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${QEVAL_ARTIFACTS:-/work/cache/quantized-checkpoints/smollm2-135m}"
qeval="${QEVAL:-$root/build/qeval}"
wikitext="${WIKITEXT:-$root/../shared/data/text/wikitext-2-raw-v1/test.joined.txt}"
artifacts=(gptq-w4a16 awq-w4a16 fp8-dynamic w8a8-int8 nvfp4)
steps=("$@")
((${#steps[@]})) || steps=(parent "${artifacts[@]}" check)
mkdir -p "$out/logs"
gguf="$("$root/scripts/models" --path smollm2-135m)"
[[ -f "$gguf" ]] || "$root/scripts/models" --model smollm2-135m

check_parent() {
  # The parent as the GGUF it came from: the same command on both (the same tokens: the GGUF's
  # tokenizer), and the parent alone with the tokenizer beside it.
  local parent="$out/smollm2-f32"
  "$qeval" inspect "$parent" > "$out/logs/check-smollm2-f32.inspect.txt" 2>&1 || echo "inspect smollm2-f32: exit $?"
  "$qeval" eval -q --model "$parent" --data "$wikitext" --schemes full --max-windows 4 --seq-len 512 \
    > "$out/logs/check-smollm2-f32.own-tokenizer.txt" 2>&1 || echo "eval smollm2-f32 with its tokenizer.json: exit $?"
  local model
  for model in "$parent" "$gguf"; do
    "$qeval" eval -q --model "$model" --tokenizer "$gguf" --data "$wikitext" --schemes full --max-windows 4 \
      --seq-len 512 --out "$out/logs/check-$(basename "$model").json" > "$out/logs/check-$(basename "$model").eval.txt" 2>&1 \
      || echo "eval $model: exit $?"
  done
  python3 - "$out/logs/check-smollm2-f32.json" "$out/logs/check-$(basename "$gguf").json" <<'PY'
import json, sys
for path in sys.argv[1:]:
    p = json.load(open(path))["schemes"][0]["perplexity"]
    print(f"{path}: PPL {p['ppl']!r}, NLL {p['nll_mean']!r} over {p['tokens']} tokens")
PY
}

check_artifact() {
  # qeval reads the artifact, and evaluates it beside its parent. The parent's tokenizer.json is
  # refused by qeval (SmolLM2's vocabulary lacks 21 of the 256 byte symbols; README.md), so the
  # GGUF's tokenizer, the same vocabulary, is given.
  local art="$out/smollm2-$1" name="smollm2-$1"
  "$qeval" inspect "$art" > "$out/logs/check-$name.inspect.txt" 2>&1 || echo "inspect $name: exit $?"
  "$qeval" eval -q --model "$out/smollm2-f32" --tokenizer "$gguf" --data "$wikitext" --schemes full --max-windows 4 \
    --seq-len 512 --compare-checkpoint "$art" --out "$out/logs/check-$name.json" \
    > "$out/logs/check-$name.eval.txt" 2>&1 || echo "eval $name: exit $?"
  grep -E "^\| (full|smollm2)" "$out/logs/check-$name.eval.txt" | head -n 2 || tail -n 3 "$out/logs/check-$name.eval.txt"
}

for step in "${steps[@]}"; do
  case "$step" in
    check) check_parent; for a in "${artifacts[@]}"; do check_artifact "$a"; done; continue ;;
    check-parent) check_parent; continue ;;
    check-*) check_artifact "${step#check-}"; continue ;;
  esac
  echo "== $step ($(date -u +%FT%TZ))"
  /usr/bin/time -v -o "$out/logs/$step.time" \
    python3 "$root/results/quantized-checkpoints/make_smollm2_artifacts.py" "$step" --out "$out" \
      --gguf "$gguf" --samples "${SAMPLES:-128}" > "$out/logs/$step.out" 2>&1 || echo "$step: exit $? (see $out/logs/$step.out)"
  grep -E "Elapsed|Maximum resident" "$out/logs/$step.time" || true
done
