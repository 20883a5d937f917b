#!/usr/bin/env bash
# Per-scheme speed of two qeval binaries on one evaluation, alternately, in one run: each scheme's
# tokens/s from its record (timing.tokens_per_second: its forward with statistics and its head),
# the record's total, the process's wall and peak RSS (/usr/bin/time -v), the load average before
# each run, and whether the two records agree bit for bit on every scheme's perplexity. With a
# binary that writes timings (common/phases.h), its phases too.
#
#   bench/scheme_speed_ab.sh OLD_QEVAL NEW_QEVAL MODEL DATA [SCHEMES] [SEQ (512)] [WINDOWS (8)] [REPS (2)] [EXTRA_ARGS...]
#
# Issue 50's comparison: SmolLM2-135M, 8 × 512 WikiText-2, full,int8-moderate,int8-vectorwise,
# statistics off (--stats-for none), on a quiet machine (no build beside it). Needs /usr/bin/time
# (Debian package time).
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,12p' "$0"; exit 2; }
old=$1 new=$2 model=$3 data=$4
schemes=${5:-full,int8-moderate,int8-vectorwise} seq=${6:-512} windows=${7:-8} reps=${8:-2}
shift $(( $# < 8 ? $# : 8 ))
extra=("$@")
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

run() {  # BINARY LABEL: one evaluation into $work/LABEL.json, wall and peak RSS into $work/LABEL.time
  /usr/bin/time -v -o "$work/$2.time" "$1" eval -q --model "$model" --data "$data" --seq-len "$seq" \
    --max-windows "$windows" --seed 0 --schemes "$schemes" --out "$work/$2.json" "${extra[@]}" > /dev/null
}

echo "# per-scheme speed, old vs new binary"
echo
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w 'avx2\|avx512f\|avx512_vnni\|avx_vnni\|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "model $model; $windows windows of $seq; schemes $schemes; extra: ${extra[*]:-none}"
echo
python3 - "$schemes" <<'EOF' > "$work/header"
import sys
s = sys.argv[1].split(",")
print("| rep | binary | " + " | ".join(f"{x} tok/s" for x in s) + " | record total s | process wall s | peak RSS MiB | load before |")
print("|---:|---|" + "---:|" * (len(s) + 3) + "---|")
EOF
cat "$work/header"
for rep in $(seq 1 "$reps"); do
  for which in old new; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    bin=$old; [ "$which" = new ] && bin=$new
    run "$bin" "$which-$rep"
    python3 - "$work/$which-$rep.json" "$work/$which-$rep.time" "$rep" "$which" "$load" <<'EOF'
import json, re, sys
r = json.load(open(sys.argv[1])); t = open(sys.argv[2]).read()
wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", t)
h, m, s = wall.groups(); secs = int(h or 0) * 3600 + int(m) * 60 + float(s)
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1)) / 1024
cells = " | ".join(f"{x['timing']['tokens_per_second']:.0f}" for x in r["schemes"])
print(f"| {sys.argv[3]} | {sys.argv[4]} | {cells} | {r['timing']['total_seconds']:.1f} | {secs:.1f} | {rss:.0f} | {sys.argv[5]} |")
EOF
  done
done
echo
python3 "$(dirname "$0")/ppl_equal.py" "$work/old-$reps.json" "$work/new-$reps.json"
python3 - "$work/old-$reps.json" "$work/new-$reps.json" <<'EOF'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:])
for label, r in (("old", old), ("new", new)):
    t = r.get("timings")
    if not t:
        continue
    phases = " · ".join(f"{k} {v:.2f}" for k, v in sorted(t["phases"].items(), key=lambda kv: -kv[1]) if v >= 0.005)
    print(f"\n{label} phases (s, of {t['total_s']:.2f}): {phases}")
    for name, p in t["schemes"].items():
        print(f"  {name}: " + " · ".join(f"{k} {v:.2f}" for k, v in p.items()))
EOF
