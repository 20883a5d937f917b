#!/usr/bin/env bash
# Issue 80 item 5's check: `qeval hellaswag` against `llama-perplexity --hellaswag` on the same F32
# GGUF of SmolLM2-135M-Instruct and the same tasks, task by task.
#
#   results/fidelity/llamacpp_hellaswag.sh [TASKS (400)] [THREADS (2)] > results/fidelity/llamacpp-hellaswag.md
#
# The F32 GGUF is llamacpp_env.sh's (llama-quantize --allow-requantize of the Q4_1 GGUF to F32).
# Both draw the tasks from llama.cpp's 6-line file with std::mt19937(1) (qeval's default --task-order llamacpp), so task i is the same task in both.
#
# llama-perplexity prints only its running accuracy per task. Its choice per task is a LOG line that
# llama.cpp's source carries commented out; this script needs a llama-perplexity built with that line
# switched on, in the source llama-cpp-python 0.3.36 vendors (build as llamacpp_env.sh says, after):
#   sed -i 's|//LOG("max logprob ending idx|LOG("max logprob ending idx|' tools/perplexity/perplexity.cpp
# The line prints, after each task is scored, "max logprob ending idx C, gold ending idx G"; nothing
# else changes. llama.cpp runs with a float32 KV cache and no flash attention, as in llamacpp_kl.sh.
set -euo pipefail
tasks="${1:-400}"
threads="${2:-2}"
# shellcheck source=results/fidelity/llamacpp_env.sh
source "$(dirname "$0")/llamacpp_env.sh"
shipped="$("$qeval" data-dir)/tasks/hellaswag/hellaswag_val_full.txt.bz2"
# llama-perplexity reads plain text; qeval reads the file as shipped.
bzip2 -dc "$shipped" >"$work/hellaswag_val_full.txt"

llamacpp_header "qeval hellaswag against llama-perplexity --hellaswag" "$threads"
start=$(date +%s)
"$bin/llama-perplexity" -m "$work/f32.gguf" -f "$work/hellaswag_val_full.txt" --hellaswag --hellaswag-tasks "$tasks" \
  -c 2048 -b 2048 -t "$threads" -ctk f32 -ctv f32 -fa off >"$work/hellaswag-llamacpp.log" 2>&1
llama_s=$(($(date +%s) - start))
grep -q "max logprob ending idx" "$work/hellaswag-llamacpp.log" ||
  { echo "llamacpp_hellaswag.sh: $bin/llama-perplexity does not print its choices; build it with the line the header names" >&2; exit 2; }
start=$(date +%s)
/usr/bin/time -v "$qeval" hellaswag -q --model "$work/f32.gguf" --tasks "$shipped" --max-tasks "$tasks" --schemes full \
  --threads "$threads" --batch-size 8 --out "$work/hellaswag-qeval.json" >"$work/hellaswag-qeval.txt" 2>"$work/hellaswag-qeval.time"
qeval_s=$(($(date +%s) - start))
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); llama-perplexity ${llama_s} s, qeval hellaswag ${qeval_s} s" \
  "(peak RSS $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/hellaswag-qeval.time") KB)"
echo
python3 - "$work" <<'PY'
import json, re, sys
work = sys.argv[1]
log = open(f"{work}/hellaswag-llamacpp.log", encoding="utf-8", errors="replace").read()
llama = [(int(c), int(g)) for c, g in re.findall(r"max logprob ending idx (\d+), gold ending idx (\d+)", log)]
final = re.findall(r"^(\d+)\t([\d.]+)%\t\[([\d.]+)%, ([\d.]+)%\]", log, re.M)[-1]
record = json.load(open(f"{work}/hellaswag-qeval.json"))
full = record["schemes"][0]
ours = full["hellaswag"]["choices"]["llamacpp_acc_norm"]
gold = record["tasks"]["gold"]
means = full["hellaswag"]["llamacpp_mean_logprob"]
indices = record["tasks"]["indices"]
n = len(ours)
assert len(llama) == n, f"llama.cpp scored {len(llama)} tasks, qeval {n}"
gold_agrees = sum(g == gold[i] for i, (_, g) in enumerate(llama))
same = sum(c == ours[i] for i, (c, _) in enumerate(llama))
acc = full["hellaswag"]["results"]["llamacpp_acc_norm"]
print(f"{n} tasks; the gold ending agrees on {gold_agrees} of {n} (the same task at each position).\n")
print("| | llama.cpp | qeval `full` |")
print("|---|---:|---:|")
print(f"| acc_norm (llama.cpp's rule) | {float(final[1]):.4f} % [{final[2]} %, {final[3]} %] | "
      f"{100 * acc['accuracy']:.4f} % ± {100 * acc['se']:.4f} |")
print(f"| tasks right | {round(float(final[1]) * n / 100)} | {sum(o == g for o, g in zip(ours, gold))} |")
print(f"| same choice as the other | {same} of {n} ({100 * same / n:.2f} %) | |")
diff = [i for i in range(n) if llama[i][0] != ours[i]]
if diff:
    print("\nTasks chosen differently, with qeval's mean log-probabilities of the two endings concerned (a near tie "
          "is a gap far below the spread of the four):\n")
    print("| position | task | gold | llama.cpp | qeval | qeval's mean log-prob: llama.cpp's choice | qeval's choice | gap |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i in diff:
        m = means[i]
        a, b = llama[i][0], ours[i]
        print(f"| {i} | {indices[i]} | {gold[i]} | {a} | {b} | {m[a]:.6f} | {m[b]:.6f} | {m[b] - m[a]:.2e} |")
PY
