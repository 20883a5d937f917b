#!/usr/bin/env bash
# Peak memory must not grow with the data file (issue 2). Streams TinyStories at 1× and 8×
# its size through the tokenizer and the windows protocol (`qeval inspect --data`, which reads
# every document) and through `qeval eval` on the 1× and 8× gzip files with 20 windows drawn
# with a seed (so the whole file is streamed to sample them), and prints peak resident memory
# (GNU time's %M) side by side.
#
#   bench/memory_growth.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
qeval="${1:-$root/build}/qeval"
data="$("$qeval" data-dir)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
src="$data/text/tinystories/validation-head.txt"
cp "$src" "$tmp/x1.txt"
for i in 1 2 3 4 5 6 7 8; do cat "$src"; done > "$tmp/x8.txt"
gzip -k "$tmp/x1.txt" "$tmp/x8.txt"
peak() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }
tok="$data/models/stories260K/tok512.model"
printf "| run | 1× (%s bytes) | 8× (%s bytes) |\n|---|---:|---:|\n" "$(stat -c %s "$tmp/x1.txt")" "$(stat -c %s "$tmp/x8.txt")"
printf "| inspect (tokenise every document), peak RSS KiB | %s | %s |\n" \
  "$(peak "$qeval" inspect --tokenizer "$tok" --data "$tmp/x1.txt")" \
  "$(peak "$qeval" inspect --tokenizer "$tok" --data "$tmp/x8.txt")"
printf "| inspect .txt.gz, peak RSS KiB | %s | %s |\n" \
  "$(peak "$qeval" inspect --tokenizer "$tok" --data "$tmp/x1.txt.gz")" \
  "$(peak "$qeval" inspect --tokenizer "$tok" --data "$tmp/x8.txt.gz")"
printf "| eval 20 sampled windows of 256, peak RSS KiB | %s | %s |\n" \
  "$(peak "$qeval" eval -q --tokenizer "$tok" --data "$tmp/x1.txt.gz" --seq-len 256 --max-windows 20 --seed 1)" \
  "$(peak "$qeval" eval -q --tokenizer "$tok" --data "$tmp/x8.txt.gz" --seq-len 256 --max-windows 20 --seed 1)"
