#!/usr/bin/env bash
# Issue 61 item 6: each format preset's forward speed against full precision's, measured in one
# evaluation (the record's per-scheme tokens/s: its forward and its head; statistics off), REPS
# times, with the CPU's flags and the load average before each run. Ratios, not thresholds.
#   bench/formats_speed.sh [MODEL (smollm2-135m)] [DATA (WikiText-2 test)] [REPS (2)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
model=${1:-smollm2-135m}
data=${2:-text/wikitext-2-raw-v1/test.joined.txt}
reps=${3:-2}
schemes=full,int8-moderate,fp8-e4m3,fp8-e4m3-tensor,fp8-e4m3-static,fp8-e5m2,mxfp8,mxfp6,mxfp4,mxfp4-weights,nvfp4,nvfp4-weights,int8-moderate-static
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w 'avx2\|avx512f\|avx512bw\|avx512_vnni\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "model $model, 8 windows of 512, --stats-for none; per-scheme tokens/s from the record"
for rep in $(seq 1 "$reps"); do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  /usr/bin/time -v -o "$work/time" "$qeval" eval -q --model "$model" --data "$data" --seq-len 512 --max-windows 8 \
    --seed 0 --stats-for none --schemes "$schemes" --out "$work/r.json" > /dev/null
  echo
  echo "run $rep (load average before: $load; peak RSS $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time") kB)"
  python3 - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {s["name"]: s for s in r["schemes"]}
def tps(s):
    t = s.get("timing", {})
    return t.get("tokens_per_second")
full = tps(rows["full"])
print("| scheme | tok/s | / full |")
print("|---|---:|---:|")
for name, s in rows.items():
    v = tps(s)
    print(f"| {name} | {v:.0f} | {v / full:.2f} |" if v and full else f"| {name} | ? | ? |")
PY
done
