#!/usr/bin/env python3
"""Writes tests/loaders/fixtures/quantized_folders/<name>/: a tiny random Llama quantised by the
real libraries, each folder as the library saves it (config.json, model.safetensors), beside an
expected.json holding the library's own float32 dequantisation of every quantised linear as a
digest. tests/loaders/checkpoints/quantized_folder_fixtures_test.cpp opens each folder with
qeval's ModelReader and requires the same float32 bytes (a difference of 0).

The parent: transformers' LlamaForCausalLM (hidden 64, intermediate 128, 2 layers, 4 heads, 2 KV
heads, vocabulary 128, untied head), torch.manual_seed(78), stored in bfloat16 as real checkpoints
are (so the libraries save bf16 scales, which qeval widens). Calibration: 16 sequences of 32
random token ids (seed 78).

Folders (who writes them, and the oracle for expected.json):
  ct_gptq_w4a16_g32         llm-compressor oneshot, GPTQModifier with scheme W4A16's weights (int4
                            symmetric groups) at group_size 32 (W4A16's 128 does not divide the
                            64-wide linears, which llm-compressor refuses), ignore lm_head:
                            compressed-tensors pack-quantized
  ct_gptq_w4a16_asym_g32_actorder
                            the same with W4A16_ASYM's weights and actorder "weight" (llm-compressor
                            0.14 takes "weight" or "static" for GPTQ): packed zero points
  ct_fp8_dynamic            QuantizationModifier(scheme "FP8_DYNAMIC"): float-quantized, FP8 E4M3
                            channel scales
  ct_w8a8_int8              QuantizationModifier(scheme "W8A8"): int-quantized, int8 channel scales
                            (activations dynamic per token: nothing stored for them)
  ct_nvfp4                  QuantizationModifier(scheme "NVFP4") with the calibration data (it
                            calibrates the activations' global scale, saved as input_global_scale):
                            nvfp4-pack-quantized
  bnb_nf4_nested            transformers BitsAndBytesConfig(load_in_4bit, nf4, double quant),
                            quantised by bitsandbytes on the CPU, save_pretrained
  awq_gemm_g32              AutoAWQ quantize (GEMM, 4-bit, groups of 32, zero point), save_quantized
  gptq_v1_asym_g32_desc_act GPTQModel quantize (4-bit, groups of 32, asymmetric, desc_act), save in
                            its default v1 checkpoint format
  Oracles, each the library's own code on the stored tensors read back from model.safetensors:
  compressed-tensors' decompressors (the format's compressor from its registry, decompress) with
  the scales widened to float32 first, NVFP4 through unpack_fp4_from_uint8 and dequantize with
  dtype float32 (the library's defaults are bfloat16); bitsandbytes' QuantState.from_dict with
  dtype float32 and dequantize_4bit on the CPU; AutoAWQ's packing_utils.dequantize_gemm with float32
  scales; GPTQModel's torch QuantLinear with the v1 → v2 zero conversion it applies on load and
  dequantize_weight, float32 scales. Widening first is what qeval does
  (docs/quantized-checkpoints.md): the value the stored codes and scales define, not the library's
  bf16 / fp16 rounding of it.

Skipped: transformers' fine-grained FP8 (FineGrainedFP8Config quantises on load and raises "No GPU
or XPU found. A GPU or XPU is needed for FP8 quantization." on a CPU-only machine) and AutoGPTQ
(archived; its packer needs its CUDA build). Their layouts are held to the libraries' code on
single tensors in tests/quant (make_quantized_checkpoint_fixtures.py).

expected.json, per folder: "library" (the package versions that wrote and dequantised it),
"digest" ("xxh3_64 of the float32 little-endian bytes, row-major [out, in]" — XXH3-64, seed 0,
16 lowercase hex digits, as qeval's common/hash.h prints it; sha256 of the same bytes beside it),
and "linears": Hugging Face module name → {shape, xxh3_64, sha256, first (the first 8 values),
sum (float64 sum)}.

Usage: python make_quantized_folder_fixtures.py [OUT_DIR]  (default the fixtures folder; ONLY=a,b
writes some folders); python make_quantized_folder_fixtures.py --check [DIR]: the oracles alone on
the committed folders against their expected.json (exit 77, "SKIPPED", without the libraries).
Packages: pip install llmcompressor==0.14.1a20261020 compressed-tensors==0.20.0 bitsandbytes==0.50.2
gptqmodel==7.7.0 xxhash; pip install --no-deps autoawq==0.2.9 zstandard (llmcompressor
0.14.1a20261020 is the first that accepts compressed-tensors 0.20: 0.14.0.1 pins 0.19.0; it brings
transformers 5.24.0 and torch 2.15.0). CPU only; about two minutes. The run is deterministic: a
second run writes the same bytes.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile

import torch
import xxhash
from safetensors.torch import load_file

OUT = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] != "--check" else "tests/loaders/fixtures/quantized_folders"
SEED = 78
KEEP = ("config.json", "model.safetensors")  # what qeval reads; the rest (recipe, generation config) is dropped


def versions():
    import importlib.metadata as md
    out = {}
    for p in ("llmcompressor", "compressed-tensors", "bitsandbytes", "transformers", "torch", "safetensors"):
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            pass
    return out


def make_parent(path):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(SEED)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(path)
    return path


def calibration():
    from datasets import Dataset
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(3, 128, (16, 32), generator=g)
    return Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})


def tokenizer():
    """llm-compressor wants a processor beside a dataset; the ids are given, so a word-level one
    over the 128 ids serves (it is not saved: qeval reads no tokenizer from these folders)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {f"t{i}": i for i in range(128)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                   unk_token="t0", bos_token="t1", eos_token="t2", pad_token="t0")


def keep_only(folder):
    for name in os.listdir(folder):
        if name not in KEEP:
            p = os.path.join(folder, name)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)


# ---------------------------------------------------------------- digests
def describe(w):
    w = w.detach().to(torch.float32).contiguous()
    data = w.numpy().astype("<f4").tobytes()
    return {"shape": list(w.shape), "xxh3_64": xxhash.xxh3_64_hexdigest(data), "sha256": hashlib.sha256(data).hexdigest(),
            "first": [float(v) for v in w.flatten()[:8]], "sum": float(w.double().sum())}


def write_expected(folder, library, linears):
    doc = {"library": library,
           "digest": "xxh3_64 (XXH3-64, seed 0) and sha256 of the float32 little-endian bytes, row-major [out, in]",
           "linears": {name: describe(w) for name, w in sorted(linears.items())}}
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- compressed-tensors (llm-compressor)
def ct_oracle(folder):
    """compressed-tensors' decompression of every quantised module stored in folder, float32."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationConfig
    from compressed_tensors.quantization.lifecycle.forward import dequantize
    from compressed_tensors.utils import match_named_modules  # noqa: F401 (present in 0.20; matching below is by name)
    import re

    with open(os.path.join(folder, "config.json")) as f:
        qc = QuantizationConfig.model_validate(json.load(f)["quantization_config"])
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    modules = sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith((".weight_packed", ".weight_scale"))})

    def matches(target, name):
        return (re.match(target[3:], name) is not None) if target.startswith("re:") else target in ("Linear", name)

    out = {}
    for m in modules:
        assert not any(matches(i, m) for i in qc.ignore), m
        scheme = next(s for s in qc.config_groups.values() if any(matches(t, m) for t in s.targets))
        fmt = scheme.format or qc.format
        local = {k[len(m) + 1:]: v for k, v in tensors.items() if k.startswith(m + ".") and "." not in k[len(m) + 1:]}
        if fmt == "nvfp4-pack-quantized":
            N, half = local["weight_packed"].shape
            unpacked = unpack_fp4_from_uint8(local["weight_packed"], N, half * 2, dtype=torch.float32)
            w = dequantize(x_q=unpacked, scale=local["weight_scale"].float(), args=scheme.weights,
                           global_scale=local["weight_global_scale"].float(), dtype=torch.float32)
        else:
            compressor = BaseCompressor.get_value_from_registry(fmt)
            local = {k: (v.float() if k == "weight_scale" else v) for k, v in local.items()}
            w = compressor.decompress(local, scheme)["weight"]
        assert w.dtype == torch.float32, (m, w.dtype)
        out[m] = w
    return out


def llmcompressor_folder(parent, name, recipe, calibrate):
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    model = AutoModelForCausalLM.from_pretrained(parent, dtype=torch.bfloat16)
    kwargs = dict(dataset=calibration(), num_calibration_samples=16, max_seq_length=32, shuffle_calibration_samples=False,
                  processor=tokenizer()) if calibrate else {}
    oneshot(model=model, recipe=recipe, **kwargs)
    model.save_pretrained(folder, save_compressed=True)
    keep_only(folder)
    v = versions()
    library = {"writer": f"llmcompressor {v['llmcompressor']} oneshot, compressed-tensors {v['compressed-tensors']}",
               "oracle": f"compressed-tensors {v['compressed-tensors']} decompressors, scales widened to float32",
               "versions": v}
    write_expected(folder, library, ct_oracle(folder))
    return folder


def gptq(symmetric, actorder):
    """GPTQModifier with scheme W4A16's weights (int4, groups; preset_name_to_scheme("W4A16")) at
    group_size 32: the preset's 128 does not divide the 64-wide linears, which llm-compressor
    refuses."""
    from compressed_tensors.quantization import QuantizationScheme, preset_name_to_scheme
    from llmcompressor.modifiers.quantization import GPTQModifier
    weights = preset_name_to_scheme("W4A16" if symmetric else "W4A16_ASYM", ["Linear"]).weights
    weights = weights.model_copy(update={"group_size": 32, "actorder": actorder})
    return GPTQModifier(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=weights)},
                        ignore=["lm_head"])


def scheme_modifier(scheme):
    def make():
        from llmcompressor.modifiers.quantization import QuantizationModifier
        return QuantizationModifier(targets="Linear", scheme=scheme, ignore=["lm_head"])
    return make


# ---------------------------------------------------------------- bitsandbytes (transformers)
def bnb_folder(parent, name):
    import bitsandbytes as bnb
    import bitsandbytes.functional as F
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    config = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(parent, quantization_config=config, device_map="cpu", dtype=torch.bfloat16)
    model.save_pretrained(folder)
    keep_only(folder)
    v = versions()
    library = {"writer": f"transformers {v['transformers']} BitsAndBytesConfig (nf4, double quant), bitsandbytes "
                         f"{bnb.__version__} on the CPU, save_pretrained",
               "oracle": f"bitsandbytes {bnb.__version__} QuantState.from_dict and dequantize_4bit (CPU), dtype float32",
               "versions": v}
    write_expected(folder, library, bnb_oracle(folder))
    return folder


def bnb_oracle(folder):
    """bitsandbytes' dequantisation of every 4-bit module stored in folder, float32."""
    import bitsandbytes.functional as F
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    out = {}
    for key in sorted(tensors):
        if ".weight.quant_state.bitsandbytes__" not in key:
            continue
        m = key.split(".weight.quant_state.")[0]
        state = {k[len(m) + len(".weight."):]: v for k, v in tensors.items() if k.startswith(m + ".weight.")}
        qs = F.QuantState.from_dict(state, device=torch.device("cpu"))
        qs.dtype = torch.float32  # the value in float32, not rounded to the saved compute dtype
        out[m] = F.dequantize_4bit(tensors[m + ".weight"], qs)
    return out


# ---------------------------------------------------------------- AutoAWQ
def awq_folder(parent, name):
    """AutoAWQ 0.2.9 (deprecated upstream, but it installs with --no-deps and runs on the CPU):
    AutoAWQForCausalLM.quantize with the calibration ids, GEMM packing, groups of 32, save_quantized.
    apply_clip=False: its clip search wants output features a multiple of 64 (v_proj has 32)."""
    import awq
    from awq import AutoAWQForCausalLM
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    model = AutoAWQForCausalLM.from_pretrained(parent, dtype=torch.bfloat16, device_map="cpu")
    ids = torch.randint(3, 128, (16, 32), generator=torch.Generator().manual_seed(SEED)).tolist()
    model.quantize(tokenizer(), quant_config={"zero_point": True, "q_group_size": 32, "w_bit": 4, "version": "GEMM"},
                   calib_data=ids, max_calib_samples=16, max_calib_seq_len=32, apply_clip=False)
    model.save_quantized(folder)
    keep_only(folder)
    v = versions()
    v["autoawq"] = awq.__version__
    library = {"writer": f"AutoAWQ {awq.__version__} quantize (GEMM, w_bit 4, q_group_size 32, zero_point) and "
                         "save_quantized, on the CPU",
               "oracle": f"AutoAWQ {awq.__version__} packing_utils.dequantize_gemm, scales widened to float32",
               "versions": v}
    write_expected(folder, library, awq_oracle(folder))
    return folder


def awq_oracle(folder):
    """AutoAWQ's dequantize_gemm of every module stored in folder, scales widened to float32."""
    from awq.utils.packing_utils import dequantize_gemm
    with open(os.path.join(folder, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    out = {}
    for key in sorted(tensors):
        if key.endswith(".qweight"):
            m = key[:-len(".qweight")]
            w = dequantize_gemm(tensors[m + ".qweight"], tensors[m + ".qzeros"], tensors[m + ".scales"].float(),
                                qc["bits"], qc["group_size"])
            out[m] = w.t().contiguous()  # dequantize_gemm gives [in, out]
    return out


# ---------------------------------------------------------------- GPTQModel
def gptq_folder(parent, name):
    """GPTQModel (pure Python since 7.x; its model loader wants GPTQMODEL_CPU_WORKERS of at least 2, which a 2-core machine does not get by default) on the CPU:
    4-bit, groups of 32, asymmetric, desc_act (activation order: g_idx permuted), saved in its
    default checkpoint format (v1, "gptq": zero − 1 stored)."""
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    import gptqmodel
    from gptqmodel import GPTQModel, QuantizeConfig
    folder = os.path.join(OUT, name)
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:  # GPTQModel loads a tokenizer from the model folder
        shutil.copytree(parent, tmp, dirs_exist_ok=True)
        tokenizer().save_pretrained(tmp)
        qc = QuantizeConfig(bits=4, group_size=32, desc_act=True, sym=False, offload_to_disk=False)
        model = GPTQModel.load(tmp, qc, device="cpu")
        ids = torch.randint(3, 128, (16, 32), generator=torch.Generator().manual_seed(SEED))
        model.quantize([{"input_ids": r.unsqueeze(0), "attention_mask": torch.ones(1, 32, dtype=torch.long)} for r in ids],
                       batch_size=1)
        model.save(folder)
    keep_only(folder)
    v = versions()
    v["gptqmodel"] = gptqmodel.__version__
    library = {"writer": f"GPTQModel {gptqmodel.__version__} quantize (4-bit, group_size 32, sym false, desc_act) and "
                         "save, on the CPU",
               "oracle": f"GPTQModel {gptqmodel.__version__} TorchLinear: convert_gptq_v1_to_v2_format_module, "
                         "dequantize_weight, scales widened to float32",
               "versions": v}
    write_expected(folder, library, gptq_oracle(folder))
    return folder


def gptq_oracle(folder):
    """GPTQModel's own read of every module stored in folder: its torch QuantLinear with the stored
    buffers, the v1 → v2 zero conversion it applies on load, dequantize_weight; float32 scales."""
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module
    with open(os.path.join(folder, "config.json")) as f:
        qc = json.load(f)["quantization_config"]
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    out = {}
    for key in sorted(tensors):
        if not key.endswith(".qweight"):
            continue
        m = key[:-len(".qweight")]
        K, N = tensors[m + ".g_idx"].shape[0], tensors[m + ".scales"].shape[1]
        q = TorchLinear(bits=qc["bits"], group_size=qc["group_size"], sym=qc["sym"], desc_act=qc["desc_act"],
                        in_features=K, out_features=N, bias=False)
        for field in ("qweight", "qzeros", "g_idx"):
            getattr(q, field).data.copy_(tensors[m + "." + field])
        q.scales = tensors[m + ".scales"].float()
        if qc.get("checkpoint_format", qc.get("format", "gptq")) == "gptq":
            convert_gptq_v1_to_v2_format_module(q, qc["bits"], torch.int32)
        q.post_init()
        out[m] = q.dequantize_weight().t().contiguous()  # [in, out] → [out, in]
    return out


# ---------------------------------------------------------------- --check: the oracles on the committed folders
ORACLES = {"ct_": (ct_oracle, "compressed_tensors"), "bnb_": (bnb_oracle, "bitsandbytes"), "awq_": (awq_oracle, "awq"),
           "gptq_": (gptq_oracle, "gptqmodel")}


def check(root):
    """Runs each library's dequantisation on the committed folders and compares it with their
    expected.json. Exit 0 when all agree, 1 on a difference, 77 (SKIPPED, with the reason) when a
    library is not installed."""
    import importlib.util
    missing = sorted({mod for _, mod in ORACLES.values() if importlib.util.find_spec(mod) is None})
    if missing:
        print(f"SKIPPED: {', '.join(missing)} not installed (pip install compressed-tensors==0.20.0 bitsandbytes "
              "gptqmodel==7.7.0; autoawq==0.2.9 --no-deps)")
        return 77
    bad = 0
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        oracle = next(fn for prefix, (fn, _) in ORACLES.items() if name.startswith(prefix))
        with open(os.path.join(folder, "expected.json")) as f:
            expected = json.load(f)["linears"]
        got = {m: describe(w) for m, w in oracle(folder).items()}
        for m in sorted(set(expected) | set(got)):
            e, g = expected.get(m), got.get(m)
            if e is None or g is None or e["xxh3_64"] != g["xxh3_64"] or e["shape"] != g["shape"]:
                bad += 1
                print(f"{name} {m}: expected {e and (e['shape'], e['xxh3_64'], e['first'][:4])}, "
                      f"the library gives {g and (g['shape'], g['xxh3_64'], g['first'][:4])}")
        print(f"{name}: {len(got)} linears checked")
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed")
    return 1 if bad else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--check":
        sys.exit(check(sys.argv[2] if len(sys.argv) > 2 else "tests/loaders/fixtures/quantized_folders"))
    os.makedirs(OUT, exist_ok=True)
    only = [s for s in os.environ.get("ONLY", "").split(",") if s]
    jobs = [("ct_gptq_w4a16_g32", lambda p, n: llmcompressor_folder(p, n, gptq(True, None), True)),
            ("ct_gptq_w4a16_asym_g32_actorder", lambda p, n: llmcompressor_folder(p, n, gptq(False, "weight"), True)),
            ("ct_fp8_dynamic", lambda p, n: llmcompressor_folder(p, n, scheme_modifier("FP8_DYNAMIC")(), False)),
            ("ct_w8a8_int8", lambda p, n: llmcompressor_folder(p, n, scheme_modifier("W8A8")(), True)),
            ("ct_nvfp4", lambda p, n: llmcompressor_folder(p, n, scheme_modifier("NVFP4")(), True)),
            ("bnb_nf4_nested", bnb_folder),
            ("awq_gemm_g32", awq_folder),
            ("gptq_v1_asym_g32_desc_act", gptq_folder)]
    with tempfile.TemporaryDirectory() as tmp:
        parent = make_parent(os.path.join(tmp, "parent"))
        for name, job in jobs:
            if only and name not in only:
                continue
            print(name, job(parent, name), flush=True)


if __name__ == "__main__":
    main()
