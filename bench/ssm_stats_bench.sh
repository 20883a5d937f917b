#!/usr/bin/env bash
# What state-space statistics cost (issue 54): `qeval eval` of the full-precision row on a
# Mamba-2-shaped and a Mamba-shaped random model (bench/make_ssm_shaped.py), without statistics
# (--stats-for none) and with every statistic (--stats-for full: hidden states, implicit attention,
# selection), for two binaries in the same run (e.g. the commit before the blocked implicit attention
# and this one), alternating, `repeats` times each. Prints per run: tokens/s of the full row, its
# statistics phase, and peak RSS (/usr/bin/time -v). Not a test: it measures.
#
#   bench/ssm_stats_bench.sh BEFORE_QEVAL AFTER_QEVAL DIR [SEQ_LEN] [WINDOWS] [REPEATS]
# MODELS="mamba2-shaped-hf" limits the models; EXTRA="--mamba-channels 64" is added to the after binary's
# statistics runs (an option the before binary may not have).
set -euo pipefail
before="$1"; after="$2"; dir="$3"; seq_len="${4:-2048}"; windows="${5:-2}"; repeats="${6:-2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
[[ -f "$dir/tokens.bin" ]] || python3 "$root/bench/make_ssm_shaped.py" "$dir"
echo "# $(date -u +%FT%TZ) $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); flags: $(grep -m1 -o -w -E 'avx512f|avx512_vnni|avx2|amx_int8' /proc/cpuinfo | sort -u | xargs)"
echo "# seq_len $seq_len x $windows windows; each line: model, binary, --stats-for, tok/s of the full row, phases, peak RSS MB, load"
for model in ${MODELS:-mamba2-shaped-hf mamba-shaped-hf}; do
  for r in $(seq "$repeats"); do
    for which in before after; do
      bin=$before; extra=()
      [[ $which == after ]] && { bin=$after; read -r -a extra <<< "${EXTRA:-}"; }
      for stats in none full; do
        [[ $stats == none ]] && extra=()
        out="$dir/$model.$which.$stats.json"
        /usr/bin/time -v "$bin" eval -q --model "$dir/$model" --data "$dir/tokens.bin" --token-dtype uint16 \
          --seq-len "$seq_len" --max-windows "$windows" --schemes full --stats-for "$stats" "${extra[@]}" --out "$out" \
          >/dev/null 2>"$dir/time.txt"
        rss=$(awk -F: '/Maximum resident/ {printf "%.0f", $2/1024}' "$dir/time.txt")
        python3 - "$out" "$model" "$which" "$stats" "$rss" "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["schemes"][0]
phases = r["timings"]["phases"]
print(sys.argv[2], sys.argv[3], sys.argv[4], f"{s['timing']['tokens_per_second']:.1f}",
      f"forward {phases['forward']:.2f} s, statistics {phases['statistics']:.2f} s", sys.argv[5], sys.argv[6])
EOF
      done
    done
  done
done
