#!/usr/bin/env bash
# qeval against PyTorch eager (Debian's python3-torch 1.13), in one run, on the same windows
# (issue 16): a GPT-2-small-shaped model (random weights made by bench/gpt2_eager.py, loaded by
# both sides from one Hugging Face folder) on WikiText-2 test at seq 1024, and SmolLM2-135M
# (bench/eager_eval.py) at seq 512. Per scheme: tokens/s of each side and the ratio (qeval's
# integer kernels against eager's quantise-dequantise simulation), and each side's PPL (equal
# for fp32 to rounding; close, not equal, where qeval runs integer kernels). Then the fp32
# forward's GFLOP/s as a fraction of the GEMM peak measured in the same run (bench/forward_bench),
# and the cost of statistics (eval's default, --stats-for full) over statistics off. For SmolLM2
# also llama.cpp (llama-cpp-python, bench/llamacpp_eval.py) on the same GGUF, windows and threads,
# where $QEVAL_LLAMACPP_PYTHON (default /work/cache/llamacpp-venv/bin/python) imports llama_cpp.
#
#   bench/speed_vs_eager.sh [GPT2_WINDOWS (4)] [SMOLLM2_WINDOWS (8)] [THREADS (2)]
# Run on a quiet machine (no build beside it). Needs scripts/models, and gguf and tokenizers
# (pip; scripts/test installs them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
gpt2_windows="${1:-4}"
smol_windows="${2:-8}"
threads="${3:-2}"
build="${QEVAL_BUILD_DIR:-$root/build}"
qeval="$build/qeval"
"$root/scripts/models" >/dev/null
smollm2="$("$root/scripts/models" --path smollm2-135m)"
data="$("$qeval" data-dir)"
wikitext="$data/text/wikitext-2-raw-v1/test.joined.txt"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
schemes=(full int8-coarse int8-moderate int8-fine int8-vectorwise w4-zeropoint w4-zeropoint-g128)
scheme_list="$(IFS=,; echo "${schemes[*]}")"

# Token files (uint16): WikiText-2 through Hugging Face `tokenizers` with each model's vocabulary
# (both equal qeval's tokenizers, tests/loaders/tokenizers).
python3 - "$data/tokenizers/gpt2" "$smollm2" "$wikitext" "$work" "$root/tests/oracle" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[5])
from tokenizers import Tokenizer, models, pre_tokenizers
from hf_gguf_tokenizer_oracle import build
text = open(sys.argv[3], encoding="utf-8").read()
gpt2 = Tokenizer(models.BPE.from_file(sys.argv[1] + "/encoder.json", sys.argv[1] + "/vocab.bpe"))
gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
np.asarray(gpt2.encode(text).ids, dtype="<u2").tofile(sys.argv[4] + "/gpt2.bin")
np.asarray(build(sys.argv[2], "file").encode(text).ids, dtype="<u2").tofile(sys.argv[4] + "/smollm2.bin")
PY
/usr/bin/python3 "$root/bench/gpt2_eager.py" make "$work/gpt2-small"
# Debian's python runs the eager side; llama.cpp's pure-Python gguf package is borrowed from the
# python3 that has it, alone on the path (its numpy would not fit Debian's interpreter).
mkdir -p "$work/site"
ln -s "$(python3 -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')" "$work/site/gguf"

echo "# qeval vs PyTorch eager, $(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $threads threads"
echo "CPU SIMD flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512_vnni|avx_vnni|amx_int8' | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run_qeval() {  # NAME MODEL SEQ WINDOWS TOKENIZER-ARGS...
  local name=$1 model=$2 seq=$3 windows=$4
  shift 4
  "$qeval" eval -q --model "$model" "$@" --data "$work/$name.bin" --seq-len "$seq" --max-windows "$windows" \
    --schemes "$scheme_list" --stats-for none --threads "$threads" --out "$work/$name.json" >/dev/null
  # Statistics cost: the full-precision scheme alone, statistics off and on (eval's default).
  for stats in none full; do
    "$qeval" eval -q --model "$model" "$@" --data "$work/$name.bin" --seq-len "$seq" --max-windows "$windows" \
      --schemes full --stats-for "$stats" --threads "$threads" --out "$work/$name-stats-$stats.json" >/dev/null
  done
}
run_qeval gpt2 "$work/gpt2-small" 1024 "$gpt2_windows" --tokenizer "$data/tokenizers/gpt2/encoder.json"
/usr/bin/python3 "$root/bench/gpt2_eager.py" eval "$work/gpt2-small" "$work/gpt2.bin" 1024 "$gpt2_windows" "$threads" \
  "${schemes[@]}" > "$work/gpt2.jsonl"
run_qeval smollm2 "$smollm2" 512 "$smol_windows"
PYTHONPATH="$work/site" /usr/bin/python3 "$root/bench/eager_eval.py" "$smollm2" "$work/smollm2.bin" 512 "$smol_windows" \
  "$threads" "${schemes[@]}" > "$work/smollm2.jsonl"
llamacpp_python="${QEVAL_LLAMACPP_PYTHON:-/work/cache/llamacpp-venv/bin/python}"
if "$llamacpp_python" -c "import llama_cpp" 2>/dev/null; then
  "$llamacpp_python" "$root/bench/llamacpp_eval.py" "$smollm2" "$work/smollm2.bin" 512 "$smol_windows" "$threads" \
    > "$work/smollm2-llamacpp.json"
else
  echo "llama-cpp-python not importable by $llamacpp_python: the llama.cpp row is skipped" >&2
fi
"$build/bench/forward_bench" --threads "$threads" --windows 2 --model "$smollm2" --seq 512 > "$work/forward.md"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "$gpt2_windows" "$smol_windows" "$threads" <<'PY'
import json, sys
work = sys.argv[1]
for name, title, windows, seq in (("gpt2", "GPT-2 small shape (random weights)", sys.argv[2], 1024),
                                  ("smollm2", "SmolLM2-135M", sys.argv[3], 512)):
    record = json.load(open(f"{work}/{name}.json"))
    eager = {e["scheme"]: e for e in map(json.loads, open(f"{work}/{name}.jsonl"))}
    print(f"\n{title}, WikiText-2 test, {windows} windows of {seq}, {sys.argv[4]} threads, statistics off\n")
    print("| scheme | qeval path | qeval tok/s | PyTorch eager tok/s | ratio | qeval PPL | eager PPL |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for s in record["schemes"]:
        e = eager[s["name"]]
        q = s["timing"]["tokens_per_second"]
        path = s["description"].get("execution", "fp32").split(" (")[0]
        print(f"| {s['name']} | {path} | {q:.0f} | {e['tokens_per_second']:.0f} | {q / e['tokens_per_second']:.2f}× "
              f"| {s['perplexity']['ppl']:.4f} | {e['ppl']:.4f} |")
    try:
        llama = json.load(open(f"{work}/{name}-llamacpp.json"))
        full = next(s for s in record["schemes"] if s["name"] == "full")["timing"]["tokens_per_second"]
        print(f"\nllama.cpp (llama-cpp-python, the same GGUF computed in its own block types, every logit, "
              f"{llama['threads']} threads): {llama['tokens_per_second']:.0f} tok/s, PPL {llama['ppl']:.4f}; "
              f"qeval full / llama.cpp = {full / llama['tokens_per_second']:.2f}×")
    except FileNotFoundError:
        pass
    off, on = (json.load(open(f"{work}/{name}-stats-{s}.json"))["schemes"][0]["timing"]["tokens_per_second"]
               for s in ("none", "full"))
    print(f"\nStatistics (eval's default --stats-for full) on the full-precision scheme: {on:.0f} tok/s with, "
          f"{off:.0f} without: {100 * (off / on - 1):+.1f} % time")
print("\nbench/forward_bench (fp32 forward alone, best of 2):\n")
print(open(f"{work}/forward.md").read())
PY
