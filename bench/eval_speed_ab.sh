#!/usr/bin/env bash
# Two qeval binaries on the same evaluation, alternately, in one run: tokens/s of each and the
# ratio NEW / OLD, and whether their records agree bit for bit on every scheme's perplexity.
# For a kernel change that must not change results (e.g. the int8 `float_exact` backend against
# the `float64` one it replaced, on a CPU where oneDNN's int8 is not exact).
#
#   bench/eval_speed_ab.sh OLD_QEVAL NEW_QEVAL MODEL DATA [SEQ (128)] [WINDOWS (200)] [REPS (2)]
#
# One thread (--threads 1, OPENBLAS_NUM_THREADS=1), every int8 scheme and w4. Run on a quiet
# machine (no build or training beside it); the load average is printed with each figure.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,8p' "$0"; exit 2; }
old=$1 new=$2 model=$3 data=$4 seq=${5:-128} windows=${6:-200} reps=${7:-2}
schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1

run() {  # BINARY LABEL REP: seconds of one evaluation
  local start end
  start=$(date +%s.%N)
  "$1" eval --model "$model" --data "$data" --seq-len "$seq" --max-windows "$windows" --schemes "$schemes" \
    --threads 1 --out "$work/$2.json" > /dev/null 2> "$work/$2.log"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { print b - a }'
}

echo "# eval speed, old vs new binary"
echo
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); model $model; $windows windows of $seq; schemes $schemes; one thread"
echo
echo "| rep | old s | new s | new / old speed | load average before |"
echo "|---:|---:|---:|---:|---|"
tokens=$((windows * seq))
for rep in $(seq 1 "$reps"); do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  t_old=$(run "$old" old "$rep")
  t_new=$(run "$new" new "$rep")
  awk -v r="$rep" -v o="$t_old" -v n="$t_new" -v t="$tokens" -v l="$load" \
    'BEGIN { printf "| %d | %.1f (%.0f tok/s) | %.1f (%.0f tok/s) | %.2f× | %s |\n", r, o, t / o, n, t / n, o / n, l }'
done
echo
python3 "$(dirname "$0")/ppl_equal.py" "$work/old.json" "$work/new.json"
python3 - "$work/old.json" "$work/new.json" <<'EOF'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:])
backend = lambda r: next((s["description"]["kernels"]["int8_gemm"] for s in r["schemes"]
                           if isinstance(s["description"], dict) and "int8_gemm" in s["description"].get("kernels", {})), "?")
print(f"\nint8_gemm: old {backend(old)}, new {backend(new)}")
EOF
