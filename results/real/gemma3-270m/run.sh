#!/usr/bin/env bash
# The Gemma-3-270M showcase (results/README.md, "A real model"), SmolLM2's protocol (results/real/smollm2-135m):
# every preset, statistics for every scheme and the Figure-1 pictures, on WikiText-2 test and the
# C4 excerpt, windows drawn with seed 0 from each; at 512 tokens (every layer sees the whole
# window) and at 1024 (the local layers' 512-key sliding window bites). Every window opens with
# BOS: the default for this GGUF tokenizer (tokenizer.ggml.add_bos_token is true; docs/usage.md,
# conventions). Needs scripts/models --model gemma3-270m and the shared data folder.
#   results/real/gemma3-270m/run.sh [512|1024]...   (from the repository root; default: both)
# Window counts: $WINDOWS_512 (default 32, as SmolLM2) and $WINDOWS_1024 (default 16, the same
# tokens); the committed records say what ran (protocol.max_windows), results/README.md the reason.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
here="$root/results/real/gemma3-270m"
qeval="${QEVAL_BUILD_DIR:-$root/build}/qeval"
"$root/scripts/models" --model gemma3-270m
schemes=full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128,int8-coarse-keep1,int8-moderate-keep1
lengths=("$@")
((${#lengths[@]})) || lengths=(512 1024)
for len in "${lengths[@]}"; do
  case $len in
    512) windows=${WINDOWS_512:-32} ;;
    1024) windows=${WINDOWS_1024:-16} ;;
    *) echo "run.sh: length $len: expected 512 or 1024" >&2; exit 2 ;;
  esac
  for text in wikitext2:text/wikitext-2-raw-v1/test.joined.txt c4:text/c4/c4-en-validation-excerpt-1025.jsonl; do
    name=${text%%:*}-$len
    echo "== $name: $windows windows" >&2
    "$qeval" eval --model gemma3-270m --data "${text#*:}" --schemes "$schemes" --stats-for all \
      --seq-len "$len" --max-windows "$windows" --seed 0 --threads 2 \
      --plots "$here/figures-$name" --plots-colour-scale log --out "$here/$name.json" -q > "$here/$name.md"
    "$qeval" compare "$here/$name.json" > "$here/compare-$name.md"
  done
done
