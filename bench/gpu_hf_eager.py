"""The baseline of bench/gpu_speed.sh: what a user would run instead of `qeval eval --device cuda`.
Hugging Face transformers, PyTorch eager with SDPA attention, tokens/s of one perplexity step
(forward, full-vocabulary log-softmax in fp32, NLL) on random weights of the shapes of
bench/gpu_eval_bench.cpp (same seq and batch), and int8 as researchers simulate it
(quantise-dequantise, per-tensor weights and activations: the paper's 'moderate').
Written after ../shared/gpu/2026-11-26-h200/hf_eager_anchor.py.

  python3 bench/gpu_hf_eager.py --shapes gpt2-small,llama-3.2-1b --dtype fp16 --json out.jsonl
"""
import argparse, copy, json, sys
import torch, torch.nn as nn, torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, GPT2Config, GPT2LMHeadModel

SHAPES = {
    "smollm2-135m": ("llama", dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                                    num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0), 512, 16),
    "gpt2-small": ("gpt2", dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024), 1024, 8),
    "llama-3.2-1b": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                                    num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0), 1024, 8),
    "llama-2-7b": ("llama", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                                  num_key_value_heads=32, vocab_size=32000, tie_word_embeddings=False), 2048, 4),
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def build(kind, cfg, seq, dtype):
    with torch.device("cuda"):
        if kind == "llama":
            m = LlamaForCausalLM(LlamaConfig(max_position_embeddings=max(seq, 2048), attn_implementation="sdpa", **cfg))
        else:
            m = GPT2LMHeadModel(GPT2Config(attn_implementation="sdpa", **cfg))
    return m.to(dtype).eval()


class FakeQuantLinear(nn.Module):
    """int8 absmax, per-tensor weights and per-tensor input activations, quantise-dequantise."""
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.data
        s = w.abs().amax().float() / 127
        self.register_buffer("w", ((w.float() / s).round().clamp(-127, 127) * s).to(w.dtype))
        self.bias = lin.bias

    def forward(self, x):
        s = x.abs().amax().float() / 127
        xq = ((x.float() / s).round().clamp(-127, 127) * s).to(x.dtype)
        return F.linear(xq, self.w, self.bias)


def conv1d_to_linear(m):
    from transformers.pytorch_utils import Conv1D
    for name, mod in list(m.named_modules()):
        for cn, child in list(mod.named_children()):
            if isinstance(child, Conv1D):
                lin = nn.Linear(child.weight.shape[0], child.weight.shape[1], bias=True).to(child.weight.device, child.weight.dtype)
                lin.weight.data = child.weight.data.t().contiguous()
                lin.bias.data = child.bias.data
                setattr(mod, cn, lin)


def swap(m, cls, skip=("lm_head",)):
    for name, mod in list(m.named_modules()):
        for cn, child in list(mod.named_children()):
            full = f"{name}.{cn}" if name else cn
            if isinstance(child, nn.Linear) and not any(s in full for s in skip):
                setattr(mod, cn, cls(child))


@torch.inference_mode()
def tokens_per_s(m, ids, reps):
    def step():
        lp = torch.log_softmax(m(ids).logits.float(), -1)
        return -lp[:, :-1].gather(-1, ids[:, 1:, None]).mean()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); step(); b.record(); torch.cuda.synchronize()
        t.append(a.elapsed_time(b) / 1e3)
    t.sort()
    return ids.numel() / t[len(t) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="gpt2-small,llama-3.2-1b,llama-2-7b")
    ap.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name(0), flush=True)
    out = open(a.json, "w") if a.json else None
    for name in a.shapes.split(","):
        kind, cfg, seq, batch = SHAPES[name]
        m = build(kind, cfg, seq, DTYPES[a.dtype])
        ids = torch.randint(0, m.config.vocab_size, (batch, seq), device="cuda")
        rows = [("hf eager", tokens_per_s(m, ids, a.reps))]
        if kind == "gpt2":
            conv1d_to_linear(m)
        swap(m, FakeQuantLinear)
        rows.append(("hf int8 simulation (moderate)", tokens_per_s(m, ids, a.reps)))
        del m
        torch.cuda.empty_cache()
        for path, tps in rows:
            print(f"| {name} | {seq} x {batch} | {a.dtype} | {path} | {tps:,.0f} |", flush=True)
            if out:
                out.write(json.dumps(dict(shape=name, seq=seq, batch=batch, dtype=a.dtype, path=path, tokens_per_s=tps)) + "\n")


if __name__ == "__main__":
    main()
