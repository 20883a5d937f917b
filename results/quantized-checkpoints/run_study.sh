#!/usr/bin/env bash
# Issue 78 item 7: SmolLM2-135M's llm-compressor artifacts (made by make_smollm2_artifacts.py)
# beside their parent and qeval's own presets of the same formats, in one record per dataset:
#   rtn     schemes/w4-zeropoint-g64   beside  (nothing: llm-compressor's W4A16 is GPTQ)
#   gptq    schemes/gptq-w4-g64        beside  smollm2-gptq-w4a16   (GPTQModifier, W4A16)
#   awq     schemes/awq-w4-g64         beside  smollm2-awq-w4a16    (AWQModifier, W4A16_ASYM)
# The 4-bit schemes use groups of 64, as the artifacts do: llm-compressor refuses groups of 128 on
# SmolLM2's 576-wide inputs.
#   fp8     fp8-e4m3                   beside  smollm2-fp8-dynamic  (FP8_DYNAMIC)
#   int8    int8-vectorwise            beside  smollm2-w8a8-int8    (W8A8: int8 channel weights, int8 token activations)
#   nvfp4   nvfp4                      beside  smollm2-nvfp4        (NVFP4)
# qeval's calibrated presets calibrate on the same C4 excerpt the artifacts were calibrated on.
#
#   results/quantized-checkpoints/run_study.sh [build-dir]
#   QEVAL_STUDY_ARTIFACTS   the folder make_smollm2_artifacts.py wrote (default /work/cache/quantized-checkpoints/smollm2-135m)
#   QEVAL_STUDY_WINDOWS     evaluated windows of 512 tokens per dataset (default 16)
#   QEVAL_STUDY_CALIBRATION calibration windows of 512 tokens for gptq / awq (default 128)
#   QEVAL_STUDY_OUT         where the records go (default results/quantized-checkpoints/records)
#   QEVAL_STUDY_SCHEMES     qeval's schemes (default: full and the six above)
#   QEVAL_STUDY_SETS        datasets (default "wikitext-2 c4")
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
qeval="$build/qeval"
art="${QEVAL_STUDY_ARTIFACTS:-/work/cache/quantized-checkpoints/smollm2-135m}"
windows="${QEVAL_STUDY_WINDOWS:-16}"
calibration="${QEVAL_STUDY_CALIBRATION:-128}"
out="${QEVAL_STUDY_OUT:-$root/results/quantized-checkpoints/records}"
schemes="$root/results/quantized-checkpoints/schemes"
data="$("$qeval" data-dir)"
tokenizer="$("$root/scripts/models" --path smollm2-135m)"  # the GGUF the parent was made from holds SmolLM2's tokenizer
mkdir -p "$out"
compare=()
for a in smollm2-gptq-w4a16 smollm2-awq-w4a16 smollm2-fp8-dynamic smollm2-w8a8-int8 smollm2-nvfp4; do
  [[ -f "$art/$a/config.json" ]] && compare+=(--compare-checkpoint "$art/$a")
done
echo "# $(date -u +%Y-%m-%dT%H:%MZ), qeval $(git -C "$root" rev-parse --short HEAD); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_int8' | tr '\n' ' ')"
# C4's windows are drawn across the excerpt (--seed 1): the artifacts were calibrated on its first
# documents, which its first windows would be (qeval's own calibration never overlaps what it evaluates).
study_schemes="${QEVAL_STUDY_SCHEMES:-full,$schemes/w4-zeropoint-g64.json,$schemes/gptq-w4-g64.json,$schemes/awq-w4-g64.json,fp8-e4m3,int8-vectorwise,nvfp4}"
for set in wikitext-2:text/wikitext-2-raw-v1/test.joined.txt: c4:text/c4/c4-en-validation-excerpt-1025.jsonl:1; do
  name="${set%%:*}"
  [[ " ${QEVAL_STUDY_SETS:-wikitext-2 c4} " == *" $name "* ]] || continue
  rest="${set#*:}"
  file="${rest%%:*}"
  seed="${rest#*:}"
  echo "# $name: load average before $(cut -d' ' -f1-3 /proc/loadavg)"
  cmd=("$qeval" eval -q --model "$art/smollm2-f32" --tokenizer "$tokenizer" --data "$data/$file" --seq-len 512 --max-windows "$windows" ${seed:+--seed "$seed"}
       --schemes "$study_schemes"
       --calibration-data "$data/text/c4/c4-en-validation-excerpt-1025.jsonl" --calibration-windows "$calibration"
       --stats-for all "${compare[@]}" --out "$out/$name.json")
  echo "# command: ${cmd[*]}"
  /usr/bin/time -v "${cmd[@]}" > "$out/$name.md" 2> "$out/$name.time"
  echo "# $name: load average after $(cut -d' ' -f1-3 /proc/loadavg); peak RSS $(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$out/$name.time" | grep -o '[0-9]*$') kB; wall $(grep -o 'Elapsed (wall clock) time (h:mm:ss or m:ss): .*' "$out/$name.time" | cut -d' ' -f8)"
  "$qeval" compare "$out/$name.json" > "$out/$name.compare.md"
done
