#!/usr/bin/env python3
"""Reference values of the state-space layer statistics (implicit attention, selection entropy) for the tiny
Mamba, Mamba-2 and Jamba fixtures, from an independent numpy float64 forward.

Run (numpy and safetensors in a virtual environment, nothing installed system-wide):
    python3 -m venv /tmp/oracle-venv && /tmp/oracle-venv/bin/pip install numpy safetensors
    /tmp/oracle-venv/bin/python tests/oracle/ssm_statistics_oracle.py [tests/model/fixtures]
It reads <fixtures>/<f>/{config.json, model.safetensors, reference.safetensors} for f in tiny-mamba-hf,
tiny-mamba2-hf and tiny-jamba-hf, runs the forward of hf_moe_ssm_forward.py (float32 weights converted to float64,
on the reference's input_ids [2, 12]; its logits are checked against the reference's), takes each SSM mixer's scan
operands through the forward's `tap`, and writes <fixtures>/<f>/statistics_reference.json. The values in the committed
files were made with numpy 2.4.6 and safetensors 0.8.0.

Definitions (1-based positions; per sequence b, per SSM layer; Δ is the time step the scan uses: after softplus, and
for Mamba-2 after + dt_bias and the time_step_limit clamp, HF's default (0, inf) when the config has none):
  Mamba (S6; Ali, Zimerman & Wolf 2024, "The Hidden Attention of Mamba Models", with HF's discretisation
  Ā = exp(ΔA), B̄ = Δ B): for channel c of d_inner E, query i, key j ≤ i,
      α_c[i, j] = Σ_n C_i[n] · exp(Σ_{k=j+1..i} Δ_k[c] · A[c, n]) · Δ_j[c] · B_j[n]
  with A = −exp(A_log) [E, N] and B, C [L, N] as the scan uses them (Jamba: after its dt/B/C RMSNorms).
  Mamba-2 (per head h, group g = h // (H // G)):
      M_h[i, j] = (C_i[g] · B_j[g]) · exp(Σ_{k=j+1..i} Δ_k[h] · A[h]) · Δ_j[h].
  Both are checked here against the forward: y_i = Σ_{j≤i} α[i, j] u_j + D u_i reproduces the scan's (SSD's) output
  to 1e-10 (absolute), which proves the formulas.
  Weights W[i, j] = |α[i, j]| / Σ_{j'≤i} |α[i, j']| (a row of all-zero |α| stays all zeros); the "heads" are the E
  channels for Mamba, the H heads for Mamba-2. The statistics of W are those of stats/attention_stats.h for a global
  layer, with sink_T = 4 and sink_eps = 0.3 (T' = min(4, L)):
      first_attn     over (head, i = 2..L): the fraction whose largest weight is on key 1 (a maximum shared by k keys
                     j ≤ i, key 1 among them, counts 1/k; exact equality)
      first_share    mean of W[i, 1] over the same (head, i)
      sink_fraction  per head α₁ = (1/T') Σ_{i=1..T'} W[i, 1]; the fraction of heads with α₁ > ε (strictly)
      entropy        mean over (head, i = 1..L) of −Σ_j W[i, j] log W[i, j] (0 log 0 = 0, nats)
  Selection entropy (SAMBA, Ren et al. 2024, arXiv 2406.07522, Appendix C): per channel c (Mamba: the E channels of
  Δ [L, E]; Mamba-2: the H heads of Δ [L, H]) S[i, c] = Δ[i, c] / Σ_{i'} Δ[i', c], H_c = −Σ_i S[i, c] log S[i, c];
  the sequence's value is the mean over c of H_c.
Output: {"source", "sink_T", "sink_eps", "length", "layers" (0-based SSM layer indices), "per_window" (per batch row:
"implicit_attention" [per layer: {first_attn, first_share, sink_fraction, entropy}], "selection_entropy" [per layer]),
"per_layer" (each statistic's mean over the windows, per layer)}.
Sanity checks: every W row sums to 1 (or is all 0), every S column sums to 1, each row's entropy ≤ log(i).
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_moe_ssm_forward import jamba, mamba_family  # noqa: E402

SINK_T, SINK_EPS = 4, 0.3
FIXTURES = ("tiny-mamba-hf", "tiny-mamba2-hf", "tiny-jamba-hf")
STATS = ("first_attn", "first_share", "sink_fraction", "entropy")


def segment_sums(delta):
    """delta [L, C] → S [L, L, C] with S[i, j] = Σ_{k=j+1..i} Δ_k (0-based: j < k ≤ i), zero for j ≥ i."""
    Ln = delta.shape[0]
    k = np.arange(Ln)
    mask = (k[None, None, :] > k[None, :, None]) & (k[None, None, :] <= k[:, None, None])  # [i, j, k]
    return np.einsum("ijk,kc->ijc", mask.astype(np.float64), delta)


def causal(Ln):
    return np.tril(np.ones((Ln, Ln), bool))


def mamba_alpha(delta, A, Bm, Cm):
    """One sequence: delta [L, E], A [E, N], B, C [L, N] → α [E, L, L] (zero above the diagonal)."""
    seg = segment_sums(delta)  # [i, j, E]
    decay = np.exp(seg[..., None] * A[None, None])  # [i, j, E, N]
    alpha = np.einsum("in,ijcn,jc,jn->cij", Cm, decay, delta, Bm)
    return np.where(causal(delta.shape[0])[None], alpha, 0.0)


def mamba2_alpha(delta, A, Bm, Cm):
    """One sequence: delta [L, H], A [H], B, C [L, H, N] (each head its group's) → M [H, L, L]."""
    seg = segment_sums(delta)  # [i, j, H]
    cb = np.einsum("ihn,jhn->hij", Cm, Bm)
    M = cb * np.exp(seg * A).transpose(2, 0, 1) * delta.T[:, None, :]
    return np.where(causal(delta.shape[0])[None], M, 0.0)


def weights(alpha):
    a = np.abs(alpha)
    s = a.sum(-1, keepdims=True)
    W = np.divide(a, s, out=np.zeros_like(a), where=s > 0)
    rows = W.sum(-1)
    assert np.all((np.abs(rows - 1) < 1e-12) | (np.abs(W).max(-1) == 0)), "a W row does not sum to 1"
    return W


def attention_stats(W, margins):
    """W [heads, L, L] causal → the four statistics of stats/attention_stats.h (global layer). margins["argmax"] and
    margins["sink"] keep the smallest |W[i, 1] − max_{1<j≤i} W[i, j]| and |α₁ − ε|: how far the discrete choices
    (first_attn, sink_fraction) are from flipping under a lower-precision forward."""
    Hh, Ln, _ = W.shape
    first, share = [], []
    for h in range(Hh):
        for i in range(1, Ln):  # 0-based query i sees keys 0..i
            row = W[h, i, :i + 1]
            m = row.max()
            ties = np.count_nonzero(row == m)
            first.append(1.0 / ties if row[0] == m else 0.0)
            share.append(row[0])
            margins["argmax"] = min(margins["argmax"], abs(row[0] - row[1:].max()))
    Tp = min(SINK_T, Ln)
    a1 = W[:, :Tp, 0].mean(1)
    margins["sink"] = min(margins["sink"], float(np.abs(a1 - SINK_EPS).min()))
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(W > 0, W * np.log(np.where(W > 0, W, 1.0)), 0.0)
    ent = -plogp.sum(-1)  # [heads, L]
    bound = np.log(np.arange(1, Ln + 1))
    assert np.all(ent <= bound[None] + 1e-12), "a row's entropy exceeds log(i)"
    return {"first_attn": float(np.mean(first)), "first_share": float(np.mean(share)),
            "sink_fraction": float(np.mean(a1 > SINK_EPS)), "entropy": float(ent.mean())}


def selection_entropy(delta):
    """delta [L, C] > 0 → mean over c of the entropy of S[:, c] = Δ[:, c] / Σ_i Δ[i, c]."""
    assert np.all(delta > 0), "a time step is not positive"
    S = delta / delta.sum(0, keepdims=True)
    assert np.abs(S.sum(0) - 1).max() < 1e-12, "an S column does not sum to 1"
    return float((-(S * np.log(S)).sum(0)).mean())


def run_fixture(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    p = {k: v.astype(np.float32).astype(np.float64) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    ref = load_file(os.path.join(d, "reference.safetensors"))
    ids = ref["input_ids"]
    kind = cfg["model_type"]
    taps = {}

    def tap(layer, **a):
        taps[layer] = a

    if kind == "jamba":
        logits, _ = jamba(cfg, p, ids, {}, tap=tap)
    else:
        logits, _ = mamba_family(cfg, p, ids, kind, tap=tap)
    logit_err = float(np.abs(logits - ref["logits"].astype(np.float64)).max())
    assert logit_err < 1e-5 * max(1.0, float(np.abs(logits).max())), f"forward disagrees with the reference: {logit_err}"

    layers = sorted(taps)
    Bn, Ln = ids.shape
    per_window = [{"implicit_attention": [], "selection_entropy": []} for _ in range(Bn)]
    residual = 0.0
    margins = {"argmax": np.inf, "sink": np.inf}
    for layer in layers:
        a = taps[layer]
        for b in range(Bn):
            delta = a["delta"][b]
            if kind == "mamba2":
                alpha = mamba2_alpha(delta, a["A"], a["B"][b], a["C"][b])  # [H, L, L]
                u = a["u"][b]  # [L, H, P]
                y = np.einsum("hij,jhp->ihp", alpha, u) + a["D"][None, :, None] * u
            else:
                alpha = mamba_alpha(delta, a["A"], a["B"][b], a["C"][b])  # [E, L, L]
                u = a["u"][b]  # [L, E]
                y = np.einsum("cij,jc->ic", alpha, u) + a["D"][None] * u
            r = float(np.abs(y - a["y"][b]).max())
            assert r < 1e-10, f"layer {layer}, row {b}: α u + D u misses the scan by {r}"
            residual = max(residual, r)
            per_window[b]["implicit_attention"].append(attention_stats(weights(alpha), margins))
            per_window[b]["selection_entropy"].append(selection_entropy(delta))
    per_layer = {s: [float(np.mean([w["implicit_attention"][k][s] for w in per_window])) for k in range(len(layers))]
                 for s in STATS}
    per_layer["selection_entropy"] = [float(np.mean([w["selection_entropy"][k] for w in per_window]))
                                      for k in range(len(layers))]
    out = {"source": "tests/oracle/ssm_statistics_oracle.py, numpy float64", "sink_T": SINK_T, "sink_eps": SINK_EPS,
           "length": int(Ln), "layers": layers, "per_window": per_window, "per_layer": per_layer}
    return out, residual, logit_err, margins


def main(root):
    cols = STATS + ("selection_entropy",)
    for f in FIXTURES:
        d = os.path.join(root, f)
        out, residual, logit_err, margins = run_fixture(d)
        with open(os.path.join(d, "statistics_reference.json"), "w") as fh:
            json.dump(out, fh, indent=1)
            fh.write("\n")
        print(f"{f}: SSM layers {out['layers']}, logits vs reference max |Δ| {logit_err:.2e}, "
              f"duality residual max |αu + Du − y| {residual:.2e}; smallest margins: key 1 vs the best other key "
              f"{margins['argmax']:.2e}, α₁ vs ε {margins['sink']:.2e}")
        print("  layer  window  " + "  ".join(f"{c:>20}" for c in cols))
        for k, layer in enumerate(out["layers"]):
            for b, w in enumerate(out["per_window"]):
                vals = [w["implicit_attention"][k][c] for c in STATS] + [w["selection_entropy"][k]]
                print(f"  {layer:5d}  {b:6d}  " + "  ".join(f"{v:20.15g}" for v in vals))
            print(f"  {layer:5d}    mean  " + "  ".join(f"{out['per_layer'][c][k]:20.15g}" for c in cols))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/model/fixtures")
