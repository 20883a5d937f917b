#!/usr/bin/env bash
# GPTQ's solve at Llama-3-8B's shapes, qeval against llm-compressor 0.14's quantize_weight in the
# same run (issue 77 item 7): per shape the seconds of each and the ratio llm-compressor / qeval
# (> 1: qeval is faster), then one layer's seven solves (q, k, v, o, gate, up, down), with the
# load average and the CPU flags. Measures; never passes or fails.
#
#   bench/gptq_solve_speed.sh BUILD_DIR PYTHON_WITH_LLMCOMPRESSOR [THREADS (0: default)] [TOKENS (512)] [SHAPES]
#
# THREADS 0: every core for both. BUILD_DIR holds bench/gptq_solve_bench (QEVAL_TARGETS=gptq_solve_bench scripts/build ...);
# PYTHON is a Python with torch 2.x and llmcompressor==0.14.0 (the oracles' virtual environment).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,11p' "$0"; exit 2; }
build=$1 python=$2 threads=${3:-0} tokens=${4:-512}
shapes=${5:-4096x4096,1024x4096,14336x4096,4096x14336}
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bench="$build/bench/gptq_solve_bench"
[ -x "$bench" ] || bench="$build/gptq_solve_bench"
echo "# GPTQ solve at Llama-3-8B's shapes: qeval vs llm-compressor 0.14 (same run)"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads ${threads} (0: each library's default); $tokens calibration rows"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" --threads "$threads" --tokens "$tokens" --shapes "$shapes" | tee "$work/qeval.out" | grep -v '^solve'
echo "load average between: $(cut -d' ' -f1-3 /proc/loadavg)"
"$python" "$here/gptq_solve_llmc.py" --threads "$([ "$threads" = 0 ] && nproc || echo "$threads")" --tokens "$tokens" --shapes "$shapes" > "$work/llmc.out"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/qeval.out" "$work/llmc.out" <<'PY'
import sys
def read(p):
    return {(int(n), int(k)): float(s) for tag, n, k, s in (l.split() for l in open(p) if l.startswith("solve "))}
q, l = read(sys.argv[1]), read(sys.argv[2])
print("\n| N x K | qeval s | llm-compressor s | llm-compressor / qeval |\n|---|---:|---:|---:|")
for shape in q:
    print(f"| {shape[0]} x {shape[1]} | {q[shape]:.2f} | {l[shape]:.2f} | {l[shape] / q[shape]:.2f} |")
layer = {(4096, 4096): 2, (1024, 4096): 2, (14336, 4096): 2, (4096, 14336): 1}
if all(s in q and s in l for s in layer):
    tq = sum(c * q[s] for s, c in layer.items()); tl = sum(c * l[s] for s, c in layer.items())
    print(f"| one 8B layer (7 solves) | {tq:.1f} | {tl:.1f} | {tl / tq:.2f} |")
    print(f"\n32 layers: qeval {32 * tq / 60:.1f} min of solves, llm-compressor {32 * tl / 60:.1f} min")
PY
