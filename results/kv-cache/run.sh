#!/usr/bin/env bash
# Issue 62's tables: every quantised-KV-cache preset on real models, ΔPPL ± se ± band
# (--rounding-band BAND) with the sink statistics of the attention that read the quantised cache
# (--stats-for all), and each layer's K / V error (first position apart) in the JSON records.
# SmolLM2-135M (and Gemma-3-270M with MODELS), WikiText-2 test, WINDOWS windows of 512 (seed 0;
# 32 by default, so that keep-or-not differences can stand above se and band: on 4 or 8 windows
# they do not, and the direction must not be presumed); Gemma also at SEQ_LEN_LONG (1,024).
# Needs scripts/models and the shared data folder. From the repository root:
#   results/kv-cache/run.sh
#   MODELS="smollm2-135m gemma3-270m" WINDOWS=32 results/kv-cache/run.sh
#   PRESETS=kv-q4_0,kv-q4_0-keep1 TAG=keep PAIRS= results/kv-cache/run.sh   (a subset; TAG names its files)
#   MODELS=gemma3-270m PRESETS=kv-q4_0,kv-q4_0-keep1,kv-int4,kv-int4-keep1 TAG=keep SEQ_LEN_LONG= PAIRS= results/kv-cache/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/results/kv-cache"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
models=${MODELS-smollm2-135m}  # MODELS= runs the pair alone
windows=${WINDOWS:-32}
band=${BAND:-2}
presets=${PRESETS:-kv-int8,kv-fp8,kv-q8_0,kv-q4_0,kv-q4_0-keep1,kv-int4,kv-int4-keep1,w8a8-kv8,int8-vectorwise,kv-q8_0-hadamard,kv-q4_0-hadamard}
data=text/wikitext-2-raw-v1/test.joined.txt
for model in $models; do "$root/scripts/models" --model "$model"; done
# The K / V error per scheme (mean over layers), first position apart, from a record.
kv_error_table() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\n| scheme | K err first | K err rest | V err first | V err rest |")
print("|---|---:|---:|---:|---:|")
for s in r["schemes"]:
    e = s.get("description", {}).get("kv_cache_error")
    if e and "~r" not in s["name"]:
        m = e["mean"]
        print(f"| {s['name']} | {m['k_first']:.4f} | {m['k_rest']:.4f} | {m['v_first']:.4f} | {m['v_rest']:.4f} |")
PY
}
# The table's last parts: each scheme's K / V error, keep-or-not paired window by window
# (keep_vs_not.py), then the record gzipped when it is over 1 MB (gunzip -k it to read it with qeval).
finish() {
  kv_error_table "$1" >> "${1%.json}.md"
  echo >> "${1%.json}.md"
  python3 "$here/keep_vs_not.py" "$1" >> "${1%.json}.md"
  [ "$(stat -c %s "$1")" -le 1048576 ] || gzip -9 -f "$1"
}
run() {  # model seq_len
  local name=$1-wikitext2-$2x$windows${TAG:+-$TAG}
  echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)" >&2
  /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$1" --data "$data" --schemes "full,$presets" \
    --stats-for all --rounding-band "$band" --seq-len "$2" --max-windows "$windows" --seed 0 \
    --out "$here/$name.json" -q > "$here/$name.md"
  grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
  finish "$here/$name.json"
}
for model in $models; do
  run "$model" 512
  if [ "$model" = gemma3-270m ] && [ -n "${SEQ_LEN_LONG-1024}" ]; then run "$model" "${SEQ_LEN_LONG-1024}"; fi  # SEQ_LEN_LONG= skips it
done
# The Adam / OrthoAdam pair of results/train/mix (PAIRS; PAIRS= skips it) on its own held-out
# text (configs/train/mix.py's mix-heldout.txt), each run's own window (128 here), the first PAIR_WINDOWS: does the
# OrthoAdam / softmax-1 model tolerate kv-q4_0 better, and does keeping the first token help Adam?
pairs=${PAIRS-A-d256-s0-10k B-d256-s0-10k}
if [ -n "$pairs" ]; then
  # shellcheck source=configs/train/mix-recipes.sh
  source "$root/configs/train/mix-recipes.sh"
  mix_heldout "${QEVAL_DATA_DIR:-$root/../shared/data}"
  # The pair's checkpoints hold no tokenizer: they were trained with stories260K's (configs/train/mix-run.sh).
  tokenizer="${QEVAL_DATA_DIR:-$root/../shared/data}/models/stories260K/tok512.model"
  for run in $pairs; do
    mix_eval_window "$root/results/train/mix/$run"
    name=pair-$run-${MIX_WINDOW[1]}x${PAIR_WINDOWS:-512}${TAG:+-$TAG}
    echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores)" >&2
    /usr/bin/time -v -o "$here/$name.time" "$qeval" eval --model "$root/results/train/mix/$run" --tokenizer "$tokenizer" \
      --data "$MIX_HELDOUT" --schemes "full,$presets" --stats-for all --rounding-band "$band" \
      "${MIX_WINDOW[@]}" --max-windows "${PAIR_WINDOWS:-512}" --seed 0 --out "$here/$name.json" -q > "$here/$name.md"
    grep -E "Elapsed|Maximum resident" "$here/$name.time" >&2
    finish "$here/$name.json"
  done
fi
