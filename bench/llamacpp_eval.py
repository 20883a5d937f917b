# The llama.cpp yardstick (issue 34): evaluates a GGUF model through llama-cpp-python on the same
# windows as `qeval eval --data TOKENS.bin --seq-len L --max-windows N` (the first N windows of a
# uint16 token file, every token after the first scored), with every logit of the window
# (logits_all), L tokens per batch, and THREADS threads for both prompt processing and generation.
# llama.cpp computes with the GGUF's own block types (SmolLM2: Q4_1 weights against Q8 activations),
# so its PPL is close to, not equal to, qeval's full-precision (dequantised fp32) PPL.
# Prints one JSON line: tokens/s of the forward passes alone (llm.eval; the log-softmax over the
# vocabulary that scores them runs after the clock stops, in numpy) and the PPL.
#
#   python llamacpp_eval.py MODEL.gguf TOKENS.bin SEQ_LEN WINDOWS THREADS
# Needs llama-cpp-python (bench/speed_vs_eager.sh looks for it in $QEVAL_LLAMACPP_PYTHON, default
# /work/cache/llamacpp-venv/bin/python: `python3 -m venv DIR && DIR/bin/pip install
# llama-cpp-python==0.3.36`, a source build of about 5 minutes on 2 cores).
import json
import math
import sys
import time

import numpy as np
from llama_cpp import Llama


def token_nlls(llm, tokens, seq, windows):
    """Per-token NLL (float64) of every token after the first in each of the first `windows`
    windows of `seq` tokens, and the seconds spent in llm.eval alone."""
    nlls, seconds = [], 0.0
    for w in range(windows):
        window = tokens[w * seq:(w + 1) * seq].tolist()
        if len(window) < seq:
            break
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(window)
        seconds += time.perf_counter() - t0
        logits = np.asarray(llm.scores[:seq - 1], dtype=np.float64)  # [seq - 1, vocab]: predicts tokens 1..
        m = logits.max(axis=1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
        target = np.asarray(window[1:])
        nlls.append(lse - logits[np.arange(seq - 1), target])
    return np.concatenate(nlls), seconds


def main():
    model, tokens_path, seq, windows, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    tokens = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    llm = Llama(model_path=model, n_ctx=seq, n_batch=seq, n_ubatch=seq, n_threads=threads,
                n_threads_batch=threads, logits_all=True, verbose=False)
    nll, seconds = token_nlls(llm, tokens, seq, windows)
    print(json.dumps({"engine": "llama.cpp (llama-cpp-python)", "threads": threads, "windows": windows,
                      "tokens_per_second": windows * seq / seconds, "ppl": math.exp(nll.mean())}))


if __name__ == "__main__":
    main()
