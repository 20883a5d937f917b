#!/usr/bin/env bash
# Peak memory against model size and scheme count (issue 42, DESIGN.md §11). For each model and
# scheme count, `qeval eval` runs once with the plan it chooses (auto) and once forced to keep
# every layer resident (what the window-major evaluator did: every scheme's whole model in fp32
# memory), and prints peak RSS (GNU time's %M, mapped file pages included), wall time, the plan
# line and the load average. The Llama-shaped checkpoints are random F16 safetensors made by
# bench/make_llama_checkpoint.py into a cache folder, never committed.
#
#   bench/memory_bench.sh [build-dir] [models...]     models: smollm2 llama-3.2-1b llama-3-8b (default: all)
#   QEVAL_BENCH_DIR   where the checkpoints go (default ~/.cache/qeval/bench)
#   QEVAL_BENCH_RESIDENT=0  skip the resident runs (they need 4 bytes a parameter per scheme)
#   QEVAL_BENCH_SCHEMES     scheme counts to run (default "1 4 7")
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
qeval="$build/qeval"
models=("$@")
((${#models[@]})) || models=(smollm2 llama-3.2-1b llama-3-8b)
cache="${QEVAL_BENCH_DIR:-$HOME/.cache/qeval/bench}"
data="$("$qeval" data-dir)"
presets=(full int8-coarse int8-moderate int8-fine int8-vectorwise w4-zeropoint w4-zeropoint-g128)
schemes_of() { local IFS=,; case $1 in 1) echo full ;; 4) echo "full,int8-moderate,int8-fine,w4-zeropoint" ;; 7) echo "${presets[*]}" ;; esac; }

echo "# qeval memory benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_vnni|amx_int8' | tr '\n' ' ')"
echo "# memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
echo
echo "| model | parameters | schemes | plan | peak RSS | wall | plan chosen | load |"
echo "|---|---:|---:|---|---:|---:|---|---|"
run() {  # model-label params schemes plan-arg args...
  local label=$1 params=$2 n=$3 plan=$4
  shift 4
  local log
  log=$(mktemp)
  local start end
  start=$(date +%s.%N)
  if /usr/bin/time -v "$qeval" eval --schemes "$(schemes_of "$n")" --plan "$plan" "$@" >"$log.out" 2>"$log"; then
    end=$(date +%s.%N)
    local rss chosen
    rss=$(awk '/Maximum resident set size/ {printf "%.2f GiB", $6 / 1048576}' "$log")
    chosen=$(grep -m1 '^plan:' "$log" | cut -c7- | cut -d';' -f1)
    printf "| %s | %s | %s | %s | %s | %.0f s | %s | %s |\n" "$label" "$params" "$n" "$plan" "$rss" "$(echo "$end - $start" | bc)" \
      "$chosen" "$(cut -d' ' -f1-3 /proc/loadavg)"
  else
    printf "| %s | %s | %s | %s | refused or failed: %s | | | %s |\n" "$label" "$params" "$n" "$plan" \
      "$(grep -v '^\s' "$log" | grep -m1 -i -E 'error|refus|fits' | cut -c1-160)" "$(cut -d' ' -f1-3 /proc/loadavg)"
  fi
  rm -f "$log" "$log.out"
}
for m in "${models[@]}"; do
  case $m in
    smollm2)
      model=smollm2-135m
      args=(--model "$model" --data "$data/text/wikitext-2-raw-v1/test.joined.txt" --seq-len 512 --max-windows 4)
      params=135M ;;
    llama-3.2-1b | llama-3-8b)
      dir="$cache/$m"
      [[ -f "$dir/config.json" ]] || /usr/bin/python3 "$root/bench/make_llama_checkpoint.py" --shape "$m" --out "$dir" >&2
      args=(--model "$dir" --data "$dir.tokens.bin" --token-dtype uint32 --seq-len 128 --max-windows 1)
      params=$([[ $m == llama-3-8b ]] && echo 8.0B || echo 1.24B) ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
  for n in ${QEVAL_BENCH_SCHEMES:-1 4 7}; do
    run "$m" "$params" "$n" auto "${args[@]}"
    [[ "${QEVAL_BENCH_RESIDENT:-1}" == 0 ]] || run "$m" "$params" "$n" resident "${args[@]}"
  done
done
