cd "$(dirname "$0")/../../.."  # the repository root
D=../shared/data/text/wikitext-2-raw-v1/test.joined.txt
for s in full full,int8-moderate,int8-fine,w4-zeropoint full,int8-coarse,int8-moderate,int8-fine,int8-vectorwise,w4-zeropoint,w4-zeropoint-g128; do
  n=$(echo $s | tr ',' '\n' | wc -l)
  for plan in streamed resident; do
    /usr/bin/time -f "%M %e" -o /tmp/qeval-scount-t.txt build/qeval eval -q --model smollm2-135m --data $D --seq-len 512 --max-windows 1 --schemes $s --plan $plan --out /tmp/qeval-scount-sc-$n-$plan.json > /dev/null 2> /tmp/qeval-scount-sc-$n-$plan.log
    echo "| SmolLM2-135M | $n | $plan | $(awk '{printf "%.0f MiB | %.0f s", $1/1024, $2}' /tmp/qeval-scount-t.txt) | $(cut -d' ' -f1-3 /proc/loadavg) |"
  done
done
