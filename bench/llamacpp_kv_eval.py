# llama.cpp's own perplexity with a quantised KV cache (issue 62 item 6): evaluates a GGUF through
# llama-cpp-python on the same windows as `qeval eval --data TOKENS.bin --seq-len L --max-windows N`
# once per cache type, flash attention on (llama.cpp needs it for a quantised V cache), and prints
# one JSON line per cache type: PPL and the paired per-token ΔNLL ± standard error against the
# first type given (the baseline; llama.cpp's unquantised cache is F16), as qeval reports its own.
# llama.cpp also rounds Q to Q8_0 before Q·K when K is quantised, which qeval's KV schemes do not.
#
#   python llamacpp_kv_eval.py MODEL.gguf TOKENS.bin SEQ_LEN WINDOWS THREADS f16 q8_0 q4_0
import json
import math
import sys

import numpy as np
from llama_cpp import Llama

from llamacpp_eval import token_nlls

# ggml type ids (ggml.h): the cache types llama.cpp's -ctk / -ctv accept that this bench compares.
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}


def main():
    model, tokens_path = sys.argv[1], sys.argv[2]
    seq, windows, threads = map(int, sys.argv[3:6])
    cache_types = sys.argv[6:] or ["f16", "q8_0", "q4_0"]
    unknown = [t for t in cache_types if t not in GGML_TYPES]
    if unknown:
        sys.exit(f"llamacpp_kv_eval.py: unknown cache type {unknown[0]!r}; expected one of {sorted(GGML_TYPES)}")
    tokens = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    baseline = None
    for cache in cache_types:
        llm = Llama(model_path=model, n_ctx=seq, n_batch=seq, n_ubatch=seq, n_threads=threads,
                    n_threads_batch=threads, logits_all=True, flash_attn=True,
                    type_k=GGML_TYPES[cache], type_v=GGML_TYPES[cache], verbose=False)
        nll, seconds = token_nlls(llm, tokens, seq, windows)
        del llm
        row = {"engine": "llama.cpp (llama-cpp-python)", "cache_type": cache, "flash_attn": True,
               "windows": windows, "tokens": int(nll.size), "ppl": math.exp(nll.mean()),
               "tokens_per_second": windows * seq / seconds}
        if baseline is None:
            baseline = nll
        else:
            d = nll - baseline
            row["baseline"] = cache_types[0]
            row["paired_dnll_mean"] = float(d.mean())
            row["paired_dnll_se"] = float(d.std(ddof=1) / math.sqrt(d.size))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
