#!/usr/bin/env bash
# `qeval eval` on SmolLM2-135M for several --threads values (issue 34): tokens/s per scheme and
# whether every PPL is the same bits whatever the thread count. "default" runs without --threads
# (the cores this process may use). Prints the CPU's SIMD flags and the load average around each run.
#
#   bench/eval_threads_ab.sh [WINDOWS (8)] [THREADS... (default 2 1)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
windows="${1:-8}"
shift || true
list=("$@")
((${#list[@]} > 0)) || list=(default 2 1)
data="$("$qeval" data-dir)/text/wikitext-2-raw-v1/test.joined.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "# $(date -u +%FT%TZ), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "CPU SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|amx_int8' | tr '\n' ' ')"
for t in "${list[@]}"; do
  args=()
  [[ $t == default ]] || args=(--threads "$t")
  echo "load average before threads=$t: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$qeval" eval -q --model smollm2-135m --data "$data" --seq-len 512 --max-windows "$windows" --seed 0 \
    --schemes full,int8-moderate,int8-vectorwise,int8-coarse,w4-zeropoint --stats-for none "${args[@]}" \
    --out "$work/$t.json" >/dev/null
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work" "${list[@]}" <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
recs = [json.load(open(f"{work}/{n}.json")) for n in names]
for n, r in zip(names, recs):
    h = r["host"]
    print(f"threads={n}: torch_threads {h.get('torch_threads')}, blas_threads {h.get('blas_threads')}, "
          f"cores_available {h.get('cores_available')}")
print("\n| scheme | " + " | ".join(f"tok/s {n}" for n in names) + f" | × full ({names[0]}) | same PPL bits |")
print("|---|" + "---:|" * len(names) + "---:|---|")
full = recs[0]["schemes"][0]["timing"]["tokens_per_second"]
for i, s in enumerate(recs[0]["schemes"]):
    tps = [r["schemes"][i]["timing"]["tokens_per_second"] for r in recs]
    same = len({r["schemes"][i]["perplexity"]["ppl"] for r in recs}) == 1
    print(f"| {s['name']} | " + " | ".join(f"{x:.0f}" for x in tps) + f" | {tps[0] / full:.2f}× | {'yes' if same else 'NO'} |")
PY
