#!/usr/bin/env python3
"""Writes tests/quant/fixtures/awq_reference.json: AWQ's scale search as llm-compressor 0.14.0 runs it
(AWQModifier + QuantizationModifier W4A16_ASYM, compressed-tensors 0.19.0, the sequential
pipeline's calls for one subgraph) on one
small random Llama-style block, for tests/quant/awq_search_test.cpp.

The block (float32, no embedding, one layer; K = 256, 4 heads of 64, d_ff = 512):
    h  = input_layernorm(x)                      RMSNorm, eps 1e-5
    x  = x + self_attn(h)                        q/k/v/o, causal softmax attention, no RoPE
    h2 = post_attention_layernorm(x)
    x  = x + mlp(h2)                             down(silu(gate(h2)) * up(h2))
and llm-compressor's Llama mappings, in its order:
    input_layernorm          -> q_proj, k_proj, v_proj   (parent self_attn)
    v_proj                   -> o_proj                    (parent o_proj)
    post_attention_layernorm -> gate_proj, up_proj        (parent mlp)
    up_proj                  -> down_proj                 (parent down_proj)

Every input and weight is made from integers with a formula C++ repeats to the bit (`gen` below:
splitmix64 of seed·2^32 + index, four uniforms summed, in float64, then float32), so the fixture stores
none of them; it stores a few generated values and sums to prove the C++ generator agrees.

What it stores, per mapping: the grid (ratio, duo scaling), the loss at each grid point, the chosen
index, x_mean (the activation statistic) and the chosen scales; after the search and the fold, for
every linear the final compressed-tensors weight_scale and weight_zero_point (all groups) and the
codes of every 4th row (packed two 4-bit codes per byte, low nibble = even column), with the two norms'
folded weights; and AutoAWQ 0.2.9's own search on the same block (its grid losses, choice and scales)
and, after its fold, its clipping thresholds for every linear but q/k ([N, G] per linear).

Needs the oracle venv and AutoAWQ 0.2.9's sdist unpacked (AUTOAWQ_SRC, default /tmp/aawq77a/autoawq-0.2.9):
    mkdir -p /tmp/aawq77a && tar xzf autoawq-0.2.9.tar.gz -C /tmp/aawq77a
    /work/cache/oracle-venv/bin/python tests/oracle/make_awq_fixtures.py [--basic-pipeline | --autoawq-cpu-alias | --clip-sensitivity]
"""
import base64
import json
import math
import os
import sys

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "quant", "fixtures", "awq_reference.json")

K, HEADS, DFF = 256, 4, 512
BATCHES, B, T = 3, 2, 32
EPS = 1e-5
ROW_STRIDE = 4  # codes of rows 0, 4, 8, ... are stored

M64 = (1 << 64) - 1


def gen(seed, shape, scale=1.0):
    """float32 tensor of `shape`: (u1 + u2 + u3 + u4 − 2) · √3 · scale, u from splitmix64(seed·2^32 + 4i + j)."""
    n = int(np.prod(shape))
    idx = np.arange(4 * n, dtype=np.uint64)
    z = (np.uint64(seed) << np.uint64(32)) + idx
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -53)
    u = u.reshape(n, 4)
    s = ((u[:, 0] + u[:, 1]) + u[:, 2]) + u[:, 3]
    v = (s - 2.0) * (math.sqrt(3.0) * scale)
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def outlier_gain(n, channels, gain):
    g = torch.ones(n)
    g[channels] = gain
    return g


# Outlier channels of the residual stream and of the MLP's hidden units (fixed, not random).
X_OUTLIERS = [3, 40, 77, 128, 200, 251]
FF_OUTLIERS = [5, 66, 130, 301, 444]


def make_block():
    w = {}
    w["input_layernorm"] = (1.0 + 0.1 * gen(11, (K,))).float()
    w["post_attention_layernorm"] = (1.0 + 0.1 * gen(12, (K,))).float()
    w["q_proj"] = gen(21, (K, K), 1 / 16)
    w["k_proj"] = gen(22, (K, K), 1 / 16)
    w["v_proj"] = gen(23, (K, K), 1 / 16)
    w["o_proj"] = gen(24, (K, K), 1 / 16)
    w["gate_proj"] = gen(25, (DFF, K), 1 / 16)
    # a few hidden units with large up rows: outliers in down_proj's input
    w["up_proj"] = gen(26, (DFF, K), 1 / 16) * outlier_gain(DFF, FF_OUTLIERS, 6.0).view(-1, 1)
    w["down_proj"] = gen(27, (K, DFF), 1 / 22)
    return w


def make_inputs():
    gain = outlier_gain(K, X_OUTLIERS, 12.0)
    return [gen(100 + b, (B, T, K)) * gain for b in range(BATCHES)]


class RMSNorm(torch.nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = torch.nn.Parameter(weight.clone())

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def linear(weight):
    m = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    m.weight.data.copy_(weight)
    return m


class Attention(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, n, linear(w[n]))

    def forward(self, h):
        b, t, _ = h.shape
        d = K // HEADS
        q, k, v = (p(h).view(b, t, HEADS, d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        a = torch.softmax(s, dim=-1) @ v
        return self.o_proj(a.transpose(1, 2).reshape(b, t, K))


class Mlp(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        for n in ("gate_proj", "up_proj", "down_proj"):
            setattr(self, n, linear(w[n]))

    def forward(self, h):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(h)) * self.up_proj(h))


class Block(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.input_layernorm = RMSNorm(w["input_layernorm"])
        self.self_attn = Attention(w)
        self.post_attention_layernorm = RMSNorm(w["post_attention_layernorm"])
        self.mlp = Mlp(w)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(w)])


class Model(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.model = Inner(w)

    def forward(self, x):
        for layer in self.model.layers:
            x = layer(x)
        return x


def b64(t, dtype):
    return base64.b64encode(t.detach().contiguous().numpy().astype(dtype).tobytes()).decode()


def pack_rows(codes):
    """[N, K] unsigned 4-bit codes → rows 0, ROW_STRIDE, … packed two per byte, low nibble = even k."""
    c = codes[::ROW_STRIDE].to(torch.uint8)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).contiguous()


def autoawq_search(w, inputs, copy_state=True):
    """AutoAWQ 0.2.9's own _search_best_scale on the same block (the sdist unpacked at AUTOAWQ_SRC,
    default /tmp/aawq77a/autoawq-0.2.9): per mapping its grid losses and chosen scales. AutoAWQ runs
    every calibration sample as one batch; its clipping search (a separate step) is not run."""
    src = os.environ.get("AUTOAWQ_SRC", "/tmp/aawq77a/autoawq-0.2.9")
    sys.path.insert(0, src)
    from awq.quantize.quantizer import AwqQuantizer
    from awq.utils.module import get_op_name

    model = Model(w).float().eval()
    block = model.model.layers[0]
    captured = {}

    def hook(name):
        def fn(_m, args, _out):
            captured.setdefault(name, []).append(args[0].detach())
        return fn

    handles = [getattr(block.self_attn, "q_proj").register_forward_hook(hook("h")),
               block.self_attn.o_proj.register_forward_hook(hook("attn")),
               block.mlp.gate_proj.register_forward_hook(hook("h2")),
               block.mlp.down_proj.register_forward_hook(hook("hidden"))]
    with torch.no_grad():
        for x in inputs:
            model(x)
    for h in handles:
        h.remove()
    inp = {k: torch.cat(v, 0) for k, v in captured.items()}

    q = AwqQuantizer.__new__(AwqQuantizer)
    q.w_bit, q.group_size, q.zero_point, q.duo_scaling = 4, 128, True, True
    q.max_chunk_memory, q.n_parallel_calib_samples = 1024 * 1024 * 1024, None
    losses = []
    orig_loss = AwqQuantizer._compute_loss

    def compute_loss(self, fp16_output, int_w_output, device):
        loss = orig_loss(self, fp16_output, int_w_output, device)
        losses.append(loss)
        return loss

    AwqQuantizer._compute_loss = compute_loss
    # AutoAWQ keeps the parent's weights as {k: v.cpu()} of its state_dict to restore them after each
    # grid point. On a GPU that is a copy; on the CPU it is the parameters themselves, which the next
    # fc.weight.mul_ scales in place, so every later point starts from weights the earlier points'
    # scales multiplied (compounding). The copy is made here, as AutoAWQ gets it on a GPU.
    orig_best = AwqQuantizer._compute_best_scale

    def best_scale(self, x, w_mean, x_mean, module2inspect, *args, **kwargs):
        sd = module2inspect.state_dict
        module2inspect.state_dict = lambda *a, **k: {n: t.clone() for n, t in sd(*a, **k).items()}
        try:
            return orig_best(self, x, w_mean, x_mean, module2inspect, *args, **kwargs)
        finally:
            del module2inspect.state_dict

    if copy_state:
        AwqQuantizer._compute_best_scale = best_scale
    a, m = block.self_attn, block.mlp
    searches = [
        (block.input_layernorm, [a.q_proj, a.k_proj, a.v_proj], inp["h"], a),
        (a.v_proj, [a.o_proj], inp["attn"], None),
        (block.post_attention_layernorm, [m.gate_proj, m.up_proj], inp["h2"], m),
        (m.up_proj, [m.down_proj], inp["hidden"], None),
    ]
    out = []
    for prev, layers, x, parent in searches:
        losses.clear()
        _, _, scales = q._search_best_scale(block, prev, layers, x, module2inspect=parent, kwargs={})
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        out.append({"smooth": get_op_name(model, prev).split(".")[-1], "ratios": [i / 20 for i in range(20)], "losses": list(losses), "best_index": best,
                    "scales": b64(scales.float(), np.float32)})
    AwqQuantizer._compute_loss = orig_loss
    AwqQuantizer._compute_best_scale = orig_best

    # Then, as AutoAWQ's _apply_quant does for a layer: fold every mapping's scales (dividing the
    # balance layers' cached inputs too), search each clippable linear's thresholds and clamp.
    from awq.quantize.scale import apply_clip, apply_scale
    from awq.utils.module import get_named_linears

    named = get_named_linears(block)
    source = {"self_attn.q_proj": "h", "self_attn.k_proj": "h", "self_attn.v_proj": "h", "self_attn.o_proj": "attn",
              "mlp.gate_proj": "h2", "mlp.up_proj": "h2", "mlp.down_proj": "hidden"}
    feats = {n: inp[source[n]].clone() for n in named}
    scales_list = [(get_op_name(block, prev), tuple(get_op_name(block, l) for l in layers),
                    torch.from_numpy(np.frombuffer(base64.b64decode(c["scales"]), dtype=np.float32).copy()))
                   for (prev, layers, _, _), c in zip(searches, out)]
    apply_scale(block, scales_list, input_feat_dict=feats)
    with torch.no_grad():
        clip_list = q._search_best_clip(block, named, feats)
    apply_clip(block, clip_list)
    clips = {n.split(".")[-1]: b64(m.reshape(m.shape[0], -1).float(), np.float32) for n, m in clip_list}
    # The clip search alone on generated inputs (bit-identical in C++): a [256, 512] weight, 192 tokens
    # with outlier channels. Its choices are sensitive to float32 rounding (near-equal errors), which
    # the block's folded weights carry; these are not.
    cw = gen(41, (256, 2 * K), 1 / 16)
    cx = gen(42, (BATCHES * B * T, 2 * K)) * outlier_gain(2 * K, FF_OUTLIERS, 6.0)
    with torch.no_grad():
        best = q._compute_best_clip(cw, cx)
        clips["generated"] = b64(best.reshape(256, -1).float(), np.float32)
        if "--clip-sensitivity" in sys.argv[1:]:
            g = torch.Generator().manual_seed(0)
            noisy = q._compute_best_clip(cw * (1 + 1e-7 * torch.randn(cw.shape, generator=g)),
                                         cx * (1 + 1e-7 * torch.randn(cx.shape, generator=g)))
            moved = float(((noisy - best).abs() / best > 1e-5).float().mean())
            print(f"AutoAWQ clip thresholds that move under 1e-7 relative noise on weights and inputs: {moved:.4f}")
    sys.path.remove(src)
    return out, clips


def main():
    """Writes the fixture. --basic-pipeline: llm-compressor's basic pipeline instead (prints, writes
    nothing); --autoawq-cpu-alias: AutoAWQ's search as it runs on a CPU (prints, writes nothing);
    --clip-sensitivity: how many AutoAWQ clip thresholds 1e-7 noise moves (prints, writes nothing)."""
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQMapping, AWQModifier
    from llmcompressor.modifiers.transform.awq import base as awq_base
    from llmcompressor.pipelines.cache import IntermediatesCache

    flags = set(sys.argv[1:])
    unknown = flags - {"--basic-pipeline", "--autoawq-cpu-alias", "--clip-sensitivity"}
    if unknown:
        sys.exit(f"make_awq_fixtures.py: unknown options {sorted(unknown)}")
    basic, alias = "--basic-pipeline" in flags, "--autoawq-cpu-alias" in flags
    alias = alias or "--clip-sensitivity" in flags  # prints only

    torch.set_num_threads(1)
    w = make_block()
    inputs = make_inputs()
    autoawq, autoawq_clips = autoawq_search(w, inputs, copy_state=not alias)
    model = Model(w).float().eval()

    # What the search saw and chose, per mapping, in llm-compressor's order.
    records = []
    orig_best = awq_base.AWQModifier._compute_best_scale
    orig_loss = awq_base.AWQModifier._compute_loss

    def best_scale(self, mapping, fp16_outputs, orig_layer_weights):
        x_sum, count = self._smooth_activation_stats[mapping.smooth_name]
        rec = {
            "smooth": mapping.smooth_name.split(".")[-1],
            "balance": [n.split(".")[-1] for n in mapping.balance_names],
            "parent": mapping.parent_name.split(".")[-1],
            "x_mean": (x_sum / count).float(),
            "count": int(count),
            "grid": [[r, bool(d)] for r, d in self._get_grid_search_params()],
            "losses": [],
        }
        records.append(rec)
        scales = orig_best(self, mapping, fp16_outputs, orig_layer_weights)
        rec["scales"] = scales.float()
        return scales

    def compute_loss(self, fp16_outputs, int_w_outputs):
        loss = orig_loss(self, fp16_outputs, int_w_outputs)
        if records and "scales" not in records[-1]:
            records[-1]["losses"].append(loss)
        return loss

    awq_base.AWQModifier._compute_best_scale = best_scale
    awq_base.AWQModifier._compute_loss = compute_loss
    # Pinning host memory needs a CUDA driver; on a CPU-only machine it is left out (it moves no number).
    IntermediatesCache.pin_memory = lambda self, batch_index: None

    mappings = [
        AWQMapping("re:.*input_layernorm$", ["re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"]),
        AWQMapping("re:.*v_proj$", ["re:.*o_proj$"]),
        AWQMapping("re:.*post_attention_layernorm$", ["re:.*gate_proj$", "re:.*up_proj$"]),
        AWQMapping("re:.*up_proj$", ["re:.*down_proj$"]),
    ]
    awq = AWQModifier(mappings=mappings)  # duo_scaling=True, n_grid=20: the defaults
    recipe = [awq, QuantizationModifier(targets=["Linear"], scheme="W4A16_ASYM", ignore=[])]
    run_llmcompressor(model, recipe, [{"x": x} for x in inputs], basic)
    cases = summarise(records)
    report(cases, autoawq)
    if not basic and not alias:
        write_fixture(w, inputs, model, cases, autoawq, autoawq_clips)


def run_llmcompressor(model, recipe, batches, basic):
    """The sequential pipeline (oneshot's default) for one subgraph: calibration forwards, then the AWQ
    search (sequential_epoch_end), both with quantisation disabled. llm-compressor's basic pipeline
    calls sequential_epoch_end after leaving DisableQuantization, so there every forward of the search
    runs with weight quantisation on: the "full-precision" outputs use weight_scale as initialised
    (torch.empty: whatever memory held, NaN or inf on some runs, and the mapping is skipped), and each
    grid point's Q(W·s)/s is quantised again (--basic-pipeline shows it). That is not the search the
    paper or AutoAWQ run."""
    from llmcompressor.core import LifecycleCallbacks, create_session
    from llmcompressor.pipelines.basic import BasicPipeline
    from llmcompressor.utils import calibration_forward_context
    from llmcompressor.utils.helpers import DisableQuantization

    with create_session() as session:
        session.initialize(model=model, start=-1, recipe=recipe, calib_data=batches)
        if basic:
            BasicPipeline()(model, batches, None)
        else:
            LifecycleCallbacks.calibration_start()
            with calibration_forward_context(model), DisableQuantization(model):
                for i, batch in enumerate(batches):
                    session.state.current_batch_idx = i
                    model(**batch)
                LifecycleCallbacks.sequential_epoch_end(list(model.modules()))
            LifecycleCallbacks.calibration_end()
        session.finalize()


def summarise(records):
    cases = []
    for rec in records:
        losses = rec["losses"]
        assert len(losses) == len(rec["grid"]), (len(losses), len(rec["grid"]))
        best = min(range(len(losses)), key=lambda i: (losses[i], i))
        cases.append({
            "smooth": rec["smooth"], "balance": rec["balance"], "parent": rec["parent"],
            "tokens": rec["count"], "grid": rec["grid"], "losses": losses, "best_index": best,
            "x_mean": b64(rec["x_mean"], np.float32), "scales": b64(rec["scales"], np.float32),
        })
    return cases


def report(cases, autoawq):
    for c in cases:
        print(f"{c['smooth']:>24} -> {','.join(c['balance']):<24} parent {c['parent']:<10} best {c['best_index']:2d} "
              f"ratio {c['grid'][c['best_index']][0]:.4f} duo {c['grid'][c['best_index']][1]} "
              f"loss {c['losses'][c['best_index']]:.6e} (ratio 0: {c['losses'][0]:.6e})")
    for a in autoawq:
        print(f"{a['smooth']:>24}: AutoAWQ best {a['best_index']:2d} ratio {a['ratios'][a['best_index']]:.2f} "
              f"loss {a['losses'][a['best_index']]:.6e} (ratio 0: {a['losses'][0]:.6e})")


def write_fixture(w, inputs, model, cases, autoawq, autoawq_clips):
    from compressed_tensors.quantization.lifecycle.forward import quantize

    block = model.model.layers[0]
    linears = {
        "q_proj": block.self_attn.q_proj, "k_proj": block.self_attn.k_proj, "v_proj": block.self_attn.v_proj,
        "o_proj": block.self_attn.o_proj, "gate_proj": block.mlp.gate_proj, "up_proj": block.mlp.up_proj,
        "down_proj": block.mlp.down_proj,
    }
    final = {}
    for name, m in linears.items():
        scale, zp = m.weight_scale.data, m.weight_zero_point.data
        args = m.quantization_scheme.weights
        assert args.group_size == 128 and not args.symmetric and args.num_bits == 4
        codes = quantize(m.weight.data, scale, zp, args).to(torch.int16) + 8  # signed → unsigned
        assert int(codes.min()) >= 0 and int(codes.max()) <= 15
        final[name] = {
            "shape": list(m.weight.shape),
            "scales": b64(scale.float(), np.float32),
            "zeros": b64((zp.to(torch.int16) + 8).to(torch.uint8), np.uint8),
            "codes_every_4th_row": b64(pack_rows(codes), np.uint8),
        }

    x0 = inputs[0]
    doc = {
        "about": "AWQ scale search as llm-compressor 0.14.0 runs it (tests/oracle/make_awq_fixtures.py)",
        "versions": {"llmcompressor": __import__("llmcompressor").__version__,
                     "compressed_tensors": __import__("compressed_tensors").__version__,
                     "torch": torch.__version__},
        "model": {"K": K, "heads": HEADS, "d_ff": DFF, "batches": BATCHES, "batch": B, "seq": T, "norm_eps": EPS,
                  "x_outliers": X_OUTLIERS, "x_outlier_gain": 12.0, "ff_outliers": FF_OUTLIERS,
                  "ff_outlier_gain": 6.0, "row_stride": ROW_STRIDE},
        "generator_check": {"x0_first": [float(v) for v in x0.reshape(-1)[:4]],
                            "x0_sum": float(x0.double().sum()), "q_sum": float(w["q_proj"].double().sum()),
                            "down_sum": float(w["down_proj"].double().sum())},
        "scheme": "W4A16_ASYM", "duo_scaling": True, "n_grid": 20,
        "cases": cases,
        "autoawq_0_2_9": {"duo_scaling": True, "cases": autoawq, "clip_max_val": autoawq_clips},
        "final": final,
        "folded_norms": {"input_layernorm": b64(block.input_layernorm.weight.data.float(), np.float32),
                         "post_attention_layernorm": b64(block.post_attention_layernorm.weight.data.float(),
                                                         np.float32)},
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
