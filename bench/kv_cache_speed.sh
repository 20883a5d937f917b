#!/usr/bin/env bash
# Issue 62 item 5: a quantised KV cache's cost. Each KV preset's forward speed against full
# precision's, measured in the same evaluation (the record's per-scheme tokens/s: forward and
# head; statistics off), REPS times, with the load average before each run. The KV schemes differ
# from full precision only by the cache's quantise-dequantise of K and V in every attention layer,
# so 1 − full/kv tok/s ratio is the share of a KV scheme's time spent quantising the cache.
#   bench/kv_cache_speed.sh [MODEL (smollm2-135m)] [DATA (WikiText-2 test)] [REPS (2)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
model=${1:-smollm2-135m}
data=${2:-text/wikitext-2-raw-v1/test.joined.txt}
reps=${3:-2}
schemes=${SCHEMES:-full,kv-int8,kv-fp8,kv-q8_0,kv-q4_0,kv-int4,kv-q4_0-keep1}
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w 'avx2\|avx512f\|avx512bw' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "model $model, 8 windows of 512, --stats-for none; per-scheme tokens/s from the record"
for rep in $(seq 1 "$reps"); do
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  "$qeval" eval -q --model "$model" --data "$data" --seq-len 512 --max-windows 8 \
    --seed 0 --stats-for none --schemes "$schemes" --out "$work/r.json" > /dev/null
  echo
  echo "run $rep (load average before: $load)"
  python3 - "$work/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {s["name"]: s for s in r["schemes"]}
def tps(s):
    return s.get("timing", {}).get("tokens_per_second")
full = tps(rows["full"])
print("| scheme | PPL | tok/s | / full | KV quantisation share of the scheme's time |")
print("|---|---:|---:|---:|---:|")
for name, s in rows.items():
    v = tps(s)
    ppl = s["perplexity"]["ppl"]
    share = "—" if name == "full" else f"{100 * (1 - v / full):.1f} %"
    print(f"| {name} | {ppl:.4f} | {v:.0f} | {v / full:.3f} | {share} |")
PY
done
