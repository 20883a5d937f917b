#!/usr/bin/env bash
# Issue 77's study on SmolLM2-135M: round to nearest vs GPTQ vs AWQ at 4 (and 3) bits, and
# llama.cpp's types with and without an importance matrix — paired ΔNLL ± se, KL, top-1 agreement —
# with the phases and peak RSS of each run. Each calibrated preset solves on its
# CALIBRATION_WINDOWS calibration windows of 512 tokens (the windows after the evaluated ones,
# never evaluated), layer by layer on its own quantised outputs (docs/calibrated.md). The same
# evaluated windows in every part (--seed 0), so every row is paired with the same full precision.
# Parts:
#   gptq     full, w4-zeropoint, w4-zeropoint-g128, gptq-w4, gptq-w4-g128, gptq-w4-g128-desc
#   others   full, int8-mixed (its outlier channels, |x| >= 6, beside AWQ's largest scales), awq-w4-g128,
#            gptq-w3-g128, gguf-q4_k_m, gguf-q4_0, gguf-iq4_nl
#   awq      full, int8-mixed, awq-w4-g128: AWQ again after 13a9188 (each layer searched on the folded
#            full-precision outputs before it, as llm-compressor); supersedes the others part's AWQ row
#   imatrix  full, gguf-q4_k_m, gguf-q4_0, gguf-iq4_nl with the C4 importance matrix qeval collected
#            (results/imatrix/smollm2-135m-c4.imatrix.gguf; docs/calibrated.md says how)
#   pair     the Adam / OrthoAdam + softmax-1 pair of results/train/mix (d 256, seed 0, GPT-2 style: AWQ's
#            mappings do not apply) on its own held-out text, PAIR_WINDOWS (512) windows of its own 128
#            tokens: full, w4-zeropoint, w4-zeropoint-g128, gptq-w4, gptq-w4-g128, gptq-w3-g128
# Needs scripts/models (SmolLM2 from PyPI) and the shared data folder. From the repository root:
#   results/calibrated/run.sh                                   the committed run (16 windows, 32 calibration windows)
#   PARTS=gptq TEXTS="wikitext2 c4" WINDOWS=64 CALIBRATION_WINDOWS=128 results/calibrated/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/calibrated"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
models=${MODELS-smollm2-135m}
texts=${TEXTS-wikitext2}
parts=${PARTS-gptq others imatrix}
windows=${WINDOWS:-16}
calibration_windows=${CALIBRATION_WINDOWS:-32}
declare -A data=([wikitext2]=text/wikitext-2-raw-v1/test.joined.txt [c4]=text/c4/c4-en-validation-excerpt-1025.jsonl)
declare -A schemes=(
  [gptq]=full,w4-zeropoint,w4-zeropoint-g128,gptq-w4,gptq-w4-g128,gptq-w4-g128-desc
  [others]=full,int8-mixed,awq-w4-g128,gptq-w3-g128,gguf-q4_k_m,gguf-q4_0,gguf-iq4_nl
  [awq]=full,int8-mixed,awq-w4-g128
  [imatrix]=full,gguf-q4_k_m,gguf-q4_0,gguf-iq4_nl)
declare -A extra=(
  [gptq]="--calibration-windows $calibration_windows"
  [others]="--calibration-windows $calibration_windows"
  [awq]="--calibration-windows $calibration_windows"
  [imatrix]="--imatrix $root/results/imatrix/smollm2-135m-c4.imatrix.gguf")
machine() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; $(grep -o -w -E 'avx2|avx512f|avx512_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"; }
if [[ " $parts " == *" pair "* ]]; then
  # shellcheck source=configs/train/mix-recipes.sh
  source "$root/configs/train/mix-recipes.sh"
  mix_heldout "${QEVAL_DATA_DIR:-$root/../shared/data}"
  # The pair's checkpoints hold no tokenizer: they were trained with stories260K's (configs/train/mix-run.sh).
  tokenizer="${QEVAL_DATA_DIR:-$root/../shared/data}/models/stories260K/tok512.model"
  for run in A-d256-s0-10k B-d256-s0-10k; do
    mix_eval_window "$root/results/train/mix/$run"
    name=pair-$run
    echo "== $name ($(machine))" | tee "$here/$name.machine" >&2
    /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$root/results/train/mix/$run" --tokenizer "$tokenizer" \
      --data "$MIX_HELDOUT" --schemes full,w4-zeropoint,w4-zeropoint-g128,gptq-w4,gptq-w4-g128,gptq-w3-g128 \
      "${MIX_WINDOW[@]}" --max-windows "${PAIR_WINDOWS:-512}" --seed 0 --calibration-windows "$calibration_windows" \
      --out "$here/$name.json" -q > "$here/$name.md"
    grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
    gzip -9 -f "$here/$name.json"
  done
  parts=${parts//pair/}
fi
for model in $models; do "$root/scripts/models" --model "$model"; done
for model in $models; do
  for text in $texts; do
    for part in $parts; do
      name=$model-$text-$part
      echo "== $name ($(machine))" | tee "$here/$name.machine" >&2
      # shellcheck disable=SC2086
      /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$model" --data "${data[$text]}" \
        --schemes "${schemes[$part]}" --seq-len 512 --max-windows "$windows" --seed 0 ${extra[$part]} \
        --out "$here/$name.json" -q > "$here/$name.md"
      grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
      gzip -9 -f "$here/$name.json"
    done
  done
done
