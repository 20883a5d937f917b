#!/usr/bin/env bash
# The SmolLM2-135M showcase (results/README.md, "A real model"): every preset, statistics for every scheme and
# the Figure-1 pictures, on WikiText-2 test and the C4 excerpt, 32 windows of 512 tokens drawn with
# seed 0 from each. Needs scripts/models (the GGUF from PyPI) and the shared data folder.
#   results/real/smollm2-135m/run.sh            (from the repository root; ~15 min on 2 cores)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
here="$root/results/real/smollm2-135m"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
"$root/scripts/models"
schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128,int8-coarse-keep1,int8-moderate-keep1
for text in wikitext2:text/wikitext-2-raw-v1/test.joined.txt c4:text/c4/c4-en-validation-excerpt-1025.jsonl; do
  name=${text%%:*}
  "$qeval" eval --model smollm2-135m --data "${text#*:}" --schemes "$schemes" --stats-for all \
    --seq-len 512 --max-windows 32 --seed 0 --threads 2 \
    --plots "$here/figures-$name" --plots-colour-scale log --out "$here/$name.json" -q > "$here/$name.md"
done
"$qeval" compare "$here/wikitext2.json" > "$here/compare-wikitext2.md"
"$qeval" compare "$here/c4.json" > "$here/compare-c4.md"
