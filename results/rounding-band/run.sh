#!/usr/bin/env bash
# Issue 53's measured bands: SmolLM2-135M and Gemma-3-270M, WikiText-2 test and the C4 excerpt, 8
# windows of 512 tokens (seed 0), each quantised scheme with 8 rounding variants (--rounding-band 8,
# ε = 2^-22), statistics off. SmolLM2 runs every preset. Gemma runs full precision and the int8
# presets: its 262k-token head makes each scheme cost 5 times SmolLM2's on a 2-core CPU, and a
# 4-bit weight-only scheme quantises no activation, so its band is float rounding alone (below 1e-7
# on SmolLM2 and stories260K). Needs scripts/models (both GGUFs from PyPI) and the shared data
# folder. From the repository root:
#   results/rounding-band/run.sh            (~45 min on the 2-core Xeon)
#   MODELS=gemma3-270m results/rounding-band/run.sh    (one model)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/rounding-band"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
models=${MODELS:-smollm2-135m gemma3-270m}
for model in $models; do "$root/scripts/models" --model $model; done
for model in $models; do
  schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128
  [[ $model == gemma3-270m ]] && schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise
  for text in c4:text/c4/c4-en-validation-excerpt-1025.jsonl wikitext2:text/wikitext-2-raw-v1/test.joined.txt; do
    name=$model-${text%%:*}
    echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$qeval" eval --model $model --data "${text#*:}" --schemes "$schemes" --stats-for none --rounding-band 8 \
      --seq-len 512 --max-windows 8 --seed 0 --threads 2 --out "$here/$name.json" -q > "$here/$name.md"
  done
done
records=()
for f in smollm2-135m-wikitext2 smollm2-135m-c4 gemma3-270m-wikitext2 gemma3-270m-c4; do
  [[ -f $here/$f.json ]] && records+=("$here/$f.json")
done
"$qeval" compare --allow-protocol-mismatch "${records[@]}" > "$here/compare.md"
