"""Hugging Face folders whose block linears are stored by one quantisation method (GPTQ, AWQ,
compressed-tensors, fine-grained FP8, bitsandbytes), written with struct alone: the tensor names,
dtypes, shapes and configs of tests/loaders/checkpoints/quantized_checkpoint_test.cpp, codes and
scales from a fixed random sequence. Shared by tests/hardening/probe.py (group qfolder: the tiny
Llama fixture) and fuzz/make_seeds (the quantized_* targets: a model small enough for a seed).

    QF_METHODS[method] = (quantization_config, store(N, K, rand) -> {field: [dtype, shape, bytes]})
    quantized_tensors(plain, linears, method) -> every tensor, the linears stored by method
    st_read(path) / st_bytes(tensors)         safetensors as {name: [dtype, shape, bytes]}
"""
import json
import math
import random
import struct
from pathlib import Path

DELETE = object()  # a key to leave out (qf_state's overrides; the probe's edits)

ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "I8": 1, "F8_E4M3": 1, "I16": 2, "F64": 8}


def st_read(path):
    b = Path(path).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    out = {}
    for name, v in json.loads(b[8:8 + n]).items():
        if name != "__metadata__":
            out[name] = [v["dtype"], list(v["shape"]), b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]]
    return out


def st_bytes(tensors):
    head, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(head).encode()
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


class QfRand:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def words(self, shape):
        return ["I32", list(shape), struct.pack(f"<{math.prod(shape)}I", *[self.r.getrandbits(32) for _ in range(math.prod(shape))])]

    def bytes(self, shape, lo=0, hi=255, dtype="U8"):
        return [dtype, list(shape), bytes(self.r.randint(lo, hi) for _ in range(math.prod(shape)))]

    def e4m3(self, shape):  # |value| <= 1.875 (exponent field <= 7), never a NaN code
        return ["F8_E4M3", list(shape), bytes(self.r.randint(0, 0x3f) | (0x80 * self.r.randint(0, 1)) for _ in range(math.prod(shape)))]

    def scales(self, shape, dtype="F16"):
        v = [self.r.random() * 0.01 + 0.001 for _ in range(math.prod(shape))]
        return qf_floats(v, shape, dtype)


def qf_floats(v, shape, dtype="F32"):
    if dtype == "F16":
        return ["F16", list(shape), struct.pack(f"<{len(v)}e", *v)]
    if dtype == "BF16":
        return ["BF16", list(shape), b"".join(struct.pack("<f", x)[2:4] for x in v)]
    return ["F32", list(shape), struct.pack(f"<{len(v)}f", *v)]


def qf_ints(v, shape, dtype="I64"):
    code = {"I64": "q", "I32": "i", "I8": "b", "U8": "B"}[dtype]
    return [dtype, list(shape), struct.pack(f"<{len(v)}{code}", *v)]


def qf_state(N, K, **over):
    s = dict({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [N, K], "nested_blocksize": 256,
              "nested_dtype": "float32", "nested_offset": 0.03125}, **over)
    return {k: v for k, v in s.items() if v is not DELETE}


def qf_bnb_nf4(N, K, r):
    blocks = (N * K + 63) // 64
    st = json.dumps(qf_state(N, K)).encode()
    return {"weight": r.bytes([N * K // 2, 1]), "weight.absmax": r.bytes([blocks]),
            "weight.nested_absmax": r.scales([(blocks + 255) // 256], "F32"),
            "weight.nested_quant_map": qf_floats([-1 + 2 * i / 255 for i in range(256)], [256]),
            "weight.quant_map": qf_floats([0.0] * 16, [16]), "weight.quant_state.bitsandbytes__nf4": ["U8", [len(st)], st]}


def qf_ct(fmt, weights):
    return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed", "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None}}}


# method: (quantization_config, store(N, K, rand) -> {field: [dtype, shape, bytes]})
QF_METHODS = {
    "gptq-v2": ({"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": False, "sym": True, "checkpoint_format": "gptq_v2"},
                lambda N, K, r: {"qweight": r.words([K * 4 // 32, N]), "qzeros": r.words([K // 16, N * 4 // 32]),
                                 "scales": r.scales([K // 16, N])}),
    "gptq-v1": ({"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": False, "sym": False},
                lambda N, K, r: {"qweight": r.words([K * 4 // 32, N]), "qzeros": r.words([K // 16, N * 4 // 32]),
                                 "scales": r.scales([K // 16, N]), "g_idx": qf_ints([k // 16 for k in range(K)], [K], "I32")}),
    "awq": ({"quant_method": "awq", "bits": 4, "group_size": 16, "zero_point": True, "version": "gemm"},
            lambda N, K, r: {"qweight": r.words([K, N // 8]), "qzeros": r.words([K // 16, N // 8]), "scales": r.scales([K // 16, N])}),
    "ct-pack": (qf_ct("pack-quantized", {"num_bits": 4, "type": "int", "symmetric": False, "strategy": "group", "group_size": 16}),
                lambda N, K, r: {"weight_packed": r.words([N, K * 4 // 32]), "weight_scale": r.scales([N, K // 16], "BF16"),
                                 "weight_zero_point": r.words([(N * 4 + 31) // 32, K // 16]), "weight_shape": qf_ints([N, K], [2])}),
    "ct-fp8": (qf_ct("float-quantized", {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}),
               lambda N, K, r: {"weight": r.e4m3([N, K]), "weight_scale": r.scales([N, 1], "BF16")}),
    "ct-nvfp4": (qf_ct("nvfp4-pack-quantized", {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group",
                                                "group_size": 16}),
                 lambda N, K, r: {"weight_packed": r.bytes([N, K // 2]), "weight_scale": r.bytes([N, K // 16], 0x20, 0x3f, "F8_E4M3"),
                                  "weight_global_scale": qf_floats([8.0], [1])}),
    "fp8-block": ({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"},
                  lambda N, K, r: {"weight": r.e4m3([N, K]), "weight_scale_inv": r.scales([(N + 127) // 128, (K + 127) // 128], "F32")}),
    "bnb-nf4": ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
                qf_bnb_nf4),
    "bnb-int8": ({"quant_method": "bitsandbytes", "load_in_8bit": True},
                 lambda N, K, r: {"weight": qf_ints([r.r.randint(-127, 127) for _ in range(N * K)], [N, K], "I8"),
                                  "SCB": r.scales([N], "F32")}),
}


def llama_linears(layers, hidden, kv_dim, intermediate):
    """{module: (N, K)} of a Llama's block linears."""
    out = {}
    for i in range(layers):
        for m, nk in [("self_attn.q_proj", (hidden, hidden)), ("self_attn.k_proj", (kv_dim, hidden)),
                      ("self_attn.v_proj", (kv_dim, hidden)), ("self_attn.o_proj", (hidden, hidden)),
                      ("mlp.gate_proj", (intermediate, hidden)), ("mlp.up_proj", (intermediate, hidden)),
                      ("mlp.down_proj", (hidden, intermediate))]:
            out[f"model.layers.{i}.{m}"] = nk
    return out


def quantized_tensors(plain, linears, method, seed=78):
    """plain: {name: [dtype, shape, bytes]} of a float model; each module of linears loses its
    .weight and gains the fields `method` stores."""
    t = {k: list(v) for k, v in plain.items()}
    r = QfRand(seed)
    for module, (N, K) in linears.items():
        del t[module + ".weight"]
        for field, v in QF_METHODS[method][1](N, K, r).items():
            t[module + "." + field] = v
    return t
