#!/usr/bin/env bash
# Issue 61's tables: the formats users ship beside the seven seed presets, on real models.
# SmolLM2-135M (and, with MODELS including gemma3-270m, Gemma-3-270M), WikiText-2 test and the C4
# excerpt, 8 windows of 512 tokens (seed 0), every format preset plus the seven existing ones,
# ΔPPL ± se ± band (--rounding-band 4) and the statistics of every scheme; then the first-token
# question: fp8-e4m3-static and mxfp4 with and without the first position kept (the -keep1 presets).
# 20 schemes with 4 band variants each are 77 quantised copies of the model: every format layer
# holds its dequantised float32 weight, so a resident plan would hold ~22 GB (measured: killed for
# memory at 21.6 GB on the 24 GB machine). --max-memory 8G (MAX_MEMORY) makes the planner stream
# the layers instead, one layer of every scheme at a time, which costs no extra quantisation at
# 8 windows (one chunk).
# Needs scripts/models (the GGUFs from PyPI) and the shared data folder. From the repository root:
#   results/formats/run.sh                           SmolLM2, both texts
#   MODELS="smollm2-135m gemma3-270m" TEXTS=wikitext2 results/formats/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/formats"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
models=${MODELS-smollm2-135m}  # MODELS= runs the pair alone
texts=${TEXTS-wikitext2 c4}
band=${BAND:-4}
seed_presets=int8-fine,int8-moderate,int8-coarse,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128
format_presets=fp8-e4m3,fp8-e4m3-tensor,fp8-e4m3-static,fp8-e4m3-static-keep1,fp8-e5m2,mxfp8,mxfp6,mxfp4,mxfp4-keep1,mxfp4-weights,nvfp4,nvfp4-weights,int8-moderate-static
declare -A data=([wikitext2]=text/wikitext-2-raw-v1/test.joined.txt [c4]=text/c4/c4-en-validation-excerpt-1025.jsonl)
for model in $models; do "$root/scripts/models" --model "$model"; done
for model in $models; do
  for text in $texts; do
    name=$model-$text
    echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)" >&2
    /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$model" --data "${data[$text]}" \
      --schemes "full,$seed_presets,$format_presets" --stats-for all --rounding-band "$band" \
      --seq-len 512 --max-windows 8 --seed 0 --max-memory "${MAX_MEMORY:-8G}" --out "$here/$name.json" -q > "$here/$name.md"
    grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
    gzip -9 -f "$here/$name.json"  # 9 MB of per-window rows and statistics; gunzip -k to read it with qeval
  done
done
# PAIRS (default: the d-256 seed-0 pair of results/train/mix) evaluates the Adam / OrthoAdam pair
# the same way on its own held-out text (configs/train/mix.py's mix-heldout.txt, each run's own window: 128 here,
# the first PAIR_WINDOWS (512) of them): does lower kurtosis help the formats as it helps int8-coarse?
# (PAIRS= skips it.)
pairs=${PAIRS-A-d256-s0-10k B-d256-s0-10k}
if [ -n "$pairs" ]; then
  # shellcheck source=configs/train/mix-recipes.sh
  source "$root/configs/train/mix-recipes.sh"
  mix_heldout "${QEVAL_DATA_DIR:-$root/../shared/data}"
  # The pair's checkpoints hold no tokenizer: they were trained with stories260K's (configs/train/mix-run.sh).
  tokenizer="${QEVAL_DATA_DIR:-$root/../shared/data}/models/stories260K/tok512.model"
  for run in $pairs; do
    mix_eval_window "$root/results/train/mix/$run"
    name=pair-$run
    echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)" >&2
    /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$root/results/train/mix/$run" --tokenizer "$tokenizer" \
      --data "$MIX_HELDOUT" --schemes "full,$seed_presets,$format_presets" --stats-for all \
      --rounding-band "$band" "${MIX_WINDOW[@]}" --max-windows "${PAIR_WINDOWS:-512}" --seed 0 \
      --out "$here/$name.json" -q > "$here/$name.md"
    grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
    gzip -9 -f "$here/$name.json"
  done
fi
