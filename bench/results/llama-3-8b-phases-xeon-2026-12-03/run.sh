#!/bin/bash
# Llama-3-8B shape (random F16, 16 GB), the default 7 presets + statistics for all, 1 x 128 tokens,
# page cache warm; the qeval builds of 48f0419 (before this session) and a0e2cc7 alternating.
m=~/.cache/qeval/bench/llama-3-8b
cd /tmp/ab/p8
cat $m/*.safetensors > /dev/null
n=0
for r in 1 2; do for v in 48f0419 a0e2cc7; do
  n=$((n+1)); tag=$n-$v-warm
  echo "=== $tag load $(cut -d' ' -f1-3 /proc/loadavg)"
  /usr/bin/time -v -o $tag.time /tmp/ab/qeval_$v eval -q --model $m --data $m.tokens.bin --token-dtype uint32 \
    --seq-len 128 --max-windows 1 --stats-for all --out $tag.json > /dev/null 2>&1
  /tmp/ab/qeval_a0e2cc7 compare --timings $tag.json --format json > $tag.timings.json
  grep -E "Elapsed|Maximum resident" $tag.time
done; done
echo finished
