# The PyTorch eager yardstick for the GPT-2-small shape (Debian's python3-torch):
#   gpt2_eager.py make DIR [SEED]            a random GPT-2-small (124 M parameters, GPT-2's init:
#                                            normal(0, 0.02), LayerNorm 1/0, biases 0) written as a
#                                            Hugging Face folder (config.json + model.safetensors),
#                                            which `qeval eval --model DIR` loads
#   gpt2_eager.py eval DIR TOKENS.bin SEQ_LEN WINDOWS THREADS SCHEME [SCHEME ...]
#                                            the same model evaluated the way a PyTorch user would:
#                                            an eager float32 forward, one window per forward, each
#                                            scheme simulated (quantise-dequantise, then the float
#                                            GEMM; eager_eval.py's definitions). One JSON line per
#                                            scheme: tokens/s and PPL.
# No safetensors package is needed: the format is a JSON header and raw little-endian data.
import json
import math
import struct
import sys

import numpy as np
import torch

from eager_eval import SCHEMES, absmax_int8, score

D, LAYERS, HEADS, VOCAB, CTX = 768, 12, 12, 50257, 1024


def make(folder, seed):
    import os
    os.makedirs(folder, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    t = {}
    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.02
    t["transformer.wte.weight"] = normal(VOCAB, D)
    t["transformer.wpe.weight"] = normal(CTX, D) / 2
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[p + ln + ".weight"], t[p + ln + ".bias"] = torch.ones(D), torch.zeros(D)
        t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = normal(D, 3 * D), torch.zeros(3 * D)
        t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = normal(D, D), torch.zeros(D)
        t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = normal(D, 4 * D), torch.zeros(4 * D)
        t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = normal(4 * D, D), torch.zeros(D)
    t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = torch.ones(D), torch.zeros(D)
    header, offset, blobs = {}, 0, []
    for name, v in t.items():
        b = v.contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(f"{folder}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB, "n_embd": D,
               "n_layer": LAYERS, "n_head": HEADS, "n_positions": CTX, "n_ctx": CTX, "layer_norm_epsilon": 1e-5,
               "activation_function": "gelu_new", "bos_token_id": 50256, "eos_token_id": 50256,
               "tie_word_embeddings": True}, open(f"{folder}/config.json", "w"), indent=1)


def load(folder):
    raw = open(f"{folder}/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(raw, dtype="<f4", count=(b - a) // 4, offset=8 + n + a)
                                     .reshape(info["shape"]).copy())
    return out


def evaluate(folder, tokens_path, seq_len, n_windows, threads, schemes):
    torch.set_num_threads(threads)
    base = load(folder)
    # nn.Linear layout [out, in] for the Conv1D weights, as a PyTorch user would hold them.
    for k in list(base):
        if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            base[k] = base[k].t().contiguous()
    stream = np.fromfile(tokens_path, dtype="<u2").astype(np.int64)
    windows = [torch.from_numpy(stream[i * seq_len:(i + 1) * seq_len]) for i in range(n_windows)]
    assert len(windows[-1]) == seq_len, "not enough tokens for the windows asked"
    mask = torch.full((seq_len, seq_len), float("-inf")).triu(1)
    hd = D // HEADS
    for name in schemes:
        wq, in_dim, out_dim = SCHEMES[name]
        w = {k: (wq(v) if wq and ".h." in k and k.endswith(".weight") and v.dim() == 2 else v) for k, v in base.items()}

        def linear(x, key):
            if in_dim != "none":
                x = absmax_int8(x, in_dim)
            y = torch.nn.functional.linear(x, w[key + ".weight"], w[key + ".bias"])
            return y if out_dim == "none" else absmax_int8(y, out_dim)

        def ln(x, key):
            return torch.nn.functional.layer_norm(x, (D,), w[key + ".weight"], w[key + ".bias"], 1e-5)

        def logits_of(tokens):
            x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:seq_len]
            for i in range(LAYERS):
                p = f"transformer.h.{i}."
                q, k, v = linear(ln(x, p + "ln_1"), p + "attn.c_attn").split(D, -1)
                q, k, v = (t.view(seq_len, HEADS, hd).transpose(0, 1) for t in (q, k, v))
                att = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd) + mask, -1)
                x = x + linear((att @ v).transpose(0, 1).reshape(seq_len, D), p + "attn.c_proj")
                h = torch.nn.functional.gelu(linear(ln(x, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
                x = x + linear(h, p + "mlp.c_proj")
            return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T

        print(json.dumps(score(name, windows, logits_of)), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    else:
        evaluate(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7:])
