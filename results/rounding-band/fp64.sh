#!/usr/bin/env bash
# Is the band the size of a change of implementation? qeval's own float64 evaluation
# (`--dtype fp64`: every float rounding in float64) of the runs that run.sh made in float32 with
# their bands: the same model, text, windows and schemes, only the arithmetic different. Then the
# issue's own setting (Gemma-3-270M, C4, the first 4 windows of 512 tokens, documents joined with
# BOS) in float32 with K = 8 and in float64. Writes *-fp64.json / .md beside run.sh's records and
# fp64-vs-band.md, the table docs/rounding-band.md quotes. From the repository root:
#   results/rounding-band/fp64.sh      (~75 min on the 2-core Xeon: float64 GEMMs are OpenBLAS's)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/rounding-band"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
int8=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise
for model in gemma3-270m smollm2-135m; do
  "$root/scripts/models" --model $model
  for text in c4:text/c4/c4-en-validation-excerpt-1025.jsonl wikitext2:text/wikitext-2-raw-v1/test.joined.txt; do
    name=$model-${text%%:*}
    echo "== $name fp64 (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    "$qeval" eval --model $model --data "${text#*:}" --schemes $int8 --stats-for none --seq-len 512 --max-windows 8 \
      --seed 0 --threads 2 --dtype fp64 --out "$here/$name-fp64.json" -q > "$here/$name-fp64.md"
  done
done
for dtype in fp32 fp64; do
  band=()
  [[ $dtype == fp32 ]] && band=(--rounding-band 8)
  echo "== gemma3-270m-c4-4x512 $dtype (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  "$qeval" eval --model gemma3-270m --data text/c4/c4-en-validation-excerpt-1025.jsonl \
    --schemes full,int8-coarse,int8-moderate,int8-fine --stats-for none --seq-len 512 --max-windows 4 --separator bos \
    --threads 2 --dtype $dtype "${band[@]}" --out "$here/gemma3-270m-c4-4x512-$dtype.json" -q > "$here/gemma3-270m-c4-4x512-$dtype.md"
done
python3 "$here/fp64_vs_band.py" \
  smollm2-135m-wikitext2.json:smollm2-135m-wikitext2-fp64.json smollm2-135m-c4.json:smollm2-135m-c4-fp64.json \
  gemma3-270m-wikitext2.json:gemma3-270m-wikitext2-fp64.json gemma3-270m-c4.json:gemma3-270m-c4-fp64.json \
  gemma3-270m-c4-4x512-fp32.json:gemma3-270m-c4-4x512-fp64.json > "$here/fp64-vs-band.md"
