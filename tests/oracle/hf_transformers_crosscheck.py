#!/usr/bin/env python3
"""Cross-checks the numpy oracle of hf_moe_ssm_forward.py against Hugging Face transformers itself, where
transformers runs on this machine (4.46.3 is the newest that supports Debian's torch 1.13; it has Mixtral,
Qwen2-MoE, Mamba, Mamba-2 and Jamba, not Qwen3-MoE). Each fixture is loaded with from_pretrained, run in float64
in eager mode, and its logits and routing compared with reference.safetensors (the hidden states' layout in
output_hidden_states differs between these families, and the logits depend on every block).

    /path/to/venv/bin/python tests/oracle/hf_transformers_crosscheck.py tests/model/fixtures

Mamba-2 in 4.46.3 differs from the current modeling_mamba2.py (and from mamba_ssm) in two ways, so that check
reports a difference (3.6 on the logits) rather than agreement; the oracle follows the current code:
  - its torch path tiles B and C over heads (head h reads group h % G) instead of repeat_interleave (h // (H / G));
    the fixture has n_groups 2;
  - its inter-chunk recurrence lacks the decay_chunk.transpose(1, 3) of the current code, so any input longer than
    one chunk differs (the fixture's chunk_size is 5 for 12 tokens). With n_groups 1 and one chunk (chunk_size 12),
    4.46.3 and the oracle agree to 1.1e-6 in float64; with chunk_size 5 they differ by 0.69. The oracle's chunked SSD
    agrees with the plain recurrence to 1e-10 (asserted in hf_moe_ssm_forward.py).
"""
import sys

import numpy as np
import torch
from safetensors.numpy import load_file
import transformers

FIXTURES = ["tiny-mixtral-hf", "tiny-qwen2-moe-hf", "tiny-mamba-hf", "tiny-mamba2-hf", "tiny-jamba-hf"]


def main(root):
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name in FIXTURES:
        d = f"{root}/{name}"
        ref = load_file(f"{d}/reference.safetensors")
        model = transformers.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float64,
                                                                  attn_implementation="eager").eval()
        kwargs = {}
        if "routing" in ref:
            kwargs["output_router_logits"] = True
        with torch.no_grad():
            out = model(torch.from_numpy(ref["input_ids"]), use_cache=False, **kwargs)
        dl = np.abs(out.logits.numpy() - ref["logits"]).max()
        line = f"{name}: max |dlogit| {dl:.2e} (the reference is float32)"
        if "routing" in ref:
            k = ref["routing"].shape[-1]
            logits_r = [r for r in out.router_logits if r is not None]
            picks = np.stack([torch.topk(torch.softmax(r, -1), k, -1).indices.numpy().reshape(ref["routing"].shape[0], -1, k)
                              for r in logits_r], 1)
            line += f", routing identical: {bool((picks == ref['routing']).all())}"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures")
