#!/usr/bin/env python3
"""Bad-input probe (issue 46): runs qeval on several hundred hostile but realistic inputs and
classifies each outcome.

Usage: tests/hardening/probe.py QEVAL_BINARY [OUT.md] [--jobs=N] [--timeout=S] [--messages=FILE] [--groups=a,b]
       (run from anywhere; ../shared/data must hold stories260K and the tiny HF fixtures)

Every input is built in a temporary folder from committed tiny files (tests/model/fixtures,
../shared/data/fixtures, stories260K). Outcomes:
  clean refusal      exit status 2 (1 for a gate violation where one is expected) with one line
                     "qeval: error: ..." naming what the case says must be named
  crash              killed by a signal, a sanitizer report, std::terminate, or a status >= 128
  hang               still running after the timeout
  silent wrong       exit 0 where the input must be refused (or exit 0 without the note a
                     capped input must print)
  unclear message    refused, but the message lacks a fragment the case requires, is not one line
                     from main, or shows C++ internals (json.exception, std::, stoll, a 309-digit
                     bound)
  accepted with note exit 0 with the note the case requires (capped --threads)
  accepted           exit 0 with the output the case requires (a well-formed file of a new type); a refusal
                     of such a case counts as unclear, an exit 0 without that output as silent wrong
Cases of the group python run tests/hardening/python_case.py (the package in python/): an exception other
than QevalError or the package's own ValueError escaping it counts as a crash.
Groups of the surfaces of issues 61-64 (formats, kv, ggml, ggufq, python) and 77-78 (qfolder: quantised Hugging Face
folders; calib: GPTQ / AWQ specs and the calibration options; imatrix: llama.cpp importance matrices) need no records
made first:
  tests/hardening/probe.py build/qeval --jobs=2 --groups=formats,kv,ggml,ggufq,python   (ctest: hardening_probe)
  tests/hardening/probe.py build/qeval --jobs=2 --groups=qfolder,calib,imatrix   (about 7 minutes on 2 cores: not in ctest)
  tests/hardening/probe.py build/qeval --jobs=2 --groups=tasks   (qeval hellaswag's task files and options)
The table of counts and every non-clean case go to OUT.md (default: stdout); --messages=FILE also
writes every case's outcome and the last line qeval printed, for reading the messages themselves.
"""
import bz2
import concurrent.futures
import copy
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY_DRIVER = Path(__file__).resolve().parent / "python_case.py"
DATA = Path(os.environ.get("QEVAL_DATA_DIR", REPO.parent / "shared" / "data"))
args = [a for a in sys.argv[1:] if not a.startswith("--")]
opts = dict(a.split("=", 1) if "=" in a else (a, "1") for a in sys.argv[1:] if a.startswith("--"))
if not args:
    sys.exit(__doc__)
QEVAL = str(Path(args[0]).resolve())
OUT = args[1] if len(args) > 1 else None
JOBS = int(opts.get("--jobs", "2"))
WANTED = set(opts["--groups"].split(",")) if "--groups" in opts else None
# The groups that read the records, states and series made once at the start; a run of other groups
# only (--groups) does not make them.
MADE_GROUPS = {"check", "compare", "plot", "tolerance", "merge", "resume", "out", "band", "names", "seriesrec", "rules",
               "series", "serieslist", "watch", "seriestrain"}
MAKE = WANTED is None or bool(WANTED & MADE_GROUPS)
TIMEOUT = float(opts.get("--timeout", "120"))
TOKENIZER = "models/stories260K/tok512.bin"
EVAL = f"eval -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 4 --schemes full,int8-coarse --no-attention-stats"
TRAIN = (f"train -q --tokenizer {TOKENIZER} --d-model 16 --n-layers 1 --n-heads 2 --seq-len 16 --batch-size 2 "
         "--steps 2 --warmup 1 --val-windows 2")

cases = []  # (name, build(dir) -> argv string, expect, fragments)


def case(name, build, fragments=(), expect="refuse", status=2):
    cases.append({"name": name, "build": build, "fragments": list(fragments), "expect": expect, "status": status})


def write(d, name, data):
    p = Path(d) / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


def family(d, fixture, edit=None):
    src = REPO / "tests/model/fixtures" / fixture
    if not src.exists():
        src = DATA / "fixtures" / fixture
    dst = Path(d) / fixture
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "reference.safetensors":
            shutil.copyfile(f, dst / f.name)
    if edit:
        j = json.loads((dst / "config.json").read_text())
        edit(j)
        (dst / "config.json").write_text(json.dumps(j, indent=2, allow_nan=True))
    return str(dst)


def setter(key, value):
    def edit(j):
        if value is DELETE:
            j.pop(key, None)
        else:
            j[key] = value
    return edit


from quantized_folders import (DELETE, QF_METHODS, ST_SIZE, llama_linears, qf_floats, qf_ints,  # noqa: E402
                               qf_state, quantized_tensors, st_bytes, st_read)

# ---- HF configs: every family, every key qeval reads, several bad values each -----------------
ROTARY = {"llama": "tiny-llama-hf", "qwen2": "tiny-qwen2-hf", "qwen3": "tiny-qwen3-hf", "mistral": "tiny-mistral-hf",
          "gemma3": "tiny-gemma3-hf", "phi3": "tiny-phi3-hf"}
SIZE_KEYS = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads"]
BAD_SIZES = [0, -3, "12", 2.5, 2 ** 40]
for fam, fixture in ROTARY.items():
    for key in SIZE_KEYS:
        for v in BAD_SIZES:
            if fam == "gemma3" and v == "12" and key == "num_key_value_heads":
                pass
            case(f"hf-{fam}-{key}={v!r}", lambda d, f=fixture, k=key, v=v: "inspect --json " + family(d, f, setter(k, v)),
                 ["config.json", f'"{key}"'])
    for v in [0, -1.0, 1e400 if False else -1e30, "10000"]:
        case(f"hf-{fam}-rope_theta={v!r}", lambda d, f=fixture, v=v: "inspect --json " + family(d, f, setter("rope_theta", v)),
             ["config.json", '"rope_theta"'])
    for v in [0, -1e-6, "1e-6"]:
        case(f"hf-{fam}-rms_norm_eps={v!r}", lambda d, f=fixture, v=v: "inspect --json " + family(d, f, setter("rms_norm_eps", v)),
             ["config.json", '"rms_norm_eps"'])
    for v in [-4, 0, "64"]:
        case(f"hf-{fam}-head_dim={v!r}", lambda d, f=fixture, v=v: "inspect --json " + family(d, f, setter("head_dim", v)),
             ["config.json", '"head_dim"'])
    for v, frag in [({"factor": 8.0}, "without a"), ({"rope_type": "yarn", "factor": 2}, "not supported"),
                    ({"type": "dynamic"}, "not supported"), ({"rope_type": "wobble"}, "unknown"), ("linear", '"rope_scaling"'),
                    ([1], '"rope_scaling"')]:
        case(f"hf-{fam}-rope_scaling={json.dumps(v)}",
             lambda d, f=fixture, v=v: "inspect --json " + family(d, f, setter("rope_scaling", v)), ["config.json", frag])
    case(f"hf-{fam}-kv-not-dividing", lambda d, f=fixture: "inspect --json " + family(
        d, f, lambda j: j.update(num_attention_heads=4, num_key_value_heads=3)), ["not a multiple"])
    case(f"hf-{fam}-bos-beyond-vocab", lambda d, f=fixture: "inspect --json " + family(d, f, setter("bos_token_id", 10 ** 7)),
         ['"bos_token_id"', "outside the vocabulary"])
for fam in ["mistral", "phi3", "gemma3"]:
    for v in [0, -8, "4", 1.5]:
        case(f"hf-{fam}-sliding_window={v!r}",
             lambda d, f=ROTARY[fam], v=v: "inspect --json " + family(d, f, setter("sliding_window", v)), ['"sliding_window"'])
for fam in ["qwen2", "qwen3"]:
    for v in [0, -8]:
        case(f"hf-{fam}-sliding_window={v!r}", lambda d, f=ROTARY[fam], v=v: "inspect --json " + family(
            d, f, lambda j: j.update(use_sliding_window=True, sliding_window=v)), ['"sliding_window"'])
for key, vals in {"query_pre_attn_scalar": [0, -256], "final_logit_softcapping": [0, -30.0],
                  "attn_logit_softcapping": [0.0, -1], "rope_local_base_freq": [0, -10000],
                  "sliding_window_pattern": [0, -6]}.items():
    for v in vals:
        def edit(j, key=key, v=v):
            if key == "sliding_window_pattern":
                j.pop("layer_types", None)
            j[key] = v
        case(f"hf-gemma3-{key}={v!r}", lambda d, e=edit: "inspect --json " + family(d, "tiny-gemma3-hf", e), [f'"{key}"'])
for v in [0, -0.5, 1.5, 0.001, "0.5"]:
    case(f"hf-phi3-partial_rotary_factor={v!r}",
         lambda d, v=v: "inspect --json " + family(d, "tiny-phi3-hf", setter("partial_rotary_factor", v)), ['"partial_rotary_factor"'])
for key, vals in {"rotary_pct": [0, 2.0, -1, 0.001], "rotary_emb_base": [0, -1], "layer_norm_eps": [0, -1e-5],
                  "num_hidden_layers": [0, -1], "hidden_size": [0, 7], "hidden_act": ["swish", 3]}.items():
    for v in vals:
        case(f"hf-neox-{key}={v!r}", lambda d, k=key, v=v: "inspect --json " + family(d, "tiny-gpt-neox-hf", setter(k, v)),
             [f'{key}'])
for key, vals in {"max_position_embeddings": [0, -1], "ffn_dim": [0, -1], "num_hidden_layers": [0],
                  "num_attention_heads": [3, 0], "word_embed_proj_dim": [8], "activation_function": ["gelu"]}.items():
    for v in vals:
        case(f"hf-opt-{key}={v!r}", lambda d, k=key, v=v: "inspect --json " + family(d, "tiny-opt-hf", setter(k, v)), [key])
for key, vals in {"n_layer": [0, -1], "n_embd": [0, 2 ** 40], "n_head": [0, 5], "n_positions": [-1],
                  "layer_norm_epsilon": [0, -1], "n_inner": [-3], "activation_function": ["relu"]}.items():
    for v in vals:
        case(f"hf-gpt2-{key}={v!r}", lambda d, k=key, v=v: "inspect --json " + family(d, "tiny-gpt2-hf", setter(k, v)), [key])
case("hf-config-truncated", lambda d: (lambda p: (Path(p, "config.json").write_text('{"vocab_size": 1'), "inspect " + p)[1])(
    family(d, "tiny-llama-hf")), ["config.json", "malformed JSON"])
case("hf-config-list", lambda d: (lambda p: (Path(p, "config.json").write_text("[]"), "inspect " + p)[1])(
    family(d, "tiny-llama-hf")), ["config.json"])
case("hf-unknown-arch", lambda d: "inspect " + family(d, "tiny-llama-hf", setter("architectures", ["BertModel"])), ["BertModel"])
case("hf-arch-nul", lambda d: "inspect " + family(d, "tiny-llama-hf", setter("architectures", ["Llama\u0000Evil"])),
     ["\\u0000"])
case("hf-no-arch", lambda d: "inspect " + family(d, "tiny-llama-hf", lambda j: (j.pop("architectures"), j.pop("model_type"))),
     ["config.json"])

# ---- qeval config.json ----------------------------------------------------------------------------
QEVAL_CFG = {"format": "qeval", "architecture": "llama", "vocab_size": 32, "d_model": 16, "d_ff": 32, "n_layers": 2,
             "n_heads": 4, "n_kv_heads": 2, "max_seq_len": 64, "norm": "rmsnorm", "norm_eps": 1e-5, "position": "rope",
             "rope_theta": 1e4, "attention_softmax": "softmax", "mlp": "swiglu"}
for key, vals in {"n_layers": [0, -1, "2"], "d_model": [0, 15], "norm": ["batch", 1], "norm_eps": [0, -1],
                  "rope_theta": [0, -1], "position": ["alibi"], "mlp": ["tanh", None], "n_kv_heads": [3, 0, 8],
                  "head_size": [0, -4], "rotary_dim": [3, 0, 64], "attention_windows": [[4], [4, -1]],
                  "bos_id": [32, -1], "eos_id": [99], "rope_theta_local": [0], "attention_scale": [-1],
                  "embedding_scale": [0], "final_logit_softcap": [0, -1], "max_seq_len": [-1]}.items():
    for v in vals:
        def build(d, key=key, v=v):
            j = dict(QEVAL_CFG)
            if v is None:
                j.pop(key)
            else:
                j[key] = v
            return "inspect --json " + str(Path(write(d, "m/config.json", json.dumps(j))).parent)
        case(f"qeval-{key}={v!r}", build, ["config.json", key])

# ---- GGUF metadata --------------------------------------------------------------------------------

def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, value):
    body = gguf_str(key) + struct.pack("<I", vtype)
    fmt = {4: "<I", 5: "<i", 6: "<f", 12: "<d"}
    if vtype == 8:
        return body + gguf_str(value)
    return body + struct.pack(fmt[vtype], value)


def gguf_file(kvs, arch="llama", D=8, F=12, V=6, kvd=4):
    tensors = [("token_embd.weight", [D, V]), ("blk.0.attn_norm.weight", [D]), ("blk.0.attn_q.weight", [D, D]),
               ("blk.0.attn_k.weight", [D, kvd]), ("blk.0.attn_v.weight", [D, kvd]), ("blk.0.attn_output.weight", [D, D]),
               ("blk.0.ffn_norm.weight", [D]), ("blk.0.ffn_gate.weight", [D, F]), ("blk.0.ffn_up.weight", [D, F]),
               ("blk.0.ffn_down.weight", [F, D]), ("output_norm.weight", [D])]
    infos, offset, blobs = b"", 0, []
    for name, ne in tensors:
        n = 4 * math.prod(ne)
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        infos += struct.pack("<IQ", 0, offset)
        pad = (-n) % 32
        blobs.append(bytes(n + pad))
        offset += n + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += bytes((-len(head)) % 32)
    return head + b"".join(blobs)


def gguf_meta(arch="llama", **over):
    base = {"general.architecture": (8, arch), f"{arch}.embedding_length": (4, 8), f"{arch}.feed_forward_length": (4, 12),
            f"{arch}.block_count": (4, 1), f"{arch}.attention.head_count": (4, 2), f"{arch}.attention.head_count_kv": (4, 1),
            f"{arch}.context_length": (4, 16), f"{arch}.attention.layer_norm_rms_epsilon": (6, 1e-5),
            f"{arch}.rope.freq_base": (6, 10000.0)}
    for k, v in over.items():
        k = k.replace("__", ".").replace("ARCH", arch)
        if v is None:
            base.pop(k, None)
        else:
            base[k] = v
    return [gguf_kv(k, t, v) for k, (t, v) in base.items()]


GG = {"ARCH__block_count": [(4, 0), (5, -1)], "ARCH__attention__head_count": [(4, 0), (4, 3)],
      "ARCH__attention__head_count_kv": [(4, 0), (4, 5)], "ARCH__embedding_length": [(4, 0), (4, 7)],
      "ARCH__feed_forward_length": [(4, 0)], "ARCH__rope__freq_base": [(6, 0.0), (6, -1.0), (6, float("nan")), (6, float("inf"))],
      "ARCH__attention__layer_norm_rms_epsilon": [(6, 0.0), (6, -1e-5), None], "ARCH__attention__key_length": [(4, 0), (4, 3)],
      "ARCH__rope__scaling__type": [(8, "yarn"), (8, "bogus")], "ARCH__rope__dimension_count": [(4, 2)],
      "ARCH__context_length": [(5, -5)], "tokenizer__ggml__bos_token_id": [(5, -1)]}
for key, vals in GG.items():
    for v in vals:
        label = key.replace("__", ".").replace("ARCH", "llama")
        case(f"gguf-{label}={v!r}", lambda d, k=key, v=v: "inspect --json " + write(d, "t.gguf", gguf_file(gguf_meta(**{k: v}))),
             ["t.gguf", label])
for v in [(4, 0), (5, -4)]:
    case(f"gguf-gemma3-sliding_window={v!r}", lambda d, v=v: "inspect --json " + write(
        d, "t.gguf", gguf_file(gguf_meta("gemma3", ARCH__attention__sliding_window=v), arch="gemma3")),
        ["t.gguf", "gemma3.attention.sliding_window"])
case("gguf-arch-nul", lambda d: "inspect " + write(d, "t.gguf", gguf_file(gguf_meta(general__architecture=(8, b"bert\0x")))),
     ["t.gguf", "\\0"])
case("gguf-arch-escape", lambda d: "inspect " + write(d, "t.gguf", gguf_file(gguf_meta(general__architecture=(8, "\x1b[31mred")))),
     ["t.gguf", "\\x1b"])
for cut in [0, 3, 20, 100, 400]:
    case(f"gguf-truncated-{cut}", lambda d, c=cut: "inspect " + write(d, "t.gguf", gguf_file(gguf_meta())[:c] or b"G"), ["t.gguf"])
case("gguf-eval-bad-theta", lambda d: "eval -q --model " + write(
    d, "t.gguf", gguf_file(gguf_meta(ARCH__rope__freq_base=(6, -1.0)))) + " --out " + str(Path(d) / "o.json"),
    ["t.gguf", "rope.freq_base"])

# ---- llama2.c headers -------------------------------------------------------------------------------
STORIES = (DATA / "models/stories260K/stories260K.bin").read_bytes()
for idx, name in enumerate(["dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"]):
    for v in [0, -7, 3, 1 << 30]:
        if name == "vocab_size" and v == -7:
            continue
        def build(d, idx=idx, v=v):
            b = bytearray(STORIES)
            b[4 * idx:4 * idx + 4] = struct.pack("<i", v)
            return "inspect --model " + write(d, "m.bin", bytes(b))
        case(f"llama2c-{name}={v}", build, ["m.bin"])
for n in [0, 10, 28, 1000, len(STORIES) - 4]:
    case(f"llama2c-truncated-{n}", lambda d, n=n: "inspect --model " + write(d, "m.bin", STORIES[:n]), ["m.bin"])
case("llama2c-extra", lambda d: "eval -q --model " + write(d, "m.bin", STORIES + b"junk") + f" --tokenizer {TOKENIZER}",
     ["m.bin", "extra"])

# ---- safetensors / checkpoint folders ---------------------------------------------------------------

def st_edit(d, fixture, fn):
    p = family(d, fixture)
    f = Path(p) / "model.safetensors"
    f.write_bytes(fn(f.read_bytes()))
    return p


for label, fn in {"truncated": lambda b: b[:-64], "empty": lambda b: b"", "header-huge": lambda b: struct.pack("<Q", 1 << 62) + b[8:],
                  "header-zero": lambda b: struct.pack("<Q", 0) + b[8:], "header-not-json": lambda b: b[:8] + b"!" + b[9:],
                  "extra-bytes": lambda b: b + b"\0" * 7}.items():
    case(f"safetensors-{label}", lambda d, fn=fn: "inspect " + st_edit(d, "tiny-mistral-hf", fn), ["model.safetensors"])
TOK = struct.pack("<64H", *[i % 50 for i in range(64)])
for fam, key, val in [("tiny-mistral-hf", "intermediate_size", 48), ("tiny-qwen2-hf", "hidden_size", 32),
                      ("tiny-gemma3-hf", "num_hidden_layers", 3), ("tiny-opt-hf", "vocab_size", 81)]:
    case(f"eval-shape-{fam}-{key}", lambda d, f=fam, k=key, v=val: "eval -q --model " + family(d, f, setter(k, v)) +
         " --data " + write(d, "t.bin", TOK) + " --seq-len 8 --max-windows 1 --schemes full --out " + str(Path(d) / "o.json"),
         [fam])

# ---- text and token files ---------------------------------------------------------------------------
TEXTS = {"empty.txt": b"", "nul.txt": b"\0" * 5000, "nul-late.txt": b"Once upon a time.\n\nA cat\0 sat.\n",
         "bad.json.gz": b"\x1f\x8b\x08\0garbage", "bad.jsonl.zst": b"\x28\xb5\x2f\xfd garbage", "list.jsonl": b"[1,2]\n",
         "nofield.jsonl": b'{"body": "x"}\n', "badjson.jsonl": b'{"text": "x"\n', "short.txt": b"Hi.",
         "intfield.jsonl": b'{"text": 5}\n', "latin1.txt": "caf\xe9 " .encode("latin-1") * 3}
for name, data in TEXTS.items():
    case(f"data-{name}", lambda d, n=name, b=data: EVAL + " --data " + write(d, n, b) + " --out " + str(Path(d) / "o.json"),
         [name] if name not in ("empty.txt", "short.txt", "latin1.txt") else ["window"])
case("data-missing", lambda d: EVAL + " --data " + str(Path(d) / "none.txt") + " --out " + str(Path(d) / "o.json"), ["none.txt"])
case("data-folder", lambda d: (Path(d, "dir.txt").mkdir(), EVAL + " --data " + str(Path(d) / "dir.txt"))[1], ["dir.txt"])
for name, data in {"odd.bin": b"\1" * 33, "big-id.bin": struct.pack("<20H", *([1] * 10 + [4000] + [1] * 9)),
                   "empty.bin": b"", "three.bin": struct.pack("<3H", 1, 2, 3)}.items():
    case(f"tokens-{name}", lambda d, n=name, b=data: "eval -q --model models/stories260K/stories260K.bin --data " +
         write(d, n, b) + " --seq-len 16 --schemes full --out " + str(Path(d) / "o.json"),
         [name] if name != "three.bin" else ["window"])

# ---- options ------------------------------------------------------------------------------------------
OPTS = [("--seq-len", ["1", "-1", "x", "1e3", "99999999999"]), ("--max-windows", ["-2", "x"]),
        ("--batch-size", ["0", "-1", "1e9"]), ("--threads", ["-1", "x"]), ("--sink-eps", ["nan", "inf", "-1", "1", "x"]),
        ("--sink-T", ["0", "-5"]), ("--stride", ["-1"]), ("--seed", ["-9", "x"]), ("--checkpoint-seconds", ["nan", "-1"]),
        ("--protocol", ["nope", "/etc/passwd"]), ("--schemes", ["int3", "full,full", ""]), ("--stats-for", ["some"]),
        ("--dtype", ["fp8"]), ("--device", ["tpu", "cuda:x"]), ("--shard", ["2/2", "0/0", "a/b", "1/-2"]),
        ("--transform", ["spin", "rotate:kind=x"]), ("--text-split", ["word"]), ("--token-dtype", ["int8"]),
        ("--separator", ["tab"]), ("--bos", ["maybe"])]
for opt, vals in OPTS:
    for v in vals:
        case(f"eval{opt}={v}", lambda d, o=opt, v=v: EVAL + f" {o}={v} --out " + str(Path(d) / "o.json"), [])
case("eval-out-folder", lambda d: (Path(d, "o.json").mkdir(), EVAL + " --out " + str(Path(d) / "o.json"))[1], ["--out", "folder"])
case("eval-out-no-parent", lambda d: EVAL + " --out " + str(Path(d) / "a/b/o.json"), ["--out", "does not exist"])
case("eval-plots-file", lambda d: EVAL + " --plots " + write(d, "p", "x") + " --out " + str(Path(d) / "o.json"), ["--plots"])
case("eval-unknown-option", lambda d: EVAL + " --window 3", ["--window"])
case("eval-config-unknown-key", lambda d: "eval --config " + write(d, "c.json", '{"seq-len": 8, "windows": 2}'),
     ["c.json", "windows"])
case("eval-config-dup", lambda d: "eval --config " + write(d, "c.json", '{"seq-len": 8, "seq-len": 16}'), ["c.json", "seq-len"])
case("eval-config-bad-json", lambda d: "eval --config " + write(d, "c.json", "{"), ["c.json"])
case("eval-config-object", lambda d: "eval --config " + write(d, "c.json", '{"seq-len": {}}'), ["c.json", "seq-len"])
case("threads-10000", lambda d: EVAL.replace("--max-windows 4", "--max-windows 1").replace("--seq-len 32", "--seq-len 16") +
     " --threads 10000", ["note:", "--threads 10000"], expect="note")
case("sensitivity-top", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --top -1", ["--top"])
case("sensitivity-out-folder", lambda d: (Path(d, "s").mkdir(), f"sensitivity -q --tokenizer {TOKENIZER} --out " +
                                          str(Path(d) / "s"))[1], ["--out"])
case("sensitivity-plot-ext", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --plot " + str(Path(d) / "x.jpg"), ["--plot"])
case("sensitivity-scheme", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --scheme full", [])

# ---- records, states, tolerance files, merge/compare/plot (built from real outputs made once) ---------
MADE = Path(tempfile.mkdtemp(prefix="qeval-probe-made-"))


def run(cmd, cwd=None, timeout=TIMEOUT):
    return subprocess.run(f"{QEVAL} {cmd}", shell=True, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          errors="replace")


REC = S0 = S1 = STATE = None
if MAKE:
    for args_, out in [(EVAL, "r.json"), (EVAL + " --shard 0/2", "s0.json"), (EVAL + " --shard 1/2", "s1.json"),
                       (EVAL + " --resume --stop-after 2", "st.json")]:
        run(f"{args_} --out {MADE / out}")
    REC = json.loads((MADE / "r.json").read_text())
    S0 = json.loads((MADE / "s0.json").read_text())
    S1 = json.loads((MADE / "s1.json").read_text())
    STATE = json.loads((MADE / "st.json.state.json").read_text())
TOL = '{"schemes": {"*": {"dppl_abs": 0.5}, "full": {"ppl_abs": 0.5}}}'


def xxh3_hex(text):  # the state checksum needs qeval's XXH3: ask the binary's own check instead
    return None


REC_EDITS = {
    "ppl-edited": lambda r: r["schemes"][0]["perplexity"].update(ppl=5.6),
    "ppl-zero": lambda r: r["schemes"][0]["perplexity"].update(ppl=0),
    "ppl-null": lambda r: r["schemes"][1]["perplexity"].update(ppl=None),
    "ppl-string": lambda r: r["schemes"][1]["perplexity"].update(ppl="5"),
    "dppl-edited": lambda r: r["schemes"][1]["vs_full"].update(dppl=0.0),
    "dppl-rel-edited": lambda r: r["schemes"][1]["vs_full"].update(dppl_rel=0.0),
    "se-edited": lambda r: r["schemes"][0]["perplexity"].update(nll_se=0.0),
    "ci-edited": lambda r: r["schemes"][0]["perplexity"].update(ppl_ci95=[1, 2]),
    "kl-edited": lambda r: r["schemes"][1]["vs_full"].update(kl_mean=0.0),
    "agree-edited": lambda r: r["schemes"][1]["vs_full"].update(top1_agreement=1.0),
    "tokens-zero": lambda r: r["schemes"][0]["per_window"]["0"].update(tokens=0),
    "tokens-negative": lambda r: r["schemes"][0]["per_window"]["0"].update(tokens=-31),
    "tokens-2^62": lambda r: r["schemes"][1]["per_window"]["2"].update(tokens=2 ** 62),
    "tokens-float": lambda r: r["schemes"][1]["per_window"]["2"].update(tokens=31.0),
    "nll-negative": lambda r: r["schemes"][0]["per_window"]["1"].update(nll_sum=-1.0),
    "nll-null": lambda r: r["schemes"][0]["per_window"]["1"].update(nll_sum=None),
    "nllsq-zero": lambda r: r["schemes"][0]["per_window"]["1"].update(nll_sq_sum=0.0),
    "kl-negative": lambda r: r["schemes"][1]["per_window"]["1"].update(kl_sum=-5.0),
    "agree-above": lambda r: r["schemes"][1]["per_window"]["1"].update(top1_agree=99),
    "dp-above": lambda r: r["schemes"][1]["per_window"]["1"].update(dp_sum=100.0),
    "full-diff": lambda r: r["schemes"][0]["per_window"]["1"].update(diff_sum=0.5, diff_sq_sum=1.0),
    "row-removed": lambda r: [s["per_window"].pop("3") for s in r["schemes"]],
    "row-removed-counts": lambda r: ([s["per_window"].pop("3") for s in r["schemes"]],
                                     r["protocol"].update(windows=3, scored_tokens=93)),
    "row-removed-all": lambda r: ([s["per_window"].pop("3") for s in r["schemes"]], r["window_hashes"].pop("3"),
                                  r["protocol"].update(windows=3, scored_tokens=93)),
    "row-key-word": lambda r: r["schemes"][0]["per_window"].update(x=r["schemes"][0]["per_window"]["0"]),
    "row-key-negative": lambda r: r["schemes"][0]["per_window"].update({"-1": r["schemes"][0]["per_window"]["0"]}),
    "row-moved": lambda r: [s["per_window"].update({"9": s["per_window"].pop("3")}) for s in r["schemes"]],
    "windows-edited": lambda r: r["protocol"].update(windows=40),
    "scored-edited": lambda r: r["protocol"].update(scored_tokens=1),
    "stream-hash-edited": lambda r: r["protocol"].update(token_stream_hash="0" * 16),
    "window-hash-edited": lambda r: r["window_hashes"].update({"0": "f" * 16}),
    "scheme-redefined": lambda r: r["schemes"][1]["description"]["scheme"]["weights"].update(granularity="channel"),
    "scheme-renamed-dup": lambda r: r["schemes"][1].update(name="full"),
    "schemes-empty": lambda r: r.update(schemes=[]),
    "schemes-missing": lambda r: r.pop("schemes"),
    "protocol-missing": lambda r: r.pop("protocol"),
    "stats-windows": lambda r: r["schemes"][0]["statistics"].update(windows=2),
    "schema-version": lambda r: r.update(schema_version=2),
    "partial-marked": lambda r: r.update(partial=["made up"]),
    "per-window-list": lambda r: r["schemes"][0].update(per_window=[1, 2]),
}
for name, edit in REC_EDITS.items():
    def build(d, edit=edit):
        r = copy.deepcopy(REC)
        edit(r)
        return f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances {write(d, 't.json', TOL)} " + \
            write(d, "n.json", json.dumps(r))
    case(f"check-record-{name}", build, ["n.json"])
    def build_base(d, edit=edit):
        r = copy.deepcopy(REC)
        edit(r)
        return f"check --baseline {write(d, 'b.json', json.dumps(r))} --tolerances {write(d, 't.json', TOL)} " + \
            write(d, "n.json", json.dumps(REC))
    case(f"check-baseline-{name}", build_base, ["b.json"])
    def build_compare(d, edit=edit):
        r = copy.deepcopy(REC)
        edit(r)
        return f"compare {write(d, 'a.json', json.dumps(REC))} {write(d, 'e.json', json.dumps(r))}"
    case(f"compare-{name}", build_compare, ["e.json"])
case("check-shard", lambda d: f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances {write(d, 't.json', TOL)} " +
     write(d, "s.json", json.dumps(S0)), ["s.json", "partial"])
case("compare-shard", lambda d: f"compare {write(d, 'a.json', json.dumps(REC))} {write(d, 's.json', json.dumps(S0))}", ["s.json"])
case("plot-shard", lambda d: f"plot {write(d, 's.json', json.dumps(S0))} --out {Path(d) / 'p'}", ["s.json"])
case("plot-edited", lambda d: f"plot {write(d, 'e.json', json.dumps(dict(REC, protocol=dict(REC['protocol'], windows=7))))} "
     f"--out {Path(d) / 'p'}", ["e.json"])
case("compare-other-protocol", lambda d: f"compare {write(d, 'a.json', json.dumps(REC))} "
     f"{write(d, 'e.json', json.dumps(dict(REC, data=dict(REC['data'], hash='x'))))}", ["e.json"])
for name, text in {"empty": "{}", "nothing-limited": '{"schemes": {"full": {"required": true}}}',
                   "dup-key": '{"schemes": {"*": {"dppl_abs": 1, "dppl_abs": 2}}}',
                   "dup-scheme": '{"schemes": {"full": {"ppl_abs": 1}, "full": {"ppl_abs": 2}}}',
                   "unknown-key": '{"scheme": {}}', "negative": '{"schemes": {"*": {"dppl_abs": -1}}}',
                   "nan-string": '{"schemes": {"*": {"dppl_abs": "nan"}}}', "not-json": "{",
                   "list": "[]", "stat-unknown": '{"statistics": {"kurt": {"abs": 1}}}',
                   "stat-no-limit": '{"statistics": {"kurtosis_rest": {}}}', "direction": '{"statistics": {"kurtosis_rest": {"abs": 1, "direction": "up"}}}',
                   "absent-scheme": '{"schemes": {"w4-zeropoint": {"dppl_abs": 1}}}',
                   "matches-nothing": '{"missing_scheme": "skip", "schemes": {"int8-coarse": {"required": false, "dppl_abs": 1}}}'}.items():
    def build(d, text=text, name=name):
        new = copy.deepcopy(REC)
        if name == "matches-nothing":
            new["schemes"] = new["schemes"][:1]
            return f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances {write(d, 't.json', text)} " + \
                write(d, "n.json", json.dumps(new))
        return f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances {write(d, 't.json', text)} " + \
            write(d, "n.json", json.dumps(REC))
    case(f"tolerance-{name}", build, ["t.json"] if name != "matches-nothing" else ["nothing was checked"])
MERGE = {
    "one-shard": lambda d: [S0],
    "same-twice": lambda d: [S0, S0],
    "not-shard": lambda d: [REC, S1],
    "count-one": lambda d: [dict(S0, shard=dict(S0["shard"], count=1))],
    "index-out": lambda d: [dict(S0, shard=dict(S0["shard"], index=5)), S1],
    "protocol-windows-edited": lambda d: [dict(S0, shard=dict(S0["shard"], protocol_windows=9)), S1],
    "row-outside-shard": lambda d: [(lambda s: ([x["per_window"].update({"1": x["per_window"]["0"]}) for x in s["schemes"]], s)[1])(
        copy.deepcopy(S0)), S1],
    "state-edited": lambda d: [(lambda s: (s["shard"]["state"]["schemes"][0]["rows"]["0"].update(tokens=-5), s)[1])(
        copy.deepcopy(S0)), S1],
    "state-missing": lambda d: [(lambda s: (s["shard"].pop("state"), s)[1])(copy.deepcopy(S0)), S1],
    "summary-edited": lambda d: [(lambda s: (s["schemes"][0]["perplexity"].update(ppl=1.0), s)[1])(copy.deepcopy(S0)), S1],
    "other-seq-len": lambda d: [S0, (lambda s: (s["protocol"].update(seq_len=64), s)[1])(copy.deepcopy(S1))],
    "tokens-2^62": lambda d: [(lambda s: ([x["per_window"]["0"].update(tokens=2 ** 62) for x in s["schemes"]], s)[1])(
        copy.deepcopy(S0)), S1],
}
for name, shards in MERGE.items():
    def build(d, shards=shards):
        files = [write(d, f"s{i}.json", json.dumps(s)) for i, s in enumerate(shards(d))]
        return "merge " + " ".join(files) + " --out " + str(Path(d) / "m.json")
    case(f"merge-{name}", build, ["merge"] if name in ("one-shard", "same-twice") else [".json"])
case("merge-out-folder", lambda d: (Path(d, "m").mkdir(), f"merge {write(d, 'a.json', json.dumps(S0))} "
     f"{write(d, 'b.json', json.dumps(S1))} --out {Path(d) / 'm'}")[1], ["--out"])
STATE_EDITS = {
    "checksum-zeroed": lambda s: s["state"].update(checksum="0" * 16),
    "checksum-removed": lambda s: s["state"].pop("checksum"),
    "row-edited": lambda s: s["state"]["schemes"][0]["rows"]["0"].update(nll_sum=0.5),
    "tokens-negative": lambda s: s["state"]["schemes"][0]["rows"]["0"].update(tokens=-1),
    "hash-changed": lambda s: s["state"]["window_hashes"].update({"0": "1" * 16}),
    "key-word": lambda s: s["state"]["window_hashes"].update(x="1" * 16),
    "windows-count": lambda s: s["state"].update(windows=9),
    "identity-changed": lambda s: s["identity"].update(data="x"),
    "state-missing": lambda s: s.pop("state"),
    "statistics-list": lambda s: s["state"].update(statistics=[1]),
}
for name, edit in STATE_EDITS.items():
    def build(d, edit=edit):
        s = copy.deepcopy(STATE)
        edit(s)
        write(d, "o.json.state.json", json.dumps(s))
        return EVAL + " --resume --out " + str(Path(d) / "o.json")
    case(f"resume-{name}", build, ["o.json.state.json"])
case("resume-not-json", lambda d: (write(d, "o.json.state.json", "{"), EVAL + " --resume --out " + str(Path(d) / "o.json"))[1],
     ["o.json.state.json"])

# ---- train ------------------------------------------------------------------------------------------
TRAIN_OPTS = [("--lr", ["inf", "nan", "0", "-1", "x"]), ("--momentum", ["nan", "1", "-0.1"]), ("--n-kv-heads", ["-1", "3"]),
              ("--d-ff", ["-1"]), ("--clip", ["-1", "inf"]), ("--warmup", ["50", "-1"]), ("--beta1", ["1", "nan"]),
              ("--beta2", ["-0.1"]), ("--eps", ["0", "nan"]), ("--seq-len", ["1", "0"]), ("--val-fraction", ["1", "-0.5"]),
              ("--norm-eps", ["0", "nan"]), ("--d-model", ["0", "18 --n-heads 4"]), ("--init-std", ["0", "inf"]),
              ("--weight-decay", ["-1"]), ("--min-lr-ratio", ["2"]), ("--log-every", ["0"]), ("--time-limit", ["nan"]),
              ("--dense-max", ["0"]), ("--steps", ["0"]), ("--batch-size", ["0"]), ("--val-every", ["-1"])]
for opt, vals in TRAIN_OPTS:
    for v in vals:
        case(f"train{opt}={v}", lambda d, o=opt, v=v: TRAIN + f" {o}={v} --out " + str(Path(d) / "ck"), [opt])
case("train-lr-1e30", lambda d: TRAIN + " --lr 1e30 --clip 0 --out " + str(Path(d) / "ck"), ["diverged"])
case("train-lr-1e30-no-out", lambda d: TRAIN + " --lr 1e30 --clip 0", ["diverged"])
case("train-out-file", lambda d: TRAIN + " --out " + write(d, "ck", "x"), ["--out"])
case("train-binary-data", lambda d: TRAIN + " --data " + write(d, "w.txt", b"\x7fELF" + b"\0" * 4000) + " --out " +
     str(Path(d) / "ck"), ["w.txt", "NUL"])
case("train-resume-missing", lambda d: TRAIN + " --resume " + str(Path(d) / "none") + " --out " + str(Path(d) / "ck"), ["--resume"])
case("train-data-missing", lambda d: TRAIN + " --data " + str(Path(d) / "none.txt"), ["none.txt"])
case("train-tokenizer-missing", lambda d: TRAIN.replace(TOKENIZER, str(Path(d) / "tok.bin")), ["tok.bin"])

# ---- inspect ------------------------------------------------------------------------------------------
case("inspect-nothing", lambda d: "inspect", ["give a path"])
case("inspect-missing", lambda d: "inspect --model " + str(Path(d) / "x.gguf"), ["x.gguf"])
case("inspect-empty-folder", lambda d: (Path(d, "m").mkdir(), "inspect --model " + str(Path(d) / "m"))[1], ["config.json"])
case("inspect-data-nul", lambda d: "inspect --data " + write(d, "z.txt", b"\0" * 100), ["z.txt"])

# ---- the newer surfaces (issue 51): MoE / SSM configs, series, watch, series records, rules, plans, outputs, bands --
MOE_SSM_KEYS = {
    "tiny-mixtral-hf": {"num_local_experts": [0, -1, "4", None, 2.5, 2 ** 40], "num_experts_per_tok": [0, -1, "2", None, 2.5, 5]},
    "tiny-qwen2-moe-hf": {"num_experts": [0, -1, "4", None, 2.5], "num_experts_per_tok": [0, -1, "2", None, 9],
                          "moe_intermediate_size": [0, -1, "12", None, 2.5], "decoder_sparse_step": [0, -1, "1", None],
                          "shared_expert_intermediate_size": [-1, "20", 2.5], "norm_topk_prob": ["yes", 1, None],
                          "mlp_only_layers": [[99], [-1], "1", [0.5]]},
    "tiny-qwen3-moe-hf": {"num_experts": [0, -1, "6", None], "num_experts_per_tok": [0, -1, "3", None, 7],
                          "moe_intermediate_size": [0, -1, "12", None], "decoder_sparse_step": [0, -1, "2", None],
                          "norm_topk_prob": ["yes", 1], "mlp_only_layers": [[99], [-1], "0"]},
    "tiny-mamba-hf": {"state_size": [0, -1, "8", None, 2.5], "expand": [0, -1, "2", None, 2.5],
                      "conv_kernel": [0, -1, "4", None, 2.5], "time_step_rank": [0, -1, "4", None, 2.5, "many"],
                      "layer_norm_epsilon": [0, -1e-5, "1e-5", None], "intermediate_size": [0, -1, 31],
                      "use_conv_bias": ["yes", 2], "use_bias": ["no", 3]},
    "tiny-mamba2-hf": {"state_size": [0, -1, "8", None], "n_groups": [0, -1, 3, "2", None], "num_heads": [0, -1, 3, "4", None],
                       "head_dim": [0, -1, 5, "8", None], "expand": [0, -1, "2", None], "conv_kernel": [0, -1, "4", None],
                       "chunk_size": [0, -1, "5", None], "layer_norm_epsilon": [0, -1.0, "x"],
                       "time_step_limit": ["(0, inf)", [0.1, 0.01], [0, "x"], [float("nan"), 1.0], [float("-inf"), 1.0], [1], {}],
                       "norm_before_gate": ["yes", 2], "rms_norm": ["yes", 2]},
    "tiny-jamba-hf": {"attn_layer_period": [0, -1, "2", None, 2.5], "attn_layer_offset": [-1, 2, 9, "1", None],
                      "expert_layer_period": [0, -1, "3", None], "expert_layer_offset": [-1, 3, "0", None],
                      "num_experts": [0, -1, "4", None], "num_experts_per_tok": [0, -1, 5, "2", None],
                      "mamba_d_state": [0, -1, "8", None], "mamba_d_conv": [0, -1, "4", None],
                      "mamba_expand": [0, -1, "2", None], "mamba_dt_rank": [0, -1, "4", None],
                      "mamba_conv_bias": ["yes", 2], "mamba_proj_bias": ["no", 3]},
}
for fixture, keys in MOE_SSM_KEYS.items():
    fam = fixture.replace("tiny-", "").replace("-hf", "")
    for key, values in keys.items():
        for v in values:
            # The message must name the file and the key as the file spells it.
            case(f"moessm-{fam}-{key}={json.dumps(v)}",
                 lambda d, f=fixture, k=key, v=v: "inspect --json " + family(d, f, setter(k, v)), ["config.json", key])
            if v is None or isinstance(v, str):  # the same value must stop eval too, before any window is read
                case(f"moessm-eval-{fam}-{key}={json.dumps(v)}",
                     lambda d, f=fixture, k=key, v=v: EVAL + " --model " + family(d, f, setter(k, v)) + " --out " +
                     str(Path(d) / "o.json"), ["config.json", key])

# Series of checkpoints: folders, list files, --watch options (a tiny run trained once, its series evaluated once).
SERIES_EVAL = f"eval -q --tokenizer {TOKENIZER} --seq-len 16 --max-windows 2 --schemes full,int8-coarse --no-attention-stats"
if MAKE:
    run(TRAIN.replace("--steps 2", "--steps 4") + f" --keep-checkpoints 1 --out {MADE / 'run'}")
    run(f"{SERIES_EVAL} --model {MADE / 'run'} --out {MADE / 'S.json'}")
SERIES = json.loads((MADE / "S.json").read_text()) if (MADE / "S.json").exists() else None


def series_copy(d, edit=None, step_edit=None):
    """The made series in d (S.json and S/), S.json edited by edit(json), step-2.json by step_edit(json)."""
    shutil.copytree(MADE / "S", Path(d) / "S")
    s = copy.deepcopy(SERIES)
    if edit:
        edit(s)
    (Path(d) / "S.json").write_text(json.dumps(s))
    if step_edit:
        p = Path(d) / "S" / "step-2.json"
        r = json.loads(p.read_text())
        step_edit(r)
        p.write_text(json.dumps(r))
    return str(Path(d) / "S.json")


def run_copy(d, edit=None):
    shutil.copytree(MADE / "run", Path(d) / "run")
    if edit:
        edit(Path(d) / "run")
    return str(Path(d) / "run")


RULES_OK = '{"rules": [{"quantity": "full.ppl", "at": "every", "max": 1e9}]}'
SERIES_EDITS = {
    "penalty": (lambda s: s["checkpoints"][1]["schemes"][1].update(paired_dnll_mean=-1.0), None, "does not hold what its record"),
    "ppl": (lambda s: s["checkpoints"][0]["schemes"][0].update(ppl=1.0), None, "does not hold what its record"),
    "statistic": (lambda s: s["checkpoints"][0]["statistics"].update(full={"kurtosis_first": 1.0}), None,
                  "does not hold what its record"),
    "weights-hash": (lambda s: s["checkpoints"][0].update(weights_hash="0" * 16), None, "weights_hash"),
    "reordered": (lambda s: s["checkpoints"].reverse(), None, "follows step"),
    "duplicated": (lambda s: s["checkpoints"].append(copy.deepcopy(s["checkpoints"][-1])), None, "follows step"),
    "other-record": (lambda s: s["checkpoints"][0].update(record=s["checkpoints"][1]["record"]), None, "is the record of"),
    "shared-record": (lambda s: s["checkpoints"][1].update(record=s["checkpoints"][0]["record"]), None, "earlier step too"),
    "tokens-decrease": (lambda s: (s["checkpoints"][0].update(tokens=10 ** 9)), None, "fewer than the step before"),
    "tokens-negative": (lambda s: s["checkpoints"][0].update(tokens=-5), None, "tokens seen"),
    "tokens-string": (lambda s: s["checkpoints"][0].update(tokens="64"), None, "tokens seen"),
    "step-string": (lambda s: s["checkpoints"][0].update(step="2"), None, "S.json"),
    "record-missing": (lambda s: s["checkpoints"][0].update(record="S/step-99.json"), None, "step-99.json"),
    "record-absolute": (lambda s: s["checkpoints"][0].update(record="/etc/passwd"), None, "/etc/passwd"),
    "no-checkpoints": (lambda s: s.update(checkpoints=[]), None, "without checkpoints"),
    "no-evaluation": (lambda s: s.pop("evaluation"), None, "evaluation"),
    "evaluation-edited": (lambda s: s["evaluation"].update(protocol={"seq_len": 999}), None, "not evaluated as the series says"),
    "kind": (lambda s: s.update(kind="qeval record"), None, "S.json"),  # then read as a result record
    "version": (lambda s: s.update(series_version=9), None, "series_version"),
    "step-record-edited": (None, lambda r: r["schemes"][1]["vs_full"].update(paired_dnll_mean=-1.0), "step-2.json"),
    "step-record-rows": (None, lambda r: r["schemes"][0]["per_window"].pop("0"), "step-2.json"),
    "step-record-stats": (None, lambda r: r["schemes"][0]["statistics"]["hidden"]["kurtosis"].update(first=0.5), "step-2.json"),
}
if SERIES:
    for name, (edit, step_edit, frag) in SERIES_EDITS.items():
        case(f"seriesrec-compare-{name}", lambda d, e=edit, se=step_edit: "compare " + series_copy(d, e, se), [frag])
        case(f"seriesrec-check-{name}", lambda d, e=edit, se=step_edit: "check " + series_copy(d, e, se) + " --tolerances " +
             write(d, "rules.json", RULES_OK), [frag])
        case(f"seriesrec-plot-{name}", lambda d, e=edit, se=step_edit: "plot " + series_copy(d, e, se) + " --out " +
             str(Path(d) / "fig"), [frag])
    case("seriesrec-duplicate-key", lambda d: "compare " + write(d, "S.json", '{"kind": "qeval series", "kind": "x"}'),
         ["S.json"])
    case("seriesrec-truncated", lambda d: "compare " + write(d, "S.json", json.dumps(SERIES)[:200]), ["S.json"])
    RULES = {
        "dup-key": ('{"rules": [{"quantity": "full.ppl", "max": 1, "max": 2}]}', ["max"]),
        "unknown-quantity": ('{"rules": [{"quantity": "full.pplx", "max": 1}]}', ["full.pplx"]),
        "unknown-scheme": ('{"rules": [{"quantity": "int8-fine.dppl", "max": 1}]}', ["int8-fine"]),
        "bad-at": ('{"rules": [{"quantity": "full.ppl", "at": "sometimes", "max": 1}]}', ["sometimes"]),
        "max-string": ('{"rules": [{"quantity": "full.ppl", "max": "1"}]}', ["max"]),
        "max-nan": ('{"rules": [{"quantity": "full.ppl", "max": NaN}]}', ["rules.json"]),
        "no-limit": ('{"rules": [{"quantity": "full.ppl"}]}', ["rules[0]", "limit"]),
        "rules-object": ('{"rules": {"quantity": "full.ppl"}}', ["rules"]),
        "empty-rules": ('{"rules": []}', ["rules"]),
        "unknown-key": ('{"rules": [{"quantity": "full.ppl", "max": 1, "mx": 2}]}', ["mx"]),
        "bad-reference": ('{"rules": [{"quantity": "full.ppl", "reference": "yesterday", "max_increase": 1}]}', ["yesterday"]),
        "truncated": ('{"rules": [', ["rules.json"]),
        "top-level-list": ('[{"quantity": "full.ppl", "max": 1}]', ["rules.json"]),
    }
    for name, (text, frags) in RULES.items():
        case(f"rules-{name}", lambda d, t=text: "check " + series_copy(d) + " --tolerances " + write(d, "rules.json", t), frags)
    # Series folders and list files.
    case("series-step-twice", lambda d: SERIES_EVAL + " --model " + run_copy(d, lambda r: shutil.copytree(r / "step-2", r / "step-002"))
         + " --out " + str(Path(d) / "S.json"), ["step-2", "step-002"])
    case("series-out-not-json", lambda d: SERIES_EVAL + " --model " + run_copy(d) + " --out " + str(Path(d) / "S.txt"), ["--out", ".json"])
    case("series-no-out", lambda d: SERIES_EVAL + " --model " + run_copy(d), ["--out"])
    case("series-on-file", lambda d: SERIES_EVAL + " --series on --model " + write(d, "m.gguf", "x") + " --out " +
         str(Path(d) / "S.json"), ["--series on"])
    case("series-other-options", lambda d: (series_copy(d), SERIES_EVAL.replace("--max-windows 2", "--max-windows 3") + " --model " +
                                            str(MADE / "run") + " --out " + str(Path(d) / "S.json"))[1], ["other options"])
    case("series-record-of-other-model", lambda d: (series_copy(d), run_copy(d), SERIES_EVAL + " --model " + str(Path(d) / "run")
                                                    + " --out " + str(Path(d) / "S.json"))[2], ["other options", "model"])
    for name, text, frag in [("missing-path", "nope/step-1 1\n", "nope"), ("negative-step", "{run}/step-2 -2\n", "STEP"),
                             ("step-word", "{run}/step-2 two\n", "two"), ("tokens-word", "{run}/step-2 2 many\n", "many"),
                             ("duplicate-step", "{run}/step-2 2\n{run}/step-2 2\n", "step 2"),
                             ("tokens-decrease", "{run}/step-2 2 100\n{run}/step-4 4 50\n", "tokens"),
                             ("extra-field", "{run}/step-2 2 64 extra\n", "extra"), ("empty", "", "list.txt"),
                             ("nul", "{run}/step-2\0 2\n", "list.txt")]:
        case(f"serieslist-{name}", lambda d, t=text: SERIES_EVAL + " --model " + write(d, "list.txt", t.replace("{run}", run_copy(d)))
             + " --out " + str(Path(d) / "S.json"), [frag])
    for opt, vals in [("--watch-timeout", ["nan", "inf", "-1", "x", "1e400"]), ("--watch-poll", ["0", "nan", "-1", "inf"]),
                      ("--watch-settle", ["nan", "-1", "inf"]), ("--series", ["maybe"])]:
        for v in vals:
            case(f"watch{opt}={v}", lambda d, o=opt, v=v: SERIES_EVAL + " --watch --model " + run_copy(d) + f" {o}={v} --out " +
                 str(Path(d) / "S.json"), [opt])
    case("watch-on-file", lambda d: SERIES_EVAL + " --watch --model " + write(d, "m.gguf", "x") + " --out " + str(Path(d) / "S.json"),
         ["--watch"])
    case("watch-series-off", lambda d: SERIES_EVAL + " --watch --series off --model " + run_copy(d) + " --out " +
         str(Path(d) / "S.json"), ["--watch"])
    # train into a folder of another run; resume of a finished one.
    case("seriestrain-out-other-run", lambda d: TRAIN + " --keep-checkpoints 1 --out " + run_copy(d), ["--resume"])
    case("seriestrain-resume-finished", lambda d: TRAIN.replace("--steps 2", "--steps 4") + " --keep-checkpoints 1 --resume " + run_copy(d)
         + " --out " + str(Path(d) / "run"), ["finished"])

# Memory plans.
for opt, vals in [("--plan", ["bogus", "", "resident,streamed"]), ("--chunk-windows", ["-1", "x", "1e3", "2.5"]),
                  ("--max-memory", ["0", "-1G", "0.5B", "1e400", "nan", "12Q", "G"]),
                  ("--max-device-memory", ["0", "-1", "nan", "1e400"])]:
    for v in vals:
        case(f"plan{opt}={v!r}", lambda d, o=opt, v=v: EVAL + f" {o}='{v}' --out " + str(Path(d) / "o.json"), [opt])
case("plan-memory-too-small", lambda d: EVAL + " --max-memory 1K --out " + str(Path(d) / "o.json"), ["--max-memory"])
case("plan-device-memory-on-cpu", lambda d: EVAL + " --max-device-memory 1G --out " + str(Path(d) / "o.json"),
     ["note:", "--max-device-memory"], expect="note")

# Outputs that name an input, or nothing.
OUT_INPUTS = {"data": lambda d: write(d, "data.txt", "hello world " * 400), "tokenizer": lambda d: str(DATA / TOKENIZER)}
case("out-empty", lambda d: EVAL + " --out ''", ["--out", "empty"])
case("out-is-data", lambda d: (lambda p: EVAL + f" --data {p} --out {p}")(write(d, "data.txt", "hello world " * 400)),
     ["--out", "data"])
case("out-is-data-link", lambda d: (lambda p: (os.symlink(p, Path(d) / "link.json"), EVAL + f" --data {p} --out " +
                                               str(Path(d) / "link.json"))[1])(write(d, "data.txt", "hello world " * 400)),
     ["--out", "data"])
case("out-is-tokenizer", lambda d: (shutil.copy(DATA / TOKENIZER, Path(d) / "tok.bin"),
                                    EVAL.replace(TOKENIZER, str(Path(d) / "tok.bin")) + " --out " + str(Path(d) / "tok.bin"))[1],
     ["--out", "tokenizer"])
case("out-is-baseline", lambda d: f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances " +
     write(d, "t.json", TOL) + " " + write(d, "n.json", json.dumps(REC)) + " --report " + str(Path(d) / "b.json"), ["--report"])
case("out-is-shard", lambda d: f"merge {write(d, 's0.json', json.dumps(S0))} {write(d, 's1.json', json.dumps(S1))} --out " +
     str(Path(d) / "s0.json"), ["--out"])
case("out-report-empty", lambda d: f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances " +
     write(d, "t.json", TOL) + " " + write(d, "n.json", json.dumps(REC)) + " --report ''", ["--report"])
case("out-data-dev-zero", lambda d: EVAL + " --data /dev/zero --out " + str(Path(d) / "o.json"), ["/dev/zero"])
case("out-data-fifo", lambda d: (os.mkfifo(Path(d) / "f.txt"), EVAL + " --data " + str(Path(d) / "f.txt") + " --out " +
                                 str(Path(d) / "o.json"))[1], ["f.txt"])
case("out-stride-above-seq", lambda d: EVAL + " --protocol stride --stride 40 --out " + str(Path(d) / "o.json"), ["stride 40"])

# Rounding band options (eval and sensitivity).
for opt, vals in [("--rounding-band", ["-1", "65", "x", "1.5"]), ("--rounding-band-eps", ["0", "1", "nan", "-1e-7", "inf"]),
                  ("--rounding-seed", ["-1", "x", "1e12"])]:
    for v in vals:
        case(f"band-eval{opt}={v}", lambda d, o=opt, v=v: EVAL + f" {o}={v} --out " + str(Path(d) / "o.json"), [opt])
        case(f"band-sensitivity{opt}={v}", lambda d, o=opt, v=v: f"sensitivity -q --tokenizer {TOKENIZER} --seq-len 32 "
             f"--max-windows 2 {o}={v}", [opt]) if opt != "--rounding-seed" else None
case("band-seed-is-variant", lambda d: EVAL + " --rounding-band 2 --rounding-seed 1 --out " + str(Path(d) / "o.json"),
     ["--rounding-seed"])
case("band-gate-without-band", lambda d: f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances " +
     write(d, "t.json", '{"schemes": {"int8-coarse": {"dppl_abs": 0.1, "band": 3}}}') + " " + write(d, "n.json", json.dumps(REC)),
     ["band"])
case("band-gate-negative", lambda d: f"check --baseline {write(d, 'b.json', json.dumps(REC))} --tolerances " +
     write(d, "t.json", '{"schemes": {"int8-coarse": {"dppl_abs": 0.1, "band": -3}}}') + " " + write(d, "n.json", json.dumps(REC)),
     ["band"])

# Names that reach gnuplot, Markdown and CSV: refused where defined when they hold control bytes.
for name, payload in [("newline", "x\nsystem('touch /tmp/qeval-pwned')"), ("escape", "x\u001b[31m"), ("nul", "x\u0000y")]:
    case(f"names-scheme-{name}", lambda d, p=payload: EVAL.replace("full,int8-coarse", "full," + write(
        d, "s.json", json.dumps({"name": p, "weights": {"kind": "int8_absmax", "granularity": "tensor"},
                                 "input_activations": {"kind": "none"}, "output_activations": {"kind": "none"}}))) +
         " --out " + str(Path(d) / "o.json"), ["s.json", "name"])
    if "\u0000" not in payload:  # no NUL can travel in an argument
        case(f"names-label-{name}", lambda d, p=payload: "compare " + write(d, "r.json", json.dumps(REC)) + " --labels '" +
             p.replace("'", "") + "'", ["--labels"])

# ---- the surfaces of issues 61-64: formats, static scales, KV caches, llama.cpp types, GGUF blocks, Python ------
# Groups: formats (fp8 / mx / nvfp4 specs, calibration), kv (kv_cache specs and the models they meet),
# ggml (kind ggml, file types, tensor_types, quantize_embedding), ggufq (GGUF files holding IQ4_NL and
# MXFP4 tensors, forged), python (the package in python/: bad paths, bad binaries, bad records).
NEW_EVAL = f"eval -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 2 --no-attention-stats"
NONE = {"kind": "none"}


def scheme_case(name, scheme, fragments, extra="", file="s.json", named=False):
    """A scheme file evaluated after full on stories260K; the message must name the file (named: the scheme's
    "name", for what only the model shows) and the fragments."""
    def build(d, scheme=scheme, extra=extra):
        text = scheme if isinstance(scheme, str) else json.dumps(scheme, allow_nan=True)
        return f"{NEW_EVAL} --schemes full,{write(d, file, text)} {extra} --out {Path(d) / 'o.json'}"
    # The file as the message gives it ("scheme file /tmp/…/s.json"): its name is enough.
    case(name, build, [("scheme " + scheme.get("name", "probe")) if named else file] + list(fragments))


def st_poke(d, fixture, tensor, index, value):
    """The fixture copied into d with element `index` of `tensor` (F32, model.safetensors) set to value."""
    p = family(d, fixture)
    f = Path(p) / "model.safetensors"
    b = bytearray(f.read_bytes())
    n = struct.unpack("<Q", b[:8])[0]
    start = 8 + n + json.loads(b[8:8 + n])[tensor]["data_offsets"][0] + 4 * index
    b[start:start + 4] = struct.pack("<f", value)
    f.write_bytes(bytes(b))
    return p


def spec(weights=NONE, inputs=NONE, **top):
    return dict({"name": "probe", "weights": weights, "input_activations": inputs, "output_activations": NONE}, **top)


FP8_W = {"kind": "fp8", "element": "e4m3", "granularity": "channel"}
MX_W = {"kind": "mx", "element": "e2m1", "granularity": "block:32"}
NV_W = {"kind": "nvfp4", "granularity": "block:16"}
FORMAT_BASES = {"fp8": FP8_W, "mx": MX_W, "nvfp4": NV_W}
for kind, base in FORMAT_BASES.items():
    for role in ["weights", "input_activations"]:
        r = "w" if role == "weights" else "in"
        base_r = dict(base, granularity="token") if (kind == "fp8" and role == "input_activations") else base
        def put(**over):
            q = dict(base_r, **over)
            for k, v in list(q.items()):
                if v is DELETE:
                    q.pop(k)
            return spec(**{"weights" if role == "weights" else "inputs": q})
        # element: wrong JSON types and unknown or foreign element names.
        for v in [3, None, ["e4m3"]]:
            scheme_case(f"formats-{kind}-{r}-element={json.dumps(v)}", put(element=v), [role, "element"])
        for v in ["e3m3", "", "e4m3fn"] + (["e2m1"] if kind == "fp8" else ["e4m3"] if kind == "nvfp4" else []):
            scheme_case(f"formats-{kind}-{r}-element={v!r}", put(element=v), [role, "element", repr(v)[1:-1] or "''"])
        if kind != "nvfp4":
            scheme_case(f"formats-{kind}-{r}-element-missing", put(element=DELETE), [role, "element"])
        # granularity: types, sizes, other kinds' choices.
        for v in [32, None, "block:0", "block:x", "block:99999999999", "group:32",
                  "block:64" if kind != "fp8" else "block:32", "feature" if role == "weights" else "channel"]:
            scheme_case(f"formats-{kind}-{r}-granularity={json.dumps(v)}", put(granularity=v), [role, "granularity"])
        scheme_case(f"formats-{kind}-{r}-granularity-missing", put(granularity=DELETE), [role, "granularity"])
        # scale_rounding: mx only, and only floor or up.
        for v in (["ceil", "UP", 1, None, True, ["up"]] if kind == "mx" else ["up"]):
            scheme_case(f"formats-{kind}-{r}-scale_rounding={json.dumps(v)}", put(scale_rounding=v), [role, "scale_rounding"])
        # bits: must agree with the element; unknown keys named.
        for v in ["8", 3]:
            scheme_case(f"formats-{kind}-{r}-bits={json.dumps(v)}", put(bits=v), [role, "bits"])
        for key in ["elment"]:
            scheme_case(f"formats-{kind}-{r}-unknown-{key}", put(**{key: 1}), [role, key])
    scheme_case(f"formats-{kind}-on-output", spec(output_activations=dict(base, granularity="tensor") if kind == "fp8" else base),
                ["output_activations", kind])
    # NaN or infinity in a weight, evaluated under the format: refused naming the tensor.
    for v in ["nan", "-inf"]:
        def build(d, kind=kind, v=v, base=base):
            p = st_poke(d, "tiny-mistral-hf", "model.layers.1.self_attn.o_proj.weight", 5, float(v))
            s = write(d, "s.json", json.dumps(spec(base)))
            return f"eval -q --model {p} --data {write(d, 't.bin', TOK)} --seq-len 8 --max-windows 2 --schemes full,{s} " \
                f"--out {Path(d) / 'o.json'}"
        case(f"formats-{kind}-weight-{v}", build, ["layers.1"])

# Static activation scales ("calibration" on a tensor input spec).
FP8_STATIC = {"kind": "fp8", "element": "e4m3", "granularity": "tensor", "calibration": {"windows": 2, "statistic": "max"}}
for label, cal in {"list": [2], "string": "max", "number": 16, "null": None, "empty": {},
                   "windows-0": {"windows": 0}, "windows-neg": {"windows": -2}, "windows-string": {"windows": "2"},
                   "windows-float": {"windows": 1.5}, "windows-huge": {"windows": 2 ** 63}, "windows-null": {"windows": None},
                   "windows-bool": {"windows": True}, "statistic-mean": {"windows": 2, "statistic": "mean"},
                   "statistic-number": {"windows": 2, "statistic": 99}, "statistic-null": {"windows": 2, "statistic": None},
                   "percentile-0": {"windows": 2, "statistic": "percentile:0"},
                   "percentile-101": {"windows": 2, "statistic": "percentile:101"},
                   "percentile-nan": {"windows": 2, "statistic": "percentile:nan"},
                   "percentile-inf": {"windows": 2, "statistic": "percentile:inf"},
                   "percentile-empty": {"windows": 2, "statistic": "percentile:"},
                   "percentile-suffix": {"windows": 2, "statistic": "percentile:99.9x"},
                   "percentile-upper": {"windows": 2, "statistic": "PERCENTILE:99"},
                   "percentile-neg": {"windows": 2, "statistic": "percentile:-5"},
                   "percentile-hex": {"windows": 2, "statistic": "percentile:0x10"},
                   "unknown-key": {"windows": 2, "stat": "max"}}.items():
    frag = "calibration" if label not in ("statistic-number", "statistic-null") else "statistic"
    scheme_case(f"formats-calibration-{label}", spec(FP8_W, dict(FP8_STATIC, calibration=cal)), [frag])
for label, inputs in {"on-token": dict(FP8_STATIC, granularity="token"), "on-mx": dict(MX_W, calibration={"windows": 2}),
                      "on-nvfp4": dict(NV_W, calibration={"windows": 2}),
                      "on-int4": {"kind": "int4_zeropoint", "granularity": "tensor", "calibration": {"windows": 2}},
                      "on-int8-token": {"kind": "int8_absmax", "granularity": "token", "calibration": {"windows": 2}}}.items():
    scheme_case(f"formats-calibration-{label}", spec(FP8_W, inputs), ["calibration"])
scheme_case("formats-calibration-on-weights", spec(dict(FP8_W, granularity="tensor", calibration={"windows": 2})),
            ["weights", "calibration"])
scheme_case("formats-calibration-on-output", spec(FP8_W, output_activations={"kind": "int8_absmax", "granularity": "tensor",
                                                                            "calibration": {"windows": 2}}), ["calibration"])
scheme_case("formats-calibration-top-norm", spec(FP8_W, FP8_STATIC, keep_tokens={"top_norm": 1}), ["calibration", "top_norm"])
# Calibration windows the data does not have: validation-head.txt holds a few hundred 32-token windows.
for label, windows, extra in [("beyond-data", 100000, ""), ("beyond-data-all-evaluated", 1, "--max-windows 0"),
                              ("beyond-data-shard", 100000, "--shard 0/2")]:
    scheme_case(f"formats-calibration-{label}", spec(FP8_W, dict(FP8_STATIC, calibration={"windows": windows})),
                ["calibration", str(windows)], extra, named=True)
case("formats-calibration-beyond-token-file", lambda d: "eval -q --model models/stories260K/stories260K.bin --data " +
     write(d, "t.bin", struct.pack("<200H", *[i % 50 + 1 for i in range(200)])) + " --seq-len 16 --max-windows 2 --schemes full," +
     write(d, "s.json", json.dumps(spec(FP8_W, dict(FP8_STATIC, calibration={"windows": 40})))) + " --out " + str(Path(d) / "o.json"),
     ["calibration", "40"])
case("formats-static-sensitivity", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 2 --scheme " +
     write(d, "s.json", json.dumps(spec(FP8_W, dict(FP8_STATIC, calibration={"windows": 100000})))), ["calibration"])

# ---- kv_cache ------------------------------------------------------------------------------------------------------
KV_ONLY = {"name": "kvp", "weights": NONE, "input_activations": NONE, "output_activations": NONE}
KV_BAD = {
    "string": ("q8_0", ["kv_cache"]), "list": (["int8"], ["kv_cache"]), "number": (8, ["kv_cache"]),
    "null": (None, ["kv_cache"]), "true": (True, ["kv_cache"]), "empty": ({}, ["kv_cache", "format"]),
    "format-number": ({"format": 8}, ["kv_cache.format"]), "format-null": ({"format": None}, ["kv_cache.format"]),
    "format-list": ({"format": ["int8"]}, ["kv_cache.format"]), "format-int3": ({"format": "int3"}, ["int3"]),
    "format-upper": ({"format": "Q8_0"}, ["Q8_0"]), "format-fp8": ({"format": "fp8"}, ["'fp8'"]),
    "format-e5m2": ({"format": "fp8-e5m2"}, ["fp8-e5m2"]), "format-q4_1": ({"format": "q4_1"}, ["q4_1"]),
    "format-empty": ({"format": ""}, ["kv_cache.format"]), "format-space": ({"format": "int8 "}, ["kv_cache.format"]),
    "group-0": ({"format": "int4", "group_size": 0}, ["group_size"]),
    "group-neg": ({"format": "int4", "group_size": -8}, ["group_size"]),
    "group-string": ({"format": "int4", "group_size": "8"}, ["group_size"]),
    "group-float": ({"format": "int4", "group_size": 2.5}, ["group_size"]),
    "group-null": ({"format": "int4", "group_size": None}, ["group_size"]),
    "group-huge": ({"format": "int4", "group_size": 2 ** 63}, ["group_size"]),
    "group-on-int8": ({"format": "int8", "group_size": 8}, ["group_size"]),
    "group-on-q8_0": ({"format": "q8_0", "group_size": 32}, ["group_size"]),
    "group-on-fp8": ({"format": "fp8-e4m3", "group_size": 8}, ["group_size"]),
    "keep-neg": ({"format": "int8", "keep_tokens": {"first": -1}}, ["keep_tokens"]),
    "keep-string": ({"format": "int8", "keep_tokens": {"first": "1"}}, ["keep_tokens"]),
    "keep-float": ({"format": "int8", "keep_tokens": {"first": 1.5}}, ["keep_tokens"]),
    "keep-null": ({"format": "int8", "keep_tokens": {"first": None}}, ["keep_tokens"]),
    "keep-top-norm": ({"format": "int8", "keep_tokens": {"top_norm": 1}}, ["keep_tokens"]),
    "keep-two-rules": ({"format": "int8", "keep_tokens": {"first": 1, "top_norm": 1}}, ["keep_tokens"]),
    "keep-list": ({"format": "int8", "keep_tokens": [1]}, ["keep_tokens"]),
    "keep-number": ({"format": "int8", "keep_tokens": 1}, ["keep_tokens"]),
    "keep-empty": ({"format": "int8", "keep_tokens": {}}, ["keep_tokens"]),
    "keep-huge": ({"format": "int8", "keep_tokens": {"first": 2 ** 62}}, ["keep_tokens"]),
    "keep-window": ({"format": "int8", "keep_tokens": {"first": 32}}, ["keep_tokens", "32"]),
    "unknown-group": ({"format": "int4", "group": 8}, ["'group'"]),
    "unknown-keep-first": ({"format": "int8", "keep_first_tokens": 1}, ["keep_first_tokens"]),
    "unknown-formats": ({"formats": "int8"}, ["formats"]),
}
for label, (kv, frags) in KV_BAD.items():
    scheme_case(f"kv-spec-{label}", dict(KV_ONLY, kv_cache=kv), frags, named=label in ("keep-huge", "keep-window"))
scheme_case("kv-scheme-keep-tokens", dict(KV_ONLY, kv_cache={"format": "int8"}, keep_tokens={"first": 1}), ["keep_tokens"])
scheme_case("kv-scheme-keep-first-tokens", dict(KV_ONLY, kv_cache={"format": "int8"}, keep_first_tokens=1), ["keep_first_tokens"])
scheme_case("kv-scheme-duplicate-key", '{"name": "kvp", "kv_cache": {"format": "int8"}, "kv_cache": {"format": "q8_0"}}',
            ["kv_cache"])
scheme_case("kv-scheme-format-duplicate", '{"name": "kvp", "kv_cache": {"format": "int8", "format": "int4"}}', ["format"])
# Formats whose blocks head_dim must hold; models without attention.
KV_TOK = struct.pack("<64H", *[i % 50 for i in range(64)])
for fixture, presets, frags in [("tiny-mamba-hf", ["kv-int8", "kv-fp8", "kv-q8_0", "kv-int4-keep1", "w8a8-kv8"], ["mamba", "attention"]),
                                ("tiny-mamba2-hf", ["kv-int8", "kv-q4_0"], ["mamba2", "attention"]),
                                ("tiny-jamba-hf", ["kv-q8_0", "kv-q4_0-keep1"], ["head_dim 4", "layers.1"]),
                                ("tiny-mistral-hf", ["kv-q8_0", "kv-q4_0"], ["head_dim 4"]),
                                ("tiny-qwen3-hf", ["kv-q4_0"], ["head_dim 8"]),
                                ("tiny-llama-hf", ["kv-q8_0"], ["head_dim 8"])]:
    for preset in presets:
        case(f"kv-model-{fixture.replace('tiny-', '').replace('-hf', '')}-{preset}", lambda d, f=fixture, p=preset: "eval -q --model " +
             family(d, f) + " --data " + write(d, "t.bin", KV_TOK) + f" --seq-len 8 --max-windows 2 --schemes full,{p} --out " +
             str(Path(d) / "o.json"), [preset] + frags)
for preset in ["kv-q8_0", "kv-q4_0", "kv-q4_0-keep1"]:
    case(f"kv-model-stories-{preset}", lambda d, p=preset: f"{NEW_EVAL} --schemes full,{p} --out " + str(Path(d) / "o.json"),
         [preset, "head_dim 8"])
for opt in ["--dtype fp16", "--dtype bf16", "--device cuda"]:  # the CPU's own refusals (no half precision, no GPU)
    case(f"kv-placement-{opt.split()[1]}", lambda d, o=opt: f"{NEW_EVAL} --schemes full,kv-int8 {o} --out " + str(Path(d) / "o.json"),
         [opt.split()[0]])
# Every placement runs a cache (quant/kv_cache_tensor.h): float64 on the CPU is evaluated.
case("kv-placement-fp64", lambda d: f"{NEW_EVAL} --schemes full,kv-int8 --dtype fp64 --out " + str(Path(d) / "o.json"),
     ["record written"], expect="accept")
case("kv-sensitivity", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 2 --scheme kv-int8",
     ["kv-int8", "kv_cache"])
scheme_case("kv-with-ggml", dict(KV_ONLY, weights={"kind": "ggml", "file_type": "q8_0"},
                                 kv_cache={"format": "q4_0"}), ["kv_cache", "head_dim 8"], named=True)
scheme_case("kv-outlier-threshold", dict(KV_ONLY, kv_cache={"format": "int8"}, outlier_threshold=6.0), ["outlier_threshold"])
case("kv-gguf-head-dim-16-q4_0", lambda d: "eval -q --model " + gguf_model(d, {}) + " --data " +
     write(d, "t.bin", struct.pack("<64H", *[i % 30 for i in range(64)])) + " --seq-len 8 --max-windows 2 --schemes full," +
     write(d, "s.json", json.dumps(dict(KV_ONLY, kv_cache={"format": "q4_0", "keep_tokens": {"first": 8}}))) + " --out " +
     str(Path(d) / "o.json"), ["scheme kvp", "head_dim 16"])

# ---- kind ggml and the gguf-* presets ------------------------------------------------------------------------------
GG_W = {"kind": "ggml", "file_type": "q8_0"}
GGML_BAD = {
    "type-unknown": ({"kind": "ggml", "type": "q4_2"}, ["q4_2"]), "type-iq4_xs": ({"kind": "ggml", "type": "iq4_xs"}, ["iq4_xs"]),
    "type-f32": ({"kind": "ggml", "type": "f32"}, ["f32"]), "type-number": ({"kind": "ggml", "type": 8}, ["type"]),
    "type-null": ({"kind": "ggml", "type": None}, ["type"]), "type-list": ({"kind": "ggml", "type": ["q8_0"]}, ["type"]),
    "type-empty": ({"kind": "ggml", "type": ""}, ["type"]), "type-bf16": ({"kind": "ggml", "type": "bf16"}, ["bf16"]),
    "file-type-unknown": ({"kind": "ggml", "file_type": "q3_k_m"}, ["q3_k_m"]),
    "file-type-number": ({"kind": "ggml", "file_type": 15}, ["file_type"]),
    "file-type-null": ({"kind": "ggml", "file_type": None}, ["file_type"]),
    "file-type-empty": ({"kind": "ggml", "file_type": ""}, ["file_type"]),
    "file-type-a-type": ({"kind": "ggml", "file_type": "q4_k"}, ["q4_k"]),
    "type-a-file-type": ({"kind": "ggml", "type": "q4_k_m"}, ["q4_k_m"]),
    "both": ({"kind": "ggml", "type": "q8_0", "file_type": "q8_0"}, ["type", "file_type"]),
    "bits-on-file-type": ({"kind": "ggml", "file_type": "q4_k_m", "bits": 4}, ["bits"]),
    "neither": ({"kind": "ggml"}, ["type", "file_type"]),
    "activations-q8": (dict(GG_W, activations="q8"), ["activations"]),
    "activations-number": (dict(GG_W, activations=8), ["activations"]),
    "unknown-key": (dict(GG_W, types="q8_0"), ["types"]), "granularity": (dict(GG_W, granularity="block:32"), ["granularity"]),
    "bits-string": (dict(GG_W, bits="8"), ["bits"]), "bits-wrong": (dict(GG_W, bits=3), ["bits"]),
    "kind-upper": ({"kind": "GGML", "type": "q8_0"}, ["GGML"]),
}
for label, (w, frags) in GGML_BAD.items():
    scheme_case(f"ggml-weights-{label}", spec(w), ["weights"] + frags)
scheme_case("ggml-on-inputs", spec(GG_W, GG_W), ["input_activations", "ggml"])
scheme_case("ggml-on-outputs", spec(GG_W, output_activations=GG_W), ["output_activations", "ggml"])
scheme_case("ggml-with-int8-inputs", spec(GG_W, {"kind": "int8_absmax", "granularity": "token"}), ["ggml", "input_activations"])
scheme_case("ggml-keep-tokens", spec(GG_W, keep_tokens={"first": 1}), ["keep_tokens"])
scheme_case("ggml-outlier-threshold", spec(GG_W, outlier_threshold=6.0), ["outlier_threshold"])
for v in ["yes", 1, None, [True], 0]:
    scheme_case(f"ggml-quantize_embedding={json.dumps(v)}", spec(GG_W, quantize_embedding=v), ["quantize_embedding"])
for v in ["yes", 1, None]:
    scheme_case(f"ggml-quantize_lm_head={json.dumps(v)}", spec(GG_W, quantize_lm_head=v), ["quantize_lm_head"])
    scheme_case(f"ggml-quantize_ssm_inner={json.dumps(v)}", spec(GG_W, quantize_ssm_inner=v), ["quantize_ssm_inner"])
scheme_case("ggml-quantize_embedding-int8", spec({"kind": "int8_absmax", "granularity": "channel"}, quantize_embedding=True),
            ["quantize_embedding"])
TT_BAD = {
    "list": (["layers.*.mlp.down"], ["tensor_types"]), "string": ("q8_0", ["tensor_types"]), "null": (None, ["tensor_types"]),
    "empty-pattern": ({"": "q8_0"}, ["tensor_types", "empty"]), "type-number": ({"layers.*.mlp.down": 8}, ["layers.*.mlp.down"]),
    "type-null": ({"layers.*.mlp.down": None}, ["layers.*.mlp.down"]),
    "type-unknown": ({"layers.*.mlp.down": "q9_0"}, ["layers.*.mlp.down", "q9_0"]),
    "gguf-name": ({"blk.0.attn_v": "q8_0"}, ["blk.0.attn_v", "matches no tensor"]),
    "regex": ({"layers\\.[0-9]+\\.attn\\.v": "q8_0"}, ["matches no tensor"]),
    "overlap": ({"layers.*.attn.v": "q8_0", "layers.0.*": "q4_0"}, ["two patterns"]),
    "q4_k-rows-64": ({"layers.0.attn.q": "q4_k"}, ["layers.0.attn.q", "256"]),
    "q6_k-lm-head": ({"lm_head": "q6_k"}, ["lm_head", "256"]),
    "iq4_nl-down-172": ({"layers.*.mlp.down": "iq4_nl"}, ["mlp.down", "172"]),
    "mxfp4-embedding": ({"token_embedding": "q4_k"}, ["token_embedding", "256"]),
}
MODEL_TIME = {"gguf-name", "regex", "overlap", "q4_k-rows-64", "q6_k-lm-head", "iq4_nl-down-172", "mxfp4-embedding"}
for label, (tt, frags) in TT_BAD.items():
    scheme_case(f"ggml-tensor_types-{label}", spec({"kind": "ggml", "file_type": "q4_k_m"}, tensor_types=tt,
                                                   quantize_lm_head=True, quantize_embedding=True), frags,
                named=label in MODEL_TIME)
scheme_case("ggml-tensor_types-dup-key", '{"name": "g", "weights": {"kind": "ggml", "type": "q8_0"}, '
            '"tensor_types": {"lm_head": "q8_0", "lm_head": "q4_0"}, "quantize_lm_head": true}', ["lm_head"])
scheme_case("ggml-tensor_types-without-ggml", spec({"kind": "int8_absmax", "granularity": "channel"},
                                                   tensor_types={"lm_head": "q8_0"}), ["tensor_types"])
scheme_case("ggml-tensor_types-excluded", spec(GG_W, tensor_types={"layers.0.attn.q": "q8_0"}, exclude=["layers.0.*"]),
            ["layers.0.attn.q"], named=True)
scheme_case("ggml-tensor_types-lm-head-not-quantised", spec(GG_W, tensor_types={"lm_head": "q4_0"}), ["lm_head"], named=True)
scheme_case("ggml-type-q4_k-stories", spec({"kind": "ggml", "type": "q4_k"}), ["Q4_K", "64", "256"], named=True)
scheme_case("ggml-type-q2_k-stories", spec({"kind": "ggml", "type": "q2_k"}), ["Q2_K", "256"], named=True)

# ---- GGUF files holding IQ4_NL and MXFP4 tensors (the reader's newest block types), forged ------------------------
GGML_F32, GGML_IQ4_NL, GGML_MXFP4 = 0, 20, 39
GQ_D, GQ_F, GQ_V = 32, 64, 32


def lcg_bytes(n, seed):
    out, x = bytearray(n), seed
    for i in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2 ** 64
        out[i] = x >> 56
    return bytes(out)


def f32_tensor(n, seed):
    return struct.pack(f"<{n}f", *[((b / 255.0) - 0.5) * 0.2 for b in lcg_bytes(n, seed)])


def block_tensor(ttype, n, seed, scale=None):
    """n values of IQ4_NL (fp16 d + 16 bytes of nibbles per 32) or MXFP4 (E8M0 e + 16 bytes per 32)."""
    blocks, raw = n // 32, lcg_bytes(n, seed)
    out = b""
    for b in range(blocks):
        qs = raw[b * 16:b * 16 + 16]
        if ttype == GGML_IQ4_NL:
            out += (scale if scale is not None and b == 1 else struct.pack("<e", 0.01)) + qs
        else:
            out += (scale if scale is not None and b == 1 else bytes([122])) + qs
    return out


def gguf_model(d, forge, name="q.gguf"):
    """A one-layer llama GGUF, d_model 32 (head_dim 16), every tensor F32 except what forge sets:
    forge = {"type": t (of blk.0.attn_q.weight), "ne": [...], "data": bytes, "offset": delta, "cut": bytes off the end,
             "scale": one block's forged scale bytes, "dup": True, "count": extra tensors claimed, "tensor": another name}."""
    D, F, V = GQ_D, GQ_F, GQ_V
    shapes = [("token_embd.weight", [D, V]), ("blk.0.attn_norm.weight", [D]), ("blk.0.attn_k.weight", [D, 16]),
              ("blk.0.attn_v.weight", [D, 16]), ("blk.0.attn_output.weight", [D, D]), ("blk.0.ffn_norm.weight", [D]),
              ("blk.0.ffn_gate.weight", [D, F]), ("blk.0.ffn_up.weight", [D, F]), ("blk.0.ffn_down.weight", [F, D]),
              ("output_norm.weight", [D]), ("output.weight", [D, V]), ("blk.0.attn_q.weight", [D, D])]
    target = forge.get("tensor", "blk.0.attn_q.weight")
    infos, offset, blobs = b"", 0, []
    for i, (tname, ne) in enumerate(shapes):
        n = math.prod(ne)
        ttype, data = GGML_F32, (struct.pack(f"<{n}f", *([1.0] * n)) if len(ne) == 1 else f32_tensor(n, i + 1))
        if tname == target and "type" in forge:
            ttype = forge["type"]
            data = forge.get("data") or block_tensor(ttype, n, i + 1, forge.get("scale"))
            ne = forge.get("ne", ne)
        infos += gguf_str(tname) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
        infos += struct.pack("<IQ", ttype, (offset + (forge.get("offset", 0) if tname == target else 0)) % 2 ** 64)
        pad = (-len(data)) % 32
        blobs.append(data + bytes(pad))
        offset += len(data) + pad
    if forge.get("dup"):
        infos += gguf_str(target) + struct.pack("<I", 2) + struct.pack("<QQ", D, D) + struct.pack("<IQ", GGML_F32, 0)
    count = len(shapes) + (1 if forge.get("dup") else 0) + forge.get("count", 0)
    meta = gguf_meta(ARCH__embedding_length=(4, D), ARCH__feed_forward_length=(4, F), ARCH__context_length=(4, 64))
    head = b"GGUF" + struct.pack("<IQQ", 3, count, len(meta)) + b"".join(meta) + infos
    head += bytes((-len(head)) % 32)
    body = head + b"".join(blobs)
    return write(d, name, body[:len(body) - forge.get("cut", 0)])


GQ_TOK = struct.pack("<64H", *[i % 30 for i in range(64)])


def gguf_eval(d, forge, schemes="full"):
    return "eval -q --model " + gguf_model(d, forge) + " --data " + write(d, "t.bin", GQ_TOK) + \
        f" --seq-len 8 --max-windows 2 --schemes {schemes} --out " + str(Path(d) / "o.json")


for tname, ttype in [("iq4_nl", GGML_IQ4_NL), ("mxfp4", GGML_MXFP4)]:
    block = 18 if ttype == GGML_IQ4_NL else 17
    T = {"type": ttype}
    case(f"ggufq-{tname}-valid-inspect", lambda d, t=T: "inspect --json " + gguf_model(d, t), [tname.upper()], expect="accept")
    case(f"ggufq-{tname}-valid-eval", lambda d, t=T: gguf_eval(d, t), [], expect="accept")
    case(f"ggufq-{tname}-valid-preset", lambda d, t=T, n=tname: gguf_eval(d, t, "full,gguf-" + ("iq4_nl" if n == "iq4_nl" else "mxfp4-moe")),
         [], expect="accept")
    case(f"ggufq-{tname}-embedding-valid", lambda d, t=T: gguf_eval(d, dict(t, tensor="token_embd.weight")), [], expect="accept")
    FORGED = {
        "row-16": (dict(T, ne=[16, 64]), ["blk.0.attn_q.weight", "32"]),
        "row-48": (dict(T, ne=[48, 32], data=bytes(block * 48)), ["blk.0.attn_q.weight"]),
        "shape-swapped": (dict(T, ne=[32, 16], data=bytes(block * 16)), ["blk.0.attn_q.weight"]),
        "ne-zero": (dict(T, ne=[0, 32], data=b""), ["blk.0.attn_q.weight"]),
        "ne-overflow": (dict(T, ne=[2 ** 62, 64]), ["blk.0.attn_q.weight"]),
        "ne-5d": (dict(T, ne=[32, 32, 1, 1, 1]), ["blk.0.attn_q.weight"]),
        "truncated": (dict(T, cut=200), ["q.gguf"]),
        "truncated-one-byte": (dict(T, cut=1 + (-(32 * block)) % 32), ["q.gguf"]),
        "offset-beyond": (dict(T, offset=2 ** 40), ["blk.0.attn_q.weight"]),
        "offset-misaligned": (dict(T, offset=1), ["blk.0.attn_q.weight"]),
        "offset-wraps": (dict(T, offset=2 ** 64 - 64), ["blk.0.attn_q.weight"]),
        "duplicate-name": (dict(T, dup=True), ["blk.0.attn_q.weight"]),
        "count-claims-more": (dict(T, count=1), ["q.gguf"]),
        "unsupported-iq4_xs": (dict(T, type=23), ["IQ4_XS"]),
        "unknown-type": (dict(T, type=99), ["99"]),
        "inf-scale": (dict(T, scale=(struct.pack("<e", float("inf")) if ttype == GGML_IQ4_NL else bytes([255]))),
                      ["attn.q"]),
        "nan-scale": (dict(T, scale=(struct.pack("<H", 0x7E00) if ttype == GGML_IQ4_NL else bytes([254]))),
                      ["attn.q"]),
        "embedding-inf": (dict(T, tensor="token_embd.weight", scale=(struct.pack("<e", float("-inf")) if ttype == GGML_IQ4_NL
                                                                      else bytes([255]))), ["token_embedding"]),
        "output-nan": (dict(T, tensor="output.weight", scale=(struct.pack("<H", 0xFE01) if ttype == GGML_IQ4_NL
                                                               else bytes([255]))), ["lm_head"]),
    }
    for label, (forge, frags) in FORGED.items():
        case(f"ggufq-{tname}-{label}", lambda d, f=forge: gguf_eval(d, f), frags)
        if label in ("row-16", "ne-overflow", "ne-5d", "truncated", "offset-beyond", "offset-misaligned", "duplicate-name",
                     "unknown-type", "count-claims-more"):
            case(f"ggufq-{tname}-{label}-inspect", lambda d, f=forge: "inspect --json " + gguf_model(d, f), frags)

# ---- the Python package (python/qeval): bad paths, bad binaries, bad records ---------------------------------------
PY_REC = MADE / "py.json"  # a real record, made once when the python group runs
if WANTED is None or "python" in WANTED:
    run(f"{NEW_EVAL} --schemes full,int8-coarse --out {PY_REC}")


def py(name, code, fragments=(), expect="refuse"):
    """A Python snippet run by tests/hardening/python_case.py (qeval, QEVAL, D and REC in scope)."""
    def build(d, code=code):
        rec = shutil.copy(PY_REC, Path(d) / "rec.json")
        return {"python": f"REC = {str(rec)!r}\n" + (code(d) if callable(code) else code)}
    case(f"python-{name}", build, fragments, expect=expect)


def script(d, name, body):
    p = write(d, name, "#!/bin/sh\n" + body + "\n")
    os.chmod(p, 0o755)
    return p


for label, body, frags in [("prints-nothing", "exit 0", ["fake"]), ("prints-text", "echo hello", ["fake", "hello"]),
                           ("prints-list", "echo '[1, 2]'", ["fake"]), ("prints-empty-object", "echo '{}'", ["fake"]),
                           ("prints-other-json", "echo '{\"rows\": 5}'", ["fake"]),
                           ("killed", "kill -9 $$", ["fake", "signal"]), ("status-1-silent", "exit 1", ["fake", "status 1"]),
                           ("status-3-stderr", "echo 'disk on fire' >&2; exit 3", ["disk on fire"]),
                           ("binary-garbage", "printf '\\377\\376{'", ["fake"])]:
    py(f"binary-{label}", lambda d, b=body: f"r = qeval.Record.load(REC, binary={script(d, 'fake', b)!r})\nprint(r.label, r.kind)",
       frags)
    py(f"binary-{label}-evaluate", lambda d, b=body: f"r = qeval.evaluate('models/stories260K/stories260K.bin', "
       f"binary={script(d, 'fake', b)!r}, out=D + '/o.json', quiet=True)\nprint(r.label)", frags)
# What must load: a record named like an option, one with a byte-order mark (the binary reads both), one
# path given to compare() as a string (one record, not its characters; without pandas the binary's verdict).
py("load-option-like-file", "import os, shutil; os.chdir(D); shutil.copy(REC, '--allow-partial'); "
   "print('kind', qeval.Record.load('--allow-partial', binary=QEVAL).kind)", ["kind eval"], expect="accept")
py("load-bom", "open(D + '/b.json', 'wb').write(b'\\xef\\xbb\\xbf' + open(REC, 'rb').read()); "
   "print('kind', qeval.Record.load(D + '/b.json', binary=QEVAL).kind)", ["kind eval"], expect="accept")
py("compare-string", "try:\n    n = len(qeval.compare(REC, binary=QEVAL))\nexcept ImportError:\n    n = 1\nprint('rows', n)",
   ["rows 1"], expect="accept")
for label, code, frags in [
        ("binary-missing", "qeval.Record.load(REC, binary='/nonexistent/qeval')", ["/nonexistent/qeval"]),
        ("binary-folder", "qeval.Record.load(REC, binary=D)", ["not an executable"]),
        ("binary-not-executable", "open(D + '/q', 'w').write('x'); qeval.Record.load(REC, binary=D + '/q')", ["not an executable"]),
        ("binary-env-missing", "import os; os.environ['QEVAL_BINARY'] = D + '/none'; qeval.Record.load(REC)", ["$QEVAL_BINARY"]),
        ("binary-set-missing", "qeval.set_binary(D + '/none'); qeval.Record.load(REC)", ["set_binary"]),
        ("binary-is-a-record", "import os; os.chmod(REC, 0o755); qeval.Record.load(REC, binary=REC)", ["rec.json"]),
        ("load-missing", "qeval.Record.load(D + '/none.json', binary=QEVAL)", ["none.json"]),
        ("load-folder", "qeval.Record.load(D, binary=QEVAL)", [""]),
        ("load-empty", "open(D + '/e.json', 'w').close(); qeval.Record.load(D + '/e.json', binary=QEVAL)", ["e.json"]),
        ("load-not-json", "open(D + '/e.json', 'w').write('{'); qeval.Record.load(D + '/e.json', binary=QEVAL)", ["e.json"]),
        ("load-list", "open(D + '/e.json', 'w').write('[]'); qeval.Record.load(D + '/e.json', binary=QEVAL)", ["e.json"]),
        ("load-option-help", "import os; os.chdir(D); qeval.Record.load('--help', binary=QEVAL)", ["--help"]),
        ("load-option-version", "import os; os.chdir(D); qeval.Record.load('--version', binary=QEVAL)", ["--version"]),
        ("load-dash", "import os; os.chdir(D); qeval.Record.load('-', binary=QEVAL)", ["-"]),
        ("load-latin1", "open(D + '/b.json', 'wb').write(open(REC, 'rb').read().replace(b'\"full\"', b'\"f\\xfcll\"', 1)); "
         "print(qeval.Record.load(D + '/b.json', binary=QEVAL).label)", ["b.json"]),
        ("load-edited", "j = json.load(open(REC)); j['schemes'][0]['perplexity']['ppl'] = 1.5; json.dump(j, open(D + '/e.json', 'w')); "
         "qeval.Record.load(D + '/e.json', binary=QEVAL)", ["e.json"]),
        ("load-nan", "j = json.load(open(REC)); j['schemes'][1]['vs_full']['dppl'] = float('nan'); "
         "json.dump(j, open(D + '/e.json', 'w')); qeval.Record.load(D + '/e.json', binary=QEVAL)", ["e.json"]),
        ("load-shard", "qeval.Record.load(REC.replace('rec.json', 'none.json'), binary=QEVAL, allow_partial=True)", ["none.json"]),
        ("load-state-file", "open(D + '/s.json', 'w').write(json.dumps({'kind': 'qeval eval state'})); "
         "qeval.Record.load(D + '/s.json', binary=QEVAL)", ["s.json"]),
        ("load-scheme-file", "open(D + '/s.json', 'w').write(json.dumps({'name': 'x', 'kv_cache': {'format': 'int8'}})); "
         "qeval.Record.load(D + '/s.json', binary=QEVAL)", ["s.json"]),
        ("series-of-eval", "qeval.Record.load(REC, binary=QEVAL).series()", ["not a series record"]),
        ("sensitivity-of-eval", "qeval.Record.load(REC, binary=QEVAL).sensitivity()", ["not a sensitivity record"]),
        ("evaluate-model-missing", "qeval.evaluate(D + '/none.bin', binary=QEVAL, quiet=True)", ["none.bin"]),
        ("evaluate-data-missing", "qeval.evaluate('models/stories260K/stories260K.bin', D + '/none.txt', binary=QEVAL, quiet=True)",
         ["none.txt"]),
        ("evaluate-model-option", "qeval.evaluate('--help', binary=QEVAL, quiet=True, out=D + '/o.json')", ["--help"]),
        ("evaluate-data-option", "qeval.evaluate('models/stories260K/stories260K.bin', '--version', binary=QEVAL, quiet=True, "
         "out=D + '/o.json')", ["--version"]),
        ("evaluate-schemes-empty", "qeval.evaluate('models/stories260K/stories260K.bin', schemes=[], binary=QEVAL, quiet=True, "
         f"tokenizer={TOKENIZER!r}, seq_len=32, max_windows=2)", ["schemes"]),
        ("evaluate-schemes-unknown", "qeval.evaluate('models/stories260K/stories260K.bin', schemes=['int3'], binary=QEVAL, "
         "quiet=True)", ["int3"]),
        ("evaluate-schemes-kv-q4_0", "qeval.evaluate('models/stories260K/stories260K.bin', schemes=['kv-q4_0'], binary=QEVAL, "
         f"quiet=True, tokenizer={TOKENIZER!r}, seq_len=32, max_windows=2)", ["kv-q4_0", "head_dim"]),
        ("evaluate-option-unknown", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, windows=2)",
         ["--windows"]),
        ("evaluate-option-negative", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, max_windows=-2)",
         ["--max-windows"]),
        ("evaluate-option-true", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, max_windows=True)",
         ["--max-windows"]),
        ("evaluate-option-injection", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, "
         "max_windows='2 --dtype fp64')", ["--max-windows"]),
        ("evaluate-out-folder", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, out=D)", ["--out"]),
        ("evaluate-out-no-parent", "qeval.evaluate('models/stories260K/stories260K.bin', binary=QEVAL, quiet=True, "
         "out=D + '/a/b/o.json')", ["--out"]),
        ("evaluate-out-is-model", f"import shutil; m = shutil.copy({str(DATA / 'models/stories260K/stories260K.bin')!r}, D + '/m.bin'); "
         f"qeval.evaluate(m, binary=QEVAL, quiet=True, out=m, tokenizer={TOKENIZER!r}, seq_len=32, max_windows=2)", ["--out"]),
        ("evaluate-kv-mamba", lambda d: f"qeval.evaluate({family(d, 'tiny-mamba-hf')!r}, {write(d, 't.bin', KV_TOK)!r}, "
         "schemes=['kv-int8'], binary=QEVAL, quiet=True, seq_len=8, max_windows=2)", ["kv-int8", "mamba"]),
        ("figures-into-file", "qeval.Record.load(REC, binary=QEVAL).figures(out=REC)", ["--out"]),
        ("compare-missing", "qeval.compare([D + '/none.json'], binary=QEVAL)", ["none.json"]),
        ("compare-option", "import os; os.chdir(D); qeval.compare(['--help'], binary=QEVAL)", ["--help"]),
        ("compare-empty", "qeval.compare([], binary=QEVAL)", ["record"]),
        ("compare-labels-comma", "qeval.compare([REC, REC], binary=QEVAL, labels=['a,b', 'c'])", ["label"]),
        ("run-killed-binary", lambda d: f"qeval.run(['compare', REC], binary={script(d, 'fake', 'kill -9 $$')!r})", ["signal"]),
]:
    py(label, code, [f for f in frags if f])

# ---- quantised Hugging Face folders (issue 78): GPTQ, AWQ, compressed-tensors, fine-grained FP8, bitsandbytes --------
# Group qfolder: the tiny Llama (2 layers, d_model 64) with every block linear stored by one method, written here with
# struct alone (the tensor names, dtypes, shapes and configs of tests/loaders/checkpoints/quantized_checkpoint_test.cpp);
# a control per method that must be read, then every quantization_config key qeval reads with bad values and edits
# of the stored tensors. Config errors are found on open (inspect), tensor errors when a layer is dequantised (eval).
QF_SRC = DATA / "fixtures/tiny-llama-hf"
QF_LINEARS = llama_linears(2, 64, 16, 176)
QF_UP = "model.layers.1.mlp.up_proj"  # the module the tensor edits change: N 176, K 64
QF_TOK = struct.pack("<64H", *[(i * 7) % 500 + 3 for i in range(64)])
QF_CACHE = {}


def qf_tensors(method):
    """Every tensor of the tiny Llama with the block linears stored by `method` (made once, copied per case)."""
    if method not in QF_CACHE:
        t = {}
        for shard in ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]:
            t.update(st_read(QF_SRC / shard))
        QF_CACHE[method] = quantized_tensors(t, QF_LINEARS, method)
    return {k: list(v) for k, v in QF_CACHE[method].items()}


def qfolder(d, method, qc_edit=None, t_edit=None, config_edit=None, raw=None):
    """The quantised folder in d/q: qc_edit(quantization_config), t_edit(tensors), config_edit(config.json) change it."""
    dst = Path(d) / "q"
    dst.mkdir(parents=True, exist_ok=True)
    t = qf_tensors(method)
    if t_edit:
        t_edit(t)
    (dst / "model.safetensors").write_bytes(raw(st_bytes(t)) if raw else st_bytes(t))
    config = json.loads((QF_SRC / "config.json").read_text())
    config["quantization_config"] = copy.deepcopy(QF_METHODS[method][0])
    if qc_edit:
        qc_edit(config["quantization_config"])
    if config_edit:
        config_edit(config)
    (dst / "config.json").write_text(json.dumps(config, indent=2, allow_nan=True))
    return str(dst)


def qf_eval(d, method, **kw):
    return "eval -q --model " + qfolder(d, method, **kw) + " --data " + write(d, "t.bin", QF_TOK) + \
        " --seq-len 8 --max-windows 2 --schemes full --out " + str(Path(d) / "o.json")


def qset(path, value):
    """An edit of the quantization_config at a dotted key path (value DELETE removes it)."""
    keys = path.split(".")

    def edit(q):
        o = q
        for k in keys[:-1]:
            o = o[k]
        if value is DELETE:
            o.pop(keys[-1], None)
        else:
            o[keys[-1]] = value
    return edit


def qcase(label, method, path, value, frags=None, how="inspect", file="config.json"):
    """A bad quantization_config value; the message must name the file and the key path."""
    frags = [file, "quantization_config." + path] if frags is None else frags
    if how == "inspect":
        case(f"qfolder-{method}-{label}", lambda d, m=method, e=qset(path, value): "inspect --json " + qfolder(d, m, qc_edit=e), frags)
    else:
        case(f"qfolder-{method}-{label}", lambda d, m=method, e=qset(path, value): qf_eval(d, m, qc_edit=e), frags)


def tcase(label, method, edit, frags, raw=None):
    """An edit of the stored tensors, found when the layer is dequantised."""
    case(f"qfolder-{method}-{label}", lambda d, m=method, e=edit, r=raw: qf_eval(d, m, t_edit=e, raw=r), frags)


for method in QF_METHODS:
    case(f"qfolder-{method}-valid-inspect", lambda d, m=method: "inspect --json " + qfolder(d, m),
         ['"method": "' + QF_METHODS[method][0]["quant_method"]], expect="accept")
    case(f"qfolder-{method}-valid-eval", lambda d, m=method: qf_eval(d, m), ["record written"], expect="accept")

# quantization_config itself and quant_method.
for label, v in {"list": [4], "string": "gptq", "number": 4, "empty": {}}.items():
    case(f"qfolder-config-{label}", lambda d, v=v: "inspect --json " + qfolder(d, "gptq-v2", config_edit=setter("quantization_config", v)),
         ["config.json", "quantization_config"])
for v in ["GPTQ", "gptq2", "", 4, ["gptq"], "quanto", "hqq", "bitsandbytes_4bit", "fp8 "]:
    qcase(f"quant_method={json.dumps(v)}", "gptq-v2", "quant_method", v)
# AutoGPTQ's quantize_config.json and AutoAWQ's quant_config.json beside a config.json without quantization_config.
for fname, method, body in [("quantize_config.json", "gptq-v1", {"bits": 6, "group_size": 16}),
                            ("quantize_config.json", "gptq-v1", {"bits": "4", "group_size": 16}),
                            ("quantize_config.json", "gptq-v1", {"bits": 4, "group_size": 0}),
                            ("quant_config.json", "awq", {"w_bit": 3, "q_group_size": 16, "zero_point": True, "version": "GEMM"}),
                            ("quant_config.json", "awq", {"w_bit": 4, "q_group_size": -1, "zero_point": True, "version": "GEMM"}),
                            ("quant_config.json", "awq", {"w_bit": 4, "q_group_size": 16, "version": "GEMV"})]:
    def build(d, fname=fname, method=method, body=body):
        p = qfolder(d, method, config_edit=setter("quantization_config", DELETE))
        write(p, fname, json.dumps(body))
        return "inspect --json " + p
    case(f"qfolder-{fname.split('.')[0]}-{'-'.join(f'{k}={v}' for k, v in body.items() if k in ('bits', 'w_bit', 'group_size', 'q_group_size', 'version'))}",
         build, [fname])
case("qfolder-quantize_config-not-json", lambda d: "inspect --json " + write(
    qfolder(d, "gptq-v1", config_edit=setter("quantization_config", DELETE)), "quantize_config.json", "{bits: 4"), ["quantize_config.json"])
case("qfolder-config-null", lambda d: qf_eval(d, "gptq-v2", config_edit=setter("quantization_config", None)), ["q_proj.weight"])

# GPTQ and AWQ keys.
GPTQ_BAD = {"bits": ["4", 4.5, 6, 0, -4, 1, 16, True, [4], DELETE], "group_size": [0, -2, "16", 2.5, True, -128],
            "desc_act": ["false", 1, [False]], "sym": ["true", 0],
            "checkpoint_format": ["marlin", "bitblas", "gptq_v3", 2, "", "GPTQ_V2"]}
for key, vals in GPTQ_BAD.items():
    for v in vals:
        qcase(f"{key}={'missing' if v is DELETE else json.dumps(v)}", "gptq-v2", key, v)
qcase("format=marlin", "gptq-v1", "format", "marlin")
# group sizes the config allows but the stored tensors do not have: the eval names the tensor.
# (qzeros is checked first: its rows are the groups.)
for v in [24, 32, 64, -1, 2 ** 40, 2 ** 63 - 1]:
    qcase(f"group_size={v}-stored-16", "gptq-v2", "group_size", v, ["model.safetensors", "qzeros"], how="eval")
for v in [2, 3, 8]:
    qcase(f"bits={v}-stored-4", "gptq-v2", "bits", v, ["model.safetensors", "qweight"], how="eval")
AWQ_BAD = {"bits": [3, 8, "4", 0, 2, DELETE], "group_size": [0, -1, "16", 2.5, -128], "zero_point": ["yes", 1],
           "version": ["gemv", "GEMV_fast", "exllama", "marlin", 4, "", "ipex"]}
for key, vals in AWQ_BAD.items():
    for v in vals:
        qcase(f"{key}={'missing' if v is DELETE else json.dumps(v)}", "awq", key, v)
for v, frag in [(24, "24"), (48, "48"), (32, "qzeros"), (2 ** 63 - 1, "group_size")]:
    qcase(f"group_size={v}-stored-16", "awq", "group_size", v, ["model.safetensors", frag], how="eval")

# compressed-tensors keys.
W = "config_groups.group_0.weights"
G = "config_groups.group_0"
CT_BAD = {
    "format": ["pack_quantized", "float-quantized", "nvfp4-pack-quantized", "dense", 3, "marlin-24", ""],
    "config_groups": [DELETE, {}, [], "group_0", {"group_0": []}, {"group_0": "Linear"}],
    f"{G}.targets": [DELETE, [], 5, [5], "re:(", ["re:[a-"], ["re:" + "a" * 1001], ["re:(a|b"]],
    f"{G}.weights": [DELETE, [], "int4", 4],
    f"{G}.format": ["packed", 5, "float-quantized"],
    "ignore": [5, [5], "re:(", {"lm_head": True}],
    f"{W}.num_bits": [0, 9, 16, "4", 4.5, -4, True],
    f"{W}.type": ["integer", 4, "float", "INT"],
    f"{W}.symmetric": ["no", 1],
    f"{W}.strategy": ["groups", "GROUP", 5, "block", "token"],
    f"{W}.group_size": [0, -16, "16", 2.5, DELETE],
    f"{W}.actorder": ["desc", 5, "GROUP"],
}
CT_FRAG = {(f"{W}.type", "float"): "quantization_config.format", (f"{W}.strategy", "block"): f"quantization_config.{W}.block_structure"}
for key, vals in CT_BAD.items():
    for v in vals:
        frag = CT_FRAG.get((key, v if isinstance(v, str) else None), "quantization_config." + key)
        label = key.replace(G + ".", "g0.").replace("g0.weights.", "w.")
        qcase(f"{label}={'missing' if v is DELETE else json.dumps(v)[:24]}", "ct-pack", key, v, ["config.json", frag])
for v in [[128], "128x128", [0, 128], [-1, 2], ["a", "b"], [128, 128, 1], None]:
    case(f"qfolder-ct-pack-block_structure={json.dumps(v)}", lambda d, v=v: "inspect --json " + qfolder(
        d, "ct-pack", qc_edit=lambda q: q["config_groups"]["group_0"]["weights"].update(strategy="block", block_structure=v)),
        ["config.json", "block_structure"])
# Targets and ignores that leave the stored modules unmatched: the modules read as plain, their .weight is absent.
for label, edit in {"targets-Conv2d": qset(f"{G}.targets", ["Conv2d"]),
                    "targets-no-module": qset(f"{G}.targets", ["re:model\\.layers\\.9\\..*"]),
                    "targets-mlp-only": qset(f"{G}.targets", ["re:.*mlp\\..*"]),
                    "ignore-everything": qset("ignore", ["re:.*"]),
                    "ignore-layer-1": qset("ignore", ["lm_head", "re:model\\.layers\\.1\\..*"])}.items():
    case(f"qfolder-ct-pack-{label}", lambda d, e=edit: qf_eval(d, "ct-pack", qc_edit=e), ["model.safetensors", "weight"])
# num_bits / group_size the stored tensors do not have.
for key, v, frag in [("num_bits", 8, "weight_packed"), ("num_bits", 2, "weight_packed"), ("group_size", 32, "weight_scale"),
                     ("group_size", 24, "group"), ("strategy", "channel", "weight_scale")]:
    qcase(f"{key}={v}-stored", "ct-pack", f"{W}.{key}", v, ["model.safetensors", frag], how="eval")
for method, key, v, frag in [("ct-fp8", "num_bits", 4, "format"), ("ct-fp8", "type", "int", "format"),
                             ("ct-fp8", "strategy", "group", W + ".group_size"), ("ct-nvfp4", "num_bits", 8, "format"),
                             ("ct-nvfp4", "type", "int", "format"), ("ct-nvfp4", "group_size", 0, W + ".group_size"),
                             ("ct-fp8", "num_bits", 16, W + ".num_bits")]:
    qcase(f"{key}={v}", method, f"{W}.{key}", v, ["config.json", "quantization_config." + frag])
qcase("strategy=tensor-stored-channel", "ct-fp8", f"{W}.strategy", "tensor", ["model.safetensors", "weight_scale"], how="eval")

# fine-grained FP8 keys.
for v in [DELETE, [128], [0, 128], [-128, 128], "128", [128.5, 128], ["128", "128"], [128, 128, 1], None, {}]:
    qcase(f"weight_block_size={'missing' if v is DELETE else json.dumps(v)[:20]}", "fp8-block", "weight_block_size", v,
          ["config.json", "quantization_config.weight_block_size"])
for v in [[32, 32], [64, 128], [1, 1], [2 ** 62, 2 ** 62], [2 ** 40, 128], [2 ** 63 - 1, 128], [128, 2 ** 63 - 1]]:
    qcase(f"weight_block_size={json.dumps(v)}-stored-128", "fp8-block", "weight_block_size", v,
          ["model.safetensors", "weight_scale_inv"], how="eval")
for key, vals in {"activation_scheme": ["dyn", 5, "STATIC"], "modules_to_not_convert": [5, [5], {"lm_head": 1}]}.items():
    for v in vals:
        qcase(f"{key}={json.dumps(v)}", "fp8-block", key, v)

# bitsandbytes keys.
for label, edit in {"both": lambda q: q.update(load_in_8bit=True), "neither": lambda q: q.update(load_in_4bit=False),
                    "none-given": lambda q: q.pop("load_in_4bit"), "4bit-string": lambda q: q.update(load_in_4bit="true"),
                    "4bit-number": lambda q: q.update(load_in_4bit=1), "8bit-string": lambda q: q.update(load_in_8bit="false")}.items():
    case(f"qfolder-bnb-nf4-load_in-{label}", lambda d, e=edit: "inspect --json " + qfolder(d, "bnb-nf4", qc_edit=e),
         ["config.json", "quantization_config.load_in_"])
for key, vals in {"bnb_4bit_quant_type": ["nf3", "NF4", 4, "int8", ""], "bnb_4bit_use_double_quant": ["yes", 1],
                  "llm_int8_skip_modules": [5, [5], {"lm_head": 1}]}.items():
    for v in vals:
        qcase(f"{key}={json.dumps(v)}", "bnb-nf4", key, v)
qcase("bnb_4bit_quant_type=fp4-stored-nf4", "bnb-nf4", "bnb_4bit_quant_type", "fp4",
      ["config.json", "bitsandbytes__fp4"], how="eval")
case("qfolder-bnb-int8-load_in_4bit-stored-int8", lambda d: qf_eval(d, "bnb-int8", qc_edit=lambda q: q.update(
    load_in_8bit=False, load_in_4bit=True, bnb_4bit_quant_type="nf4")), ["config.json", "load_in_4bit", "int8"])


# ---- the stored tensors -------------------------------------------------------------------------------------------------
def t_set(field, value, module=QF_UP):
    def edit(t):
        if value is DELETE:
            del t[module + "." + field]
        else:
            t[module + "." + field] = value(t[module + "." + field]) if callable(value) else value
    return edit


def t_shape(shape):
    """The tensor re-declared with another shape: its bytes cut or padded to match."""
    def f(v):
        n = math.prod(shape) * ST_SIZE[v[0]]
        return [v[0], list(shape), (v[2] + bytes(n))[:n]]
    return f


def t_dtype(dtype):
    def f(v):
        n = math.prod(v[1]) * ST_SIZE[dtype]
        return [dtype, v[1], (v[2] * 8)[:n]]
    return f


def t_poke(index, value, fmt_="<e"):
    def f(v):
        b = bytearray(v[2])
        w = struct.calcsize(fmt_)
        b[index * w:(index + 1) * w] = struct.pack(fmt_, value)
        return [v[0], v[1], bytes(b)]
    return f


N_UP, K_UP = 176, 64
NAN16, INF16 = struct.unpack("<e", b"\x00\x7e")[0], float("inf")
GPTQ_T = {
    "qweight-short": ("qweight", t_shape([7, N_UP])), "qweight-transposed": ("qweight", t_shape([N_UP, 8])),
    "qweight-1d": ("qweight", t_shape([8 * N_UP])), "qweight-f32": ("qweight", t_dtype("F32")), "qweight-i64": ("qweight", t_dtype("I64")),
    "qweight-u8": ("qweight", t_dtype("U8")), "qweight-empty": ("qweight", t_shape([0, N_UP])),
    "qzeros-short": ("qzeros", t_shape([3, 22])), "qzeros-wide": ("qzeros", t_shape([4, 23])), "qzeros-f16": ("qzeros", t_dtype("F16")),
    "scales-short": ("scales", t_shape([3, N_UP])), "scales-transposed": ("scales", t_shape([N_UP, 4])),
    "scales-i32": ("scales", t_dtype("I32")), "scales-f64": ("scales", t_dtype("F64")),
    "scales-nan": ("scales", t_poke(5, NAN16)), "scales-inf": ("scales", t_poke(0, INF16)), "scales-neg-inf": ("scales", t_poke(700, -INF16)),
    "qweight-absent": ("qweight", DELETE), "qzeros-absent": ("qzeros", DELETE), "scales-absent": ("scales", DELETE),
}
for label, (field, value) in GPTQ_T.items():
    absent = value is DELETE
    tcase(label, "gptq-v2", t_set(field, value), ["config.json" if absent else "model.safetensors", QF_UP + ("." + field if absent else ""),
                                                    field])
G_IDX = {"g_idx-out-of-range": t_poke(3, 9, "<i"), "g_idx-negative": t_poke(0, -1, "<i"), "g_idx-huge": t_poke(63, 2 ** 31 - 1, "<i"),
         "g_idx-inconsistent": t_poke(0, 2, "<i"), "g_idx-short": t_shape([32]), "g_idx-2d": t_shape([64, 1]),
         "g_idx-f32": t_dtype("F32"), "g_idx-u8": t_dtype("U8")}
for label, value in G_IDX.items():
    tcase(label, "gptq-v1", t_set("g_idx", value), ["model.safetensors", QF_UP, "g_idx"])
# desc_act true with g_idx in range but out of order is valid; g_idx beyond the groups with desc_act is not.
case("qfolder-gptq-v1-desc_act-g_idx-permuted", lambda d: qf_eval(d, "gptq-v1", qc_edit=qset("desc_act", True), t_edit=t_set(
    "g_idx", qf_ints([(k * 5) % 4 for k in range(K_UP)], [K_UP], "I32"))), ["record written"], expect="accept")
case("qfolder-gptq-v1-desc_act-g_idx-out-of-range", lambda d: qf_eval(d, "gptq-v1", qc_edit=qset("desc_act", True), t_edit=t_set(
    "g_idx", t_poke(10, 4, "<i"))), ["model.safetensors", QF_UP, "g_idx"])
AWQ_T = {"qweight-short": ("qweight", t_shape([63, 22])), "qweight-gptq-layout": ("qweight", t_shape([8, N_UP])),
         "qweight-f32": ("qweight", t_dtype("F32")), "qzeros-short": ("qzeros", t_shape([3, 22])),
         "qzeros-i64": ("qzeros", t_dtype("I64")), "scales-short": ("scales", t_shape([4, 175])),
         "scales-nan": ("scales", t_poke(17, NAN16)), "scales-inf": ("scales", t_poke(2, -INF16)),
         "qweight-absent": ("qweight", DELETE), "qzeros-absent": ("qzeros", DELETE), "scales-absent": ("scales", DELETE)}
for label, (field, value) in AWQ_T.items():
    absent = value is DELETE
    tcase(label, "awq", t_set(field, value), ["config.json" if absent else "model.safetensors", field])
BF_NAN, BF_INF = float("nan"), float("inf")
CT_T = {"weight_packed-short": ("weight_packed", t_shape([N_UP, 7])), "weight_packed-transposed": ("weight_packed", t_shape([8, N_UP])),
        "weight_packed-u8": ("weight_packed", t_dtype("U8")), "weight_packed-f32": ("weight_packed", t_dtype("F32")),
        "weight_scale-short": ("weight_scale", t_shape([N_UP, 3])), "weight_scale-channel": ("weight_scale", t_shape([N_UP, 1])),
        "weight_scale-i32": ("weight_scale", t_dtype("I32")),
        "weight_scale-nan": ("weight_scale", lambda v: [v[0], v[1], v[2][:10] + struct.pack("<f", BF_NAN)[2:4] + v[2][12:]]),
        "weight_scale-inf": ("weight_scale", lambda v: [v[0], v[1], struct.pack("<f", BF_INF)[2:4] + v[2][2:]]),
        "weight_zero_point-short": ("weight_zero_point", t_shape([21, 4])), "weight_zero_point-absent": ("weight_zero_point", DELETE),
        "weight_zero_point-f16": ("weight_zero_point", t_dtype("F16")),
        "weight_shape-swapped": ("weight_shape", qf_ints([K_UP, N_UP], [2])), "weight_shape-3": ("weight_shape", qf_ints([N_UP, K_UP, 1], [3])),
        "weight_shape-negative": ("weight_shape", qf_ints([-N_UP, K_UP], [2])), "weight_shape-f32-fraction": ("weight_shape", qf_floats([176.5, 64.0], [2])),
        "weight_shape-huge": ("weight_shape", qf_ints([2 ** 62, K_UP], [2])),
        "weight_packed-absent": ("weight_packed", DELETE), "weight_scale-absent": ("weight_scale", DELETE),
        "weight_shape-absent": ("weight_shape", DELETE),
        "weight_g_idx-permuted": ("weight_g_idx", qf_ints([(k * 5) % 4 for k in range(K_UP)], [K_UP], "I32")),
        "weight_g_idx-out-of-range": ("weight_g_idx", qf_ints([9] * K_UP, [K_UP], "I32"))}
for label, (field, value) in CT_T.items():
    absent = value is DELETE
    frags = ["config.json", QF_UP + "." + field] if absent else ["model.safetensors", QF_UP, field]
    tcase(label, "ct-pack", t_set(field, value), frags)
FP8_T = {"weight-f32": ("weight", t_dtype("F32")), "weight-u8-short": ("weight", t_shape([N_UP, 63])),
         "weight-i8": ("weight", t_dtype("I8")), "weight_scale-short": ("weight_scale", t_shape([175, 1])),
         "weight_scale-group": ("weight_scale", t_shape([N_UP, 4])), "weight_scale-tensor": ("weight_scale", t_shape([1])),
         "weight_scale-nan": ("weight_scale", lambda v: [v[0], v[1], v[2][:4] + struct.pack("<f", BF_NAN)[2:4] + v[2][6:]]),
         "weight_scale-inf": ("weight_scale", lambda v: [v[0], v[1], struct.pack("<f", -BF_INF)[2:4] + v[2][2:]]),
         "weight_scale-absent": ("weight_scale", DELETE), "weight-absent": ("weight", DELETE)}
for label, (field, value) in FP8_T.items():
    absent = value is DELETE
    tcase(label, "ct-fp8", t_set(field, value), ["config.json" if absent else "model.safetensors", field] if not (absent and field == "weight")
          else [QF_UP + ".weight"])
NV_T = {"weight_packed-short": ("weight_packed", t_shape([N_UP, 31])), "weight_packed-i32": ("weight_packed", t_dtype("I32")),
        "weight_scale-short": ("weight_scale", t_shape([N_UP, 3])), "weight_scale-f32": ("weight_scale", t_dtype("F32")),
        "weight_scale-nan-code": ("weight_scale", lambda v: [v[0], v[1], v[2][:5] + b"\x7f" + v[2][6:]]),
        "weight_global_scale-zero": ("weight_global_scale", qf_floats([0.0], [1])),
        "weight_global_scale-nan": ("weight_global_scale", qf_floats([float("nan")], [1])),
        "weight_global_scale-inf": ("weight_global_scale", qf_floats([float("inf")], [1])),
        "weight_global_scale-2": ("weight_global_scale", qf_floats([8.0, 8.0], [2])),
        "weight_global_scale-absent": ("weight_global_scale", DELETE), "weight_packed-absent": ("weight_packed", DELETE)}
for label, (field, value) in NV_T.items():
    absent = value is DELETE
    tcase(label, "ct-nvfp4", t_set(field, value), ["config.json" if absent else "model.safetensors", field])
FB_T = {"weight_scale_inv-short": ("weight_scale_inv", t_shape([1, 1])), "weight_scale_inv-per-row": ("weight_scale_inv", t_shape([N_UP, 1])),
        "weight_scale_inv-nan": ("weight_scale_inv", qf_floats([1.0, float("nan")], [2, 1])),
        "weight_scale_inv-inf": ("weight_scale_inv", qf_floats([float("inf"), 1.0], [2, 1])),
        "weight_scale_inv-i32": ("weight_scale_inv", t_dtype("I32")), "weight_scale_inv-f16": ("weight_scale_inv", t_dtype("F16")),
        "weight-f16": ("weight", t_dtype("F16")), "weight-short": ("weight", t_shape([175, K_UP])),
        "weight_scale_inv-absent": ("weight_scale_inv", DELETE)}
for label, (field, value) in FB_T.items():
    absent = value is DELETE
    tcase(label, "fp8-block", t_set(field, value), ["config.json" if absent else "model.safetensors", field])


def bnb_state(**over):
    st = json.dumps(qf_state(N_UP, K_UP, **over)).encode()
    return ["U8", [len(st)], st]


QS = "weight.quant_state.bitsandbytes__nf4"
BNB_T = {"quant_state-not-json": (QS, ["U8", [3], b"\x00\x01\x02"]), "quant_state-list": (QS, ["U8", [2], b"[]"]),
         "quant_state-truncated": (QS, lambda v: ["U8", [v[1][0] - 5], v[2][:-5]]),
         "quant_state-blocksize-missing": (QS, bnb_state(blocksize=DELETE)), "quant_state-blocksize-0": (QS, bnb_state(blocksize=0)),
         "quant_state-blocksize-string": (QS, bnb_state(blocksize="64")), "quant_state-blocksize-neg": (QS, bnb_state(blocksize=-64)),
         "quant_state-blocksize-128": (QS, bnb_state(blocksize=128)), "quant_state-blocksize-huge": (QS, bnb_state(blocksize=2 ** 62)),
         "quant_state-shape": (QS, bnb_state(shape=[64, 176])), "quant_state-shape-string": (QS, bnb_state(shape="176x64")),
         "quant_state-quant_type": (QS, bnb_state(quant_type="fp4")),
         "quant_state-nested_offset-string": (QS, bnb_state(nested_offset="0.03")),
         "quant_state-nested_offset-missing": (QS, bnb_state(nested_offset=DELETE)),
         "quant_state-nested_blocksize-0": (QS, bnb_state(nested_blocksize=0)),
         "quant_state-f32": (QS, t_dtype("F32")),
         "absmax-short": ("weight.absmax", t_shape([100])), "absmax-f16": ("weight.absmax", t_dtype("F16")),
         "nested_absmax-nan": ("weight.nested_absmax", qf_floats([float("nan")] * 1, [1])),
         "nested_absmax-short": ("weight.nested_absmax", qf_floats([], [0])),
         "nested_quant_map-short": ("weight.nested_quant_map", t_shape([16])),
         "weight-short": ("weight", t_shape([N_UP * K_UP // 2 - 1, 1])), "weight-i32": ("weight", t_dtype("I32")),
         "absmax-absent": ("weight.absmax", DELETE), "quant_state-absent": (QS, DELETE)}
for label, (field, value) in BNB_T.items():
    absent = value is DELETE
    frags = ["config.json", QF_UP + "." + field] if absent else ["model.safetensors", QF_UP]
    if not absent and field == QS:
        frags.append({"quant_state-blocksize-128": "absmax", "quant_state-blocksize-huge": "blocksize"}.get(label, "quant_state"))
    elif not absent and field != "weight":
        frags.append(field.split(".")[-1])
    tcase(label, "bnb-nf4", t_set(field, value), frags)
BNB8_T = {"SCB-short": ("SCB", t_shape([175])), "SCB-nan": ("SCB", t_poke(3, float("nan"), "<f")),
          "SCB-inf": ("SCB", t_poke(0, float("inf"), "<f")), "SCB-f16": ("SCB", t_dtype("F16")), "SCB-absent": ("SCB", DELETE),
          "weight-transposed": ("weight", t_shape([K_UP, N_UP])), "weight-u8": ("weight", t_dtype("U8"))}
for label, (field, value) in BNB8_T.items():
    absent = value is DELETE
    tcase(label, "bnb-int8", t_set(field, value), ["config.json" if absent else "model.safetensors", field] if field != "weight"
          else [QF_UP])
# The weights file itself: cut inside a stored tensor, a header offset past the end.
tcase("truncated", "gptq-v2", None, ["model.safetensors"], raw=lambda b: b[:-4096])
tcase("qweight-offset-beyond", "gptq-v2", None, ["model.safetensors"], raw=lambda b: b.replace(b'"data_offsets": [0,', b'"data_offsets": [99999999,', 1))

# ---- calibrated schemes (issue 77): GPTQ and AWQ specs, the presets, --calibration-data / -seq-len / -windows -------
# Group calib: the "gptq" and "awq" settings of an int4_zeropoint weights spec (quant/schemes/scheme_json.cpp
# gptq_from_json / awq_from_json) with bad values, the methods where they do not apply, and the calibration options of
# eval (docs/calibrated.md) with bad files and lengths. stories260K, 2 evaluated windows of 32 tokens, 2 calibration windows.
CAL_DATA = "text/tinystories/validation-head.txt"
GPTQ_W = {"kind": "int4_zeropoint", "granularity": "channel", "method": "gptq", "gptq": {"calibration": {"windows": 2}}}
AWQ_W = {"kind": "int4_zeropoint", "granularity": "channel", "method": "awq", "awq": {"calibration": {"windows": 2}}}


def cal_w(base, settings=None, **over):
    """A weights spec: base with its "gptq" / "awq" object's keys replaced (DELETE removes), and top-level overrides."""
    w = copy.deepcopy(base)
    key = w["method"]
    for k, v in (settings or {}).items():
        if v is DELETE:
            w[key].pop(k, None)
        else:
            w[key][k] = v
    for k, v in over.items():
        if v is DELETE:
            w.pop(k, None)
        else:
            w[k] = v
    return spec(w)


scheme_case("calib-gptq-valid", cal_w(GPTQ_W), [], named=True)
cases[-1].update(expect="accept", fragments=["record written"])
scheme_case("calib-awq-valid", cal_w(AWQ_W), [], named=True)
cases[-1].update(expect="accept", fragments=["record written"])
scheme_case("calib-gptq-valid-3bit-group-actorder", cal_w(GPTQ_W, {"actorder": "group", "block_size": 16}, bits=3,
                                                          granularity="group:32"), [], named=True)
cases[-1].update(expect="accept", fragments=["record written"])
GPTQ_BAD = {
    "symmetric": ["true", 1, None, [True]],
    "dampening": [-0.01, "0.01", None, [0.01], True, -1e-300],
    "block_size": [0, -1, "128", 2.5, 2 ** 63, True, None, 2 ** 64],
    "actorder": ["desc", True, 1, None, "STATIC", "weight", "", ["static"]],
    "group_params": ["new", 1, None, "Updated"],
    "arithmetic": ["gptqmodel", 3, "AutoGPTQ", None],
}
for key, vals in GPTQ_BAD.items():
    for v in vals:
        scheme_case(f"calib-gptq-{key}={json.dumps(v)[:20]}", cal_w(GPTQ_W, {key: v}), [f"gptq.{key}"])
CAL_BAD = {"list": [], "number": 5, "null": None, "empty": {}, "windows-0": {"windows": 0}, "windows-neg": {"windows": -1},
           "windows-string": {"windows": "2"}, "windows-float": {"windows": 2.5}, "windows-huge": {"windows": 2 ** 63},
           "windows-null": {"windows": None}, "windows-bool": {"windows": True},
           "statistic": {"windows": 2, "statistic": "max"}, "window": {"window": 2}}
for method, base in [("gptq", GPTQ_W), ("awq", AWQ_W)]:
    for label, v in CAL_BAD.items():
        scheme_case(f"calib-{method}-calibration-{label}", cal_w(base, {"calibration": v}), [f"{method}.calibration"])
    for unknown in (["damp_percent", "desc_act", "group_size", "true_sequential", "sym"] if method == "gptq" else
                    ["n_grid_points", "max_chunk_memory", "mappings", "offload_device"]):
        scheme_case(f"calib-{method}-unknown-{unknown}", cal_w(base, {unknown: 1}), [method, f"'{unknown}'"])
    for label, v in {"list": [], "string": "on", "number": 5, "null": None, "true": True}.items():
        scheme_case(f"calib-{method}-settings-{label}", cal_w(base, **{method: v}), [method])
    # Windows the data does not have: validation-head.txt holds a few hundred 32-token windows.
    scheme_case(f"calib-{method}-windows-beyond-data", cal_w(base, {"calibration": {"windows": 100000}}), ["100000"], named=True)
    scheme_case(f"calib-{method}-granularity-tensor", cal_w(base, granularity="tensor"), ["method", "granularity"])
    scheme_case(f"calib-{method}-granularity-group-0", cal_w(base, granularity="group:0"), ["granularity"])
    # A last group shorter than the others (64 = 48 + 16) is what round to nearest does too.
    scheme_case(f"calib-{method}-granularity-group-48", cal_w(base, granularity="group:48"), [], named=True)
    cases[-1].update(expect="accept", fragments=["record written"])
    scheme_case(f"calib-{method}-kind-int8", cal_w(base, kind="int8_absmax"), [f"'{method}'", "int8_absmax"])
    scheme_case(f"calib-{method}-kind-fp8", cal_w(base, kind="fp8", element="e4m3"), [f"'{method}'", "fp8"])
    scheme_case(f"calib-{method}-kind-ggml", {"name": "probe", "weights": {"kind": "ggml", "file_type": "q4_0", "method": method}},
                ["method"])
    scheme_case(f"calib-{method}-on-inputs", spec(NONE, dict(copy.deepcopy(base), granularity="token")), ["input_activations", f"'{method}'"])
    scheme_case(f"calib-{method}-with-static-inputs", spec(copy.deepcopy(base), dict(FP8_STATIC, calibration={"windows": 100000})),
                ["input_activations", f"method {method}"])
    scheme_case(f"calib-{method}-lm-head", cal_w(base), ["--quantize-lm-head"], extra="--quantize-lm-head", named=True)
scheme_case("calib-gptq-static-updated", cal_w(GPTQ_W, {"actorder": "static", "group_params": "updated"}), ["group_params", "static"])
scheme_case("calib-gptq-group-original", cal_w(GPTQ_W, {"actorder": "group", "group_params": "original"}), ["group_params", "group"])
for v in [1, 5, 8, "4", 3.5, 0, -3, None, True]:
    scheme_case(f"calib-gptq-bits={json.dumps(v)}", cal_w(GPTQ_W, bits=v), ["bits"])
scheme_case("calib-awq-bits=3", cal_w(AWQ_W, bits=3), ["bits"])
scheme_case("calib-rtn-bits=3", spec({"kind": "int4_zeropoint", "granularity": "channel", "bits": 3}), ["bits"])
for v in ["GPTQ", "smoothquant", 5, "", None, "rtn "]:
    scheme_case(f"calib-method={json.dumps(v)}", cal_w(GPTQ_W, method=v), ["method"])
scheme_case("calib-gptq-settings-without-method", cal_w(GPTQ_W, method=DELETE), ["gptq", "method"])
scheme_case("calib-awq-settings-with-gptq", cal_w(GPTQ_W, awq={"n_grid": 20}), ["awq", "method"])
scheme_case("calib-gptq-settings-with-rtn", cal_w(GPTQ_W, method="rtn"), ["gptq", "method"])
scheme_case("calib-gptq-dampening-nan-text", '{"name": "probe", "weights": {"kind": "int4_zeropoint", "granularity": "channel", '
            '"method": "gptq", "gptq": {"dampening": NaN}}}', [])
scheme_case("calib-gptq-duplicate-key", '{"name": "probe", "weights": {"kind": "int4_zeropoint", "granularity": "channel", '
            '"method": "gptq", "gptq": {"block_size": 16, "block_size": 0}}}', ["block_size"])
AWQ_BAD = {"duo_scaling": ["true", 1, "none", None, "BOTH", ["both"]], "n_grid": [0, 1, -5, 1001, "20", 2.5, None, 2 ** 63]}
for key, vals in AWQ_BAD.items():
    for v in vals:
        scheme_case(f"calib-awq-{key}={json.dumps(v)}", cal_w(AWQ_W, {key: v}), [f"awq.{key}"])

# The presets and the options.
CAL_EVAL = f"{NEW_EVAL} --schemes full,gptq-w4-g128 --calibration-windows 2"


def cal_case(name, build, fragments, expect="refuse"):
    case(f"calib-{name}", lambda d, b=build: CAL_EVAL + " " + b(d) + " --out " + str(Path(d) / "o.json"), fragments, expect=expect)


case("calib-preset-gptq-valid", lambda d: f"{CAL_EVAL} --out {Path(d) / 'o.json'}", ["record written"], expect="accept")
case("calib-preset-awq-valid", lambda d: f"{NEW_EVAL} --schemes full,awq-w4-g128 --calibration-windows 2 --calibration-seq-len 16 "
     f"--out {Path(d) / 'o.json'}", ["record written"], expect="accept")
cal_case("data-copy-of-eval", lambda d: "--calibration-data " + str(shutil.copy(DATA / CAL_DATA, Path(d) / "c.txt")), ["record written"],
         expect="accept")
cal_case("data-same-as-eval", lambda d: f"--data {CAL_DATA} --calibration-data {DATA / CAL_DATA}", ["record written"], expect="accept")
# Invalid UTF-8 is read as --data reads it (the tokenizer's byte fallback).
cal_case("data-bad-utf8", lambda d: "--calibration-data " + write(d, "c.txt", b"\xff\xfe\xfd" * 2000), ["record written"], expect="accept")
cal_case("seq-len-0-is-seq-len", lambda d: "--calibration-seq-len 0", ["record written"], expect="accept")
for label, build, frags in [
        ("data-missing", lambda d: f"--calibration-data {Path(d) / 'none.txt'}", ["none.txt"]),
        ("data-empty", lambda d: "--calibration-data " + write(d, "c.txt", ""), ["c.txt"]),
        ("data-folder", lambda d: f"--calibration-data {d}", ["--calibration-data"]),
        ("data-dev-zero", lambda d: "--calibration-data /dev/zero", ["/dev/zero"]),
        ("data-dev-null", lambda d: "--calibration-data /dev/null", ["/dev/null"]),
        ("data-is-out", lambda d: f"--calibration-data {Path(d) / 'o.json'} --out-dummy", ["--out"]),
        ("data-nul", lambda d: "--calibration-data " + write(d, "c.txt", b"\0" * 5000), ["c.txt"]),
        ("data-too-short", lambda d: "--calibration-data " + write(d, "c.txt", "Once upon a time there was a cat.\n"), ["c.txt"]),
        ("data-tokens-beyond-vocab", lambda d: "--calibration-data " + write(d, "c.bin", struct.pack("<400H", *[600 + i for i in range(400)])),
         ["c.bin"]),
        ("data-tokens-odd-bytes", lambda d: "--calibration-data " + write(d, "c.bin", b"\1\0" * 200 + b"\1"), ["c.bin"]),
        ("data-tokens-too-few", lambda d: "--calibration-data " + write(d, "c.bin", struct.pack("<40H", *[i % 50 + 1 for i in range(40)])),
         ["c.bin"]),
        ("data-option-like", lambda d: "--calibration-data --help", ["--calibration-data"]),
        ("data-empty-string", lambda d: "--calibration-data ''", ["--calibration-data"]),
        ("data-jsonl-no-text", lambda d: "--calibration-data " + write(d, "c.jsonl", '{"foo": 1}\n' * 50), ["c.jsonl"]),
        ("seq-len-1", lambda d: "--calibration-seq-len 1", ["--calibration-seq-len"]),
        ("seq-len-neg", lambda d: "--calibration-seq-len -1", ["--calibration-seq-len"]),
        ("seq-len-x", lambda d: "--calibration-seq-len x", ["--calibration-seq-len"]),
        ("seq-len-float", lambda d: "--calibration-seq-len 1e3", ["--calibration-seq-len"]),
        ("seq-len-range", lambda d: "--calibration-seq-len 1048577", ["--calibration-seq-len"]),
        ("seq-len-huge", lambda d: "--calibration-seq-len 1048576", ["1048576"]),
        ("seq-len-beyond-data", lambda d: "--calibration-data " + write(d, "c.bin", struct.pack("<400H", *[i % 50 + 1 for i in range(400)])) +
         " --calibration-seq-len 300", ["c.bin"]),
        ("windows-neg", lambda d: "--calibration-windows -1", ["--calibration-windows"]),
        ("windows-x", lambda d: "--calibration-windows x", ["--calibration-windows"]),
        ("windows-range", lambda d: "--calibration-windows 2097152", ["--calibration-windows"]),
        ("windows-beyond-data", lambda d: "--calibration-windows 100000", ["100000"]),
]:
    if label == "data-is-out":
        case("calib-data-is-out", lambda d: f"{CAL_EVAL} --calibration-data {write(d, 'o.json', '{}')} --out {Path(d) / 'o.json'}",
             ["--out", "--calibration-data"])
        continue
    cal_case(label, build, frags)
for opt in ["--calibration-data CAL", "--calibration-seq-len 16", "--calibration-windows 2"]:
    case(f"calib-no-calibrated-scheme-{opt.split()[0][2:]}", lambda d, o=opt: f"{NEW_EVAL} --schemes full,int8-coarse "
         f"{o.replace('CAL', str(DATA / CAL_DATA))} --out {Path(d) / 'o.json'}", [opt.split()[0]])
case("calib-protocol-stride-without-data", lambda d: f"eval -q --tokenizer {TOKENIZER} --protocol stride --seq-len 32 --stride 16 --max-windows 2 "
     f"--no-attention-stats --schemes full,gptq-w4-g128 --calibration-windows 2 --out {Path(d) / 'o.json'}", ["--calibration-data"])
case("calib-learned-positions", lambda d: "eval -q --model " + family(d, "tiny-opt-hf") + " --data " + write(d, "t.bin", KV_TOK) +
     " --seq-len 8 --max-windows 2 --schemes full,gptq-w4 --calibration-windows 2 --calibration-seq-len 100000 --out " +
     str(Path(d) / "o.json"), ["--calibration-seq-len", "100000"])
case("calib-sensitivity-windows-beyond", lambda d: f"sensitivity -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 2 --scheme " +
     write(d, "s.json", json.dumps(cal_w(GPTQ_W, {"calibration": {"windows": 100000}}))), ["s.json", "GPTQ"])
for preset, who in [("gptq-w4-g128", "GPTQ"), ("awq-w4-g128", "AWQ")]:
    case(f"calib-sensitivity-{preset}", lambda d, p=preset: f"sensitivity -q --tokenizer {TOKENIZER} --seq-len 32 --max-windows 2 "
         f"--scheme {p}", [preset, who])

# ---- llama.cpp importance matrices (issue 77): the GGUF and legacy .dat readers and their use by kind ggml -----------
# Group imatrix: files for stories260K (5 layers; 64 columns, 172 for ffn_down) written here as llama-imatrix writes them
# (loaders/checkpoints/imatrix_file.h), then truncated, mis-counted, non-finite, mis-sized or foreign, given to
# eval --imatrix with gguf-q4_0 or named in a ggml spec; and qeval imatrix's own options.
IM_NAMES = {f"blk.{i}.{t}.weight": (172 if t == "ffn_down" else 64) for i in range(5)
            for t in ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]}


def im_entries(**over):
    """name → (sums, counts): 128 tokens per tensor, positive sums; over: name → (sums, counts) or DELETE."""
    e = {n: ([1.0 + (i % 7) * 0.25 for i in range(c)], [128.0]) for n, c in IM_NAMES.items()}
    for k, v in over.items():
        k = k.replace("__", ".")
        if v is DELETE:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def im_gguf(entries=None, kv=None, tensors=None, count_delta=0, sum_type=0):
    """A GGUF imatrix: kv (key → (type, value) or None to drop) over general.type / imatrix.*; tensors: extra
    (name, ne, type, data) appended after the entries' in_sum2 / counts pairs."""
    entries = im_entries() if entries is None else entries
    keys = {"general.type": (8, "imatrix"), "imatrix.datasets": (9, ["validation-head.txt"]), "imatrix.chunk_count": (4, 4),
            "imatrix.chunk_size": (4, 32)}
    for k, v in (kv or {}).items():
        if v is None:
            keys.pop(k, None)
        else:
            keys[k] = v
    kvs = b""
    for k, (t, v) in keys.items():
        if t == 9:
            kvs += gguf_str(k) + struct.pack("<IIQ", 9, 8, len(v)) + b"".join(gguf_str(s) for s in v)
        else:
            kvs += gguf_kv(k, t, v)
    all_t = []
    for name in sorted(entries):
        sums, counts = entries[name]
        m = len(counts)
        all_t.append((name + ".in_sum2", [len(sums) // max(m, 1)] + ([m] if m > 1 else []), sum_type,
                      struct.pack(f"<{len(sums)}f", *sums) if sum_type == 0 else struct.pack(f"<{len(sums)}e", *sums)))
        all_t.append((name + ".counts", [1] + ([m] if m > 1 else []) if m else [0], 0, struct.pack(f"<{m}f", *counts)))
    all_t += tensors or []
    infos, data = b"", b""
    for name, ne, t, blob in all_t:
        infos += gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", t, len(data))
        data += blob + bytes((-len(blob)) % 32)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(all_t) + count_delta, len(keys)) + kvs + infos
    return head + bytes((-len(head)) % 32) + data


def im_dat(entries=None, n=None, tail=None, raw_entries=None):
    """A legacy .dat: i32 count; per entry i32 name length, name, i32 ncall, i32 nval, nval f32; then chunk count and dataset.
    raw_entries: bytes replacing the entries; values are sums / counts · ncall with ncall 4."""
    entries = im_entries() if entries is None else entries
    body = b""
    for name, (sums, counts) in sorted(entries.items()):
        b = name.encode()
        body += struct.pack("<i", len(b)) + b + struct.pack("<ii", 4, len(sums)) + struct.pack(f"<{len(sums)}f", *[s / 128 * 4 for s in sums])
    if raw_entries is not None:
        body = raw_entries
    out = struct.pack("<i", len(entries) if n is None else n) + body
    return out + (struct.pack("<ii", 4, 19) + b"validation-head.txt" if tail is None else tail)


def im_eval(d, data, name="m.gguf", schemes="full,gguf-q4_0"):
    p = data if isinstance(data, str) else write(d, name, data)
    return f"{NEW_EVAL} --schemes {schemes} --imatrix {p} --out {Path(d) / 'o.json'}"


def im_case(label, data, frags, name="m.gguf", expect="refuse"):
    case(f"imatrix-{label}", lambda d, b=data, n=name: im_eval(d, b(d) if callable(b) else b, n),
         [name] + list(frags) if expect == "refuse" else frags, expect=expect)


Q0 = "blk.0.attn_q.weight"
im_case("gguf-valid", im_gguf(), ["record written"], expect="accept")
im_case("dat-valid", im_dat(), ["record written"], name="m.dat", expect="accept")
im_case("gguf-extra-entry", im_gguf(im_entries(blk__9__attn_q__weight=([1.0] * 64, [128.0]))), ["record written"], expect="accept")
im_case("gguf-token-embd-other-size", im_gguf(im_entries(token_embd__weight=([1.0] * 7, [128.0]))), ["record written"], expect="accept")
im_case("gguf-entries-missing-some", im_gguf(im_entries(**{f"blk__{i}__ffn_down__weight": DELETE for i in range(5)})),
        ["record written"], expect="accept")
im_case("gguf-count-zero", im_gguf(im_entries(**{Q0.replace(".", "__"): ([1.0] * 64, [0.0])})), ["record written"], expect="accept")
im_case("dat-trailing-partial", im_dat(tail=b"\4\0"), ["record written"], name="m.dat", expect="accept")
GOOD_G, GOOD_D = im_gguf(), im_dat()
for cut in [1, 4, 16, 40, 100, len(GOOD_G) // 2, len(GOOD_G) - 40]:
    im_case(f"gguf-truncated-{cut}", GOOD_G[:cut], [])
for cut in [2, 7, 30, len(GOOD_D) // 2, len(GOOD_D) - 40]:
    im_case(f"dat-truncated-{cut}", GOOD_D[:cut], [], name="m.dat")
im_case("empty", b"", [])
im_case("empty-dat", b"", [], name="m.dat")
im_case("folder", lambda d: str(Path(d, "m.gguf").mkdir() or Path(d, "m.gguf")), [])
im_case("missing", lambda d: str(Path(d) / "m.gguf"), [])
case("imatrix-dev-zero", lambda d: im_eval(d, "/dev/zero"), ["/dev/zero"])
case("imatrix-dev-null", lambda d: im_eval(d, "/dev/null"), ["/dev/null"])
im_case("text", b"hello world, this is not an importance matrix\n" * 10, [], name="m.dat")
im_case("json", json.dumps({"blk.0.attn_q.weight": [1.0] * 64}).encode(), [], name="m.json")
case("imatrix-a-model", lambda d: im_eval(d, str(DATA / "models/stories260K/stories260K-tok512-f32.gguf")), ["stories260K-tok512-f32.gguf", "imatrix"])
case("imatrix-a-model-llama2c", lambda d: im_eval(d, str(DATA / "models/stories260K/stories260K.bin")), ["stories260K.bin"])
# Counts and sums.
E = lambda **o: im_entries(**{k.replace(".", "__"): v for k, v in o.items()})
for label, sums, counts in [("counts-3", [1.0] * 64, [128.0] * 3), ("counts-none", [1.0] * 64, []), ("counts-nan", [1.0] * 64, [float("nan")]),
                            ("counts-inf", [1.0] * 64, [float("inf")]), ("counts-neg", [1.0] * 64, [-128.0]),
                            ("counts-huge", [1.0] * 64, [1e30]), ("sums-nan", [1.0] * 63 + [float("nan")], [128.0]),
                            ("sums-inf", [float("inf")] + [1.0] * 63, [128.0]), ("sums-neg", [-1.0] * 64, [128.0]),
                            ("sums-one-neg", [1.0] * 10 + [-0.5] + [1.0] * 53, [128.0]),
                            ("row-32", [1.0] * 32, [128.0]), ("row-65", [1.0] * 65, [128.0]), ("row-128-two-matrices", [1.0] * 128, [128.0, 128.0]),
                            ("row-172", [1.0] * 172, [128.0])]:
    im_case(f"gguf-{label}", im_gguf(E(**{Q0: (sums, counts)})), [Q0])
im_case("gguf-ffn-down-64", im_gguf(E(**{"blk.2.ffn_down.weight": ([1.0] * 64, [128.0])})), ["blk.2.ffn_down.weight", "172"])
im_case("gguf-all-foreign", im_gguf({f"model.layers.{i}.self_attn.q_proj.weight": ([1.0] * 64, [128.0]) for i in range(5)}), ["q_proj"])
im_case("gguf-no-tensors", im_gguf({}), [])
im_case("gguf-in_sum2-without-counts", im_gguf(tensors=[("blk.9.attn_q.weight.in_sum2", [64], 0, bytes(256))]), ["blk.9.attn_q.weight"])
im_case("gguf-counts-without-in_sum2", im_gguf(tensors=[("blk.9.attn_q.weight.counts", [1], 0, struct.pack("<f", 1.0))]),
        ["blk.9.attn_q.weight"])
im_case("gguf-in_sum2-f16", im_gguf(sum_type=1), ["in_sum2", "F32"])
im_case("gguf-duplicate-tensor", im_gguf(tensors=[(Q0 + ".in_sum2", [64], 0, bytes(256))]), [Q0])
im_case("gguf-count-claims-more", im_gguf(count_delta=1), [])
im_case("gguf-count-claims-fewer", im_gguf(count_delta=-1), [])
for key in ["imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"]:
    im_case(f"gguf-no-{key.split('.')[1]}", im_gguf(kv={key: None}), [key])
im_case("gguf-chunk_count-string", im_gguf(kv={"imatrix.chunk_count": (8, "4")}), ["imatrix.chunk_count"])
im_case("gguf-chunk_size-f32", im_gguf(kv={"imatrix.chunk_size": (6, 32.0)}), ["imatrix.chunk_size"])
im_case("gguf-chunk_size-i32", im_gguf(kv={"imatrix.chunk_size": (5, -32)}), ["imatrix.chunk_size"])
im_case("gguf-version-9", im_gguf()[:4] + struct.pack("<I", 9) + im_gguf()[8:], [])
# Legacy.
for label, data in {"n-0": im_dat(n=0), "n-neg": im_dat(n=-1), "n-huge": im_dat(n=2 ** 31 - 1), "n-more": im_dat(n=36),
                    "name-len-neg": im_dat(raw_entries=struct.pack("<i", -1) + b"x" * 300),
                    "name-len-huge": im_dat(raw_entries=struct.pack("<i", 2 ** 30) + b"x" * 300),
                    "nval-0": im_dat(raw_entries=struct.pack("<i", 19) + Q0.encode() + struct.pack("<ii", 4, 0)),
                    "nval-neg": im_dat(raw_entries=struct.pack("<i", 19) + Q0.encode() + struct.pack("<ii", 4, -64) + bytes(256)),
                    "nval-huge": im_dat(raw_entries=struct.pack("<i", 19) + Q0.encode() + struct.pack("<ii", 4, 2 ** 30) + bytes(256)),
                    "duplicate": im_dat(n=36, raw_entries=None, tail=struct.pack("<i", 19) + Q0.encode() + struct.pack("<ii", 4, 64) +
                                        bytes(256))}.items():
    im_case(f"dat-{label}", data, [], name="m.dat")
for label, sums in [("nan", [float("nan")] + [1.0] * 63), ("inf", [1.0] * 63 + [float("-inf")]), ("neg", [-1.0] * 64),
                    ("row-32", [1.0] * 32), ("row-172", [1.0] * 172)]:
    im_case(f"dat-{label}", im_dat(E(**{Q0: (sums, [128.0])})), [Q0], name="m.dat")
im_case("dat-all-foreign", im_dat({f"model.layers.{i}.mlp.down_proj.weight": ([1.0] * 172, [128.0]) for i in range(5)}), ["down_proj"],
        name="m.dat")
# In a spec ("imatrix": path relative to the spec file) and the option's other mistakes.
GG_IM = {"kind": "ggml", "file_type": "q4_0"}


def im_spec(d, data):
    write(d, "m.gguf", data)
    return f"{NEW_EVAL} --schemes full," + write(d, "s.json", json.dumps(spec(dict(GG_IM, imatrix="m.gguf")))) + f" --out {Path(d) / 'o.json'}"


case("imatrix-spec-relative-valid", lambda d: im_spec(d, GOOD_G), ["record written"], expect="accept")
for label, v, frags in [("number", 5, ["imatrix"]), ("empty", "", ["imatrix"]), ("null", None, ["imatrix"]), ("list", ["m.gguf"], ["imatrix"]),
                        ("missing", "none.gguf", ["none.gguf"]), ("folder", ".", ["imatrix"])]:
    # The file named in the spec is named in the message, with the scheme's name (the spec file is the scheme).
    scheme_case(f"imatrix-spec-{label}", spec(dict(GG_IM, imatrix=v)), frags, named=label in ("missing", "folder"))
scheme_case("imatrix-spec-on-int8", spec({"kind": "int8_absmax", "granularity": "channel", "imatrix": "m.gguf"}), ["imatrix"])
case("imatrix-spec-bad-file", lambda d: im_spec(d, GOOD_G[:100]), ["m.gguf"])
case("imatrix-no-ggml-scheme", lambda d: f"{NEW_EVAL} --schemes full,int8-coarse --imatrix {write(d, 'm.gguf', GOOD_G)} --out {Path(d) / 'o.json'}",
     ["--imatrix"])
case("imatrix-is-out", lambda d: f"{NEW_EVAL} --schemes full,gguf-q4_0 --imatrix {write(d, 'o.json', GOOD_G)} --out {Path(d) / 'o.json'}",
     ["--out", "--imatrix"])
# qeval imatrix (collection).
IMC = f"imatrix -q --tokenizer {TOKENIZER}"
for label, copts, frags in [("chunks-0", "--seq-len 32 --chunks 0", ["--chunks"]), ("chunks-neg", "--seq-len 32 --chunks -1", ["--chunks"]),
                           ("chunks-x", "--seq-len 32 --chunks x", ["--chunks"]), ("seq-len-8", "--seq-len 8 --chunks 2", ["16"]),
                           ("format-xml", "--seq-len 32 --chunks 2 --output-format xml", ["--output-format"]),
                           ("protocol-windows", "--seq-len 32 --chunks 2 --protocol windows", ["--protocol"]),
                           ("data-short", "--seq-len 32 --data SHORT", ["c.txt"]), ("data-missing", "--seq-len 32 --data NONE", ["none.txt"]),
                           ("out-folder", "--seq-len 32 --chunks 2 --out-dir", ["--out"]), ("out-is-data", "--seq-len 32 --chunks 2 --out-data",
                                                                                             ["--out"]),
                           ("out-no-parent", "--seq-len 32 --chunks 2 --out-deep", ["--out"])]:
    def build(d, copts=copts):
        out = f"--out {Path(d) / 'm.gguf'}"
        if "--out-dir" in copts:
            copts, out = copts.replace("--out-dir", ""), f"--out {d}"
        if "--out-data" in copts:
            copts, out = copts.replace("--out-data", ""), f"--data {write(d, 'c.txt', 'Once upon a time. ' * 200)} --out {Path(d) / 'c.txt'}"
        if "--out-deep" in copts:
            copts, out = copts.replace("--out-deep", ""), f"--out {Path(d) / 'a' / 'b' / 'm.gguf'}"
        copts = copts.replace("SHORT", write(d, "c.txt", "Once upon a time there was a cat.\n")).replace("NONE", str(Path(d) / "none.txt"))
        return f"{IMC} {copts} {out}"
    case(f"imatrix-collect-{label}", build, frags)

# ---- HellaSwag task files and options (issue 80 item 5: qeval hellaswag) ------------------------------------------------
# Group tasks: llama.cpp's 6-line task files broken every way the reader checks, compressed copies damaged, the options
# out of range, and the record over its own task file; every refusal names the file (and line) or the option.
HS = f"hellaswag -q --tokenizer {TOKENIZER} --model models/stories260K/stories260K.bin"
HS_OK = "Once upon a time, a cat sat on the mat.\n2\nIt ran.\nIt slept.\nIt purred and slept.\nIt sang.\n"
HS_FILES = {
    "five-lines": ("Ctx.\n0\na\nb\nc\n", ["t.txt", "not a multiple of 6"]),
    "seven-lines": (HS_OK + "x\n", ["t.txt", "not a multiple of 6"]),
    "five-endings": ("Ctx.\n0\na\nb\nc\nd\ne\n" + HS_OK[:-1] + "\nq\nr\nz\ny\nw\n", ["t.txt", "line"]),
    "gold-4": ("Ctx.\n4\na\nb\nc\nd\n", ["t.txt", "line 2", "0, 1, 2 or 3", "4"]),
    "gold-neg": ("Ctx.\n-1\na\nb\nc\nd\n", ["t.txt", "line 2", "-1"]),
    "gold-word": ("Ctx.\ntwo\na\nb\nc\nd\n", ["t.txt", "line 2", "two"]),
    "gold-space": ("Ctx.\n 2\na\nb\nc\nd\n", ["t.txt", "line 2"]),
    "gold-cr": ("Ctx.\n2\r\na\nb\nc\nd\n", ["t.txt", "line 2"]),
    "gold-empty": ("Ctx.\n\na\nb\nc\nd\n", ["t.txt", "line 2"]),
    "context-empty": ("\n1\na\nb\nc\nd\n", ["t.txt", "line 1"]),
    "ending-empty": ("Ctx.\n1\na\n\nc\nd\n", ["t.txt", "line 4", "empty"]),
    "empty-file": ("", ["t.txt"]),
    "nul-bytes": ("\0" * 60, ["t.txt"]),
}
for label, (text, frags) in HS_FILES.items():
    case(f"tasks-file-{label}", lambda d, text=text: f"{HS} --tasks {write(d, 't.txt', text)} --out {Path(d) / 'o.json'}", frags)
for label, (data, frags) in {"bz2-garbage": (b"BZh9" + b"\x17" * 40, ["t.txt.bz2", "bzip2"]),
                             "bz2-truncated": (bz2.compress(HS_OK.encode() * 40)[:-20], ["t.txt.bz2", "truncated bzip2"]),
                             "gz-garbage": (b"\x1f\x8b\x08\0garbage", ["t.txt.gz", "gzip"]),
                             "bz2-not-bz2": (HS_OK.encode(), ["t.txt.bz2", "bzip2"])}.items():
    ext = "txt.gz" if label.startswith("gz") else "txt.bz2"
    case(f"tasks-file-{label}", lambda d, data=data, ext=ext: f"{HS} --tasks {write(d, 't.' + ext, data)} --out {Path(d) / 'o.json'}",
         frags)
case("tasks-file-missing", lambda d: f"{HS} --tasks {Path(d) / 'none.txt'} --out {Path(d) / 'o.json'}", ["none.txt"])
case("tasks-file-directory", lambda d: f"{HS} --tasks {d} --out {Path(d) / 'o.json'}", ["HellaSwag tasks", "is a folder"])
case("tasks-file-dev-zero", lambda d: f"{HS} --tasks /dev/zero --out {Path(d) / 'o.json'}", ["/dev/zero"])
for value, frags in [("0", ["--max-tasks", "0", ">= 1"]), ("-3", ["--max-tasks", "-3"]), ("x", ["--max-tasks"]),
                     ("1.5", ["--max-tasks"]), ("99999999999999999999", ["--max-tasks"])]:
    case(f"tasks-max-tasks={value}", lambda d, value=value: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --max-tasks {value} "
         f"--out {Path(d) / 'o.json'}", frags)
for value in ["random", "", "FIRST", "llama.cpp"]:
    case(f"tasks-task-order={value!r}", lambda d, value=value: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --task-order '{value}' "
         f"--out {Path(d) / 'o.json'}", ["--task-order"])
case("tasks-out-is-tasks", lambda d: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --out {Path(d) / 't.txt'}", ["--out", "t.txt"])
case("tasks-out-empty", lambda d: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --out ''", ["--out"])
case("tasks-calibration-without-scheme", lambda d: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --calibration-windows 4 "
     f"--out {Path(d) / 'o.json'}", ["--calibration-windows"])
# A control: one well-formed task is scored and recorded.
case("tasks-control-one-task", lambda d: f"{HS} --tasks {write(d, 't.txt', HS_OK)} --schemes full,int8-coarse --out {Path(d) / 'o.json'}",
     [], expect="accept")

# ---- run and classify ----------------------------------------------------------------------------------
INTERNALS = ["[json.exception", "std::", "stoll", "basic_string", "179769313486231570", "terminate called", "what():",
             "Traceback (most recent call last)"]


def classify(c, proc, timed_out):
    out = (proc.stdout or "") + (proc.stderr or "") if proc else ""
    if timed_out:
        return "hang", out
    rc = proc.returncode
    if rc < 0 or rc >= 128 or "Sanitizer" in out or "runtime error:" in out or "Segmentation" in out or \
            (c.get("python") and rc == 70):  # python_case.py: an exception escaped the package
        return "crash", out
    if c["expect"] == "accept":
        return ("accepted" if rc == 0 and all(f in out for f in c["fragments"]) else
                "silent wrong" if rc == 0 else "unclear message"), out
    if c["expect"] == "note":
        return ("accepted with note" if rc == 0 and all(f in out for f in c["fragments"]) else
                "silent wrong" if rc == 0 else "unclear message"), out
    if rc == 0:
        return "silent wrong", out
    lines = [l for l in (proc.stderr or "").splitlines() if l.strip()]
    error_lines = [l for l in lines if l.startswith("qeval: error: ")]
    if rc != c["status"] or len(error_lines) != 1 or any(i in out for i in INTERNALS) or \
            not all(f in out for f in c["fragments"]):
        return "unclear message", out
    return "clean refusal", out


def run_case(c):
    d = tempfile.mkdtemp(prefix="qeval-probe-")
    try:
        cmd = c["build"](d)
        if isinstance(cmd, dict):  # a Python snippet, run by python_case.py
            Path(d, "case.py").write_text(cmd["python"])
            c["python"] = True
            cmd, line = "python: " + cmd["python"].splitlines()[-1], \
                f"{shlex.quote(sys.executable)} {shlex.quote(str(PY_DRIVER))} {shlex.quote(QEVAL)} {shlex.quote(d)}/case.py"
        else:
            line = f"{QEVAL} {cmd}"
        t0 = time.time()
        # A session of its own, so that a hang is ended with everything it started (python_case.py's qeval).
        with subprocess.Popen(line, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="replace", cwd=d, start_new_session=True) as p:
            try:
                stdout, stderr = p.communicate(timeout=TIMEOUT)
                outcome, out = classify(c, subprocess.CompletedProcess(line, p.returncode, stdout, stderr), False)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.communicate()
                outcome, out = classify(c, None, True)
        return {"name": c["name"], "outcome": outcome, "seconds": time.time() - t0, "command": cmd.replace(d, "$DIR"),
                "output": [l.replace(d, "$DIR") for l in out.strip().splitlines()[-3:]] if out else []}
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --groups=a,b: only the cases of those groups (a name's first word), e.g. the newer surfaces of issue 51.
if "--groups" in opts:
    wanted = set(opts["--groups"].split(","))
    cases = [c for c in cases if c["name"].split("-")[0].split("=")[0].split("--")[0] in wanted]
results = []
with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
    for r in pool.map(run_case, cases):
        results.append(r)
shutil.rmtree(MADE, ignore_errors=True)

order = ["clean refusal", "accepted with note", "accepted", "crash", "hang", "silent wrong", "unclear message"]
counts = {k: sum(1 for r in results if r["outcome"] == k) for k in order}
groups = {}
for r in results:
    g = r["name"].split("-")[0].split("=")[0].split("--")[0]
    groups.setdefault(g, {k: 0 for k in order})[r["outcome"]] += 1
lines = [f"qeval bad-input probe: {len(results)} cases (`tests/hardening/probe.py`)", "",
         "| group | cases | " + " | ".join(order) + " |", "|---|---:|" + "---:|" * len(order)]
for g, c in sorted(groups.items()):
    lines.append(f"| {g} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in order) + " |")
lines.append(f"| **all** | **{len(results)}** | " + " | ".join(f"**{counts[k]}**" for k in order) + " |")
bad = [r for r in results if r["outcome"] not in ("clean refusal", "accepted with note", "accepted")]
if bad:
    lines += ["", "Cases that are not clean:", ""]
    for r in bad:
        lines.append(f"- {r['outcome']}: `{r['name']}`: `qeval {r['command'][:200]}` → {' / '.join(r['output'])[:400]}")
slowest = sorted(results, key=lambda r: -r["seconds"])[:3]
lines += ["", "Slowest: " + ", ".join(f"{r['name']} {r['seconds']:.1f} s" for r in slowest)]
text = "\n".join(lines) + "\n"
if OUT:
    Path(OUT).write_text(text)
if "--messages" in opts:
    Path(opts["--messages"]).write_text("".join(
        f"{r['outcome']:<18} {r['name']}: {r['output'][-1] if r['output'] else ''}\n" for r in results))
print(text)
sys.exit(1 if bad else 0)
