#!/usr/bin/env bash
# Issue 78 item 5: an 8B-shaped GPTQ and fine-grained FP8 artifact evaluated beside its parent in
# one run (`qeval eval --compare-checkpoint`), with the plan the memory planner chooses: peak RSS
# (GNU time), the phases, and each artifact's reading and dequantisation (its `read` phase in
# timings.schemes) against the parent's read pass (the run's `read` phase less the artifacts'),
# per layer read. Checkpoints are made by bench/make_llama_checkpoint.py --sparse and
# bench/make_quantized_artifact.py into a cache folder, never committed: the blocks are holes
# (zeros), so the numbers of such a model mean nothing; its times and memory do.
#
#   bench/quantized_artifact_speed.sh [build-dir] [shape]      shape: llama-3-8b (default), llama-3.2-1b
#   QEVAL_BENCH_DIR   where the checkpoints go (default ~/.cache/qeval/bench)
#   QEVAL_BENCH_WINDOWS (default 2) windows of QEVAL_BENCH_SEQ_LEN (default 128) tokens
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shape="${2:-llama-3-8b}"
qeval="$build/qeval"
cache="${QEVAL_BENCH_DIR:-$HOME/.cache/qeval/bench}"
windows="${QEVAL_BENCH_WINDOWS:-2}"
seq_len="${QEVAL_BENCH_SEQ_LEN:-128}"
parent="$cache/$shape-sparse"
mkdir -p "$cache"
[[ -f "$parent/config.json" ]] || python3 "$root/bench/make_llama_checkpoint.py" --shape "$shape" --sparse --out "$parent" >&2
for method in gptq fp8-block; do
  [[ -f "$parent-$method/config.json" ]] ||
    python3 "$root/bench/make_quantized_artifact.py" --parent "$parent" --method "$method" --out "$parent-$method" >&2
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "# An artifact beside its parent at the $shape shape: $(date -u +%Y-%m-%dT%H:%MZ), qeval $(git -C "$root" rev-parse --short HEAD)"
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; flags: $(grep -m1 flags /proc/cpuinfo | grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|amx_int8' | tr '\n' ' ')"
echo "# memory: $(free -g | awk '/Mem:/ {print $2}') GiB; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# files on disk (allocated / apparent): parent $(du -sh "$parent" | cut -f1) / $(du -sh --apparent-size "$parent" | cut -f1), gptq $(du -sh "$parent-gptq" | cut -f1) / $(du -sh --apparent-size "$parent-gptq" | cut -f1), fp8-block $(du -sh "$parent-fp8-block" | cut -f1) / $(du -sh --apparent-size "$parent-fp8-block" | cut -f1)"
cmd=("$qeval" eval --model "$parent" --data "$parent.tokens.bin" --seq-len "$seq_len" --max-windows "$windows"
     --schemes full --stats-for none --compare-checkpoint "$parent-gptq" --compare-checkpoint "$parent-fp8-block"
     --artifact-weights-only --out "$work/record.json")
echo "# command: ${cmd[*]}"
/usr/bin/time -v "${cmd[@]}" > "$work/stdout" 2> "$work/stderr" || { cat "$work/stderr" >&2; exit 1; }
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
grep -E '^plan:' "$work/stderr" || true
python3 - "$work/record.json" "$work/stderr" <<'EOF'
import json, re, sys
record = json.load(open(sys.argv[1]))
stderr = open(sys.argv[2]).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr).group(1)) * 1024
wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", stderr).group(1)
t = record["timings"]
plan = record["plan"]
print(f"\npeak RSS {rss / 2**30:.2f} GiB (plan estimate {plan.get('estimated_peak_host_bytes', 0) / 2**30:.2f} GiB), "
      f"wall {wall}, plan {plan.get('name')}, chunk {plan.get('chunk_windows')}\n")
print("| phase | seconds |\n|---|---:|")
for name, s in sorted(t["phases"].items(), key=lambda x: -x[1]):
    if s >= 0.05:
        print(f"| {name} | {s:.1f} |")
# The parent's read pass: the run's read and convert phases less the artifacts' own.
own = lambda v: v.get("read", 0.0) + v.get("convert", 0.0)
parent_read = t["phases"]["read"] + t["phases"]["convert"] - sum(own(v) for v in t["schemes"].values())
print("\n| scheme | read + decode (s) | ÷ the parent's read pass | compare with the parent (s) | forward (s) | head (s) | bytes / parameter |")
print("|---|---:|---:|---:|---:|---:|---:|")
for s in record["schemes"]:
    name = s["name"]
    mine = t["schemes"][name]
    a = s["description"].get("artifact")
    read = own(mine) if a else parent_read
    bpw = a.get("bytes_per_weight") if a else None
    compare = f"{mine['quantize']:.1f}" if a else ""
    print(f"| {name} | {read:.1f} | {read / parent_read:.2f}× | {compare} | {mine['forward']:.1f} | {mine['head']:.1f} | "
          f"{'' if bpw is None else f'{bpw:.3f}'} |")
EOF
