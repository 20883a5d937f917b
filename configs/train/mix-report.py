#!/usr/bin/env python3
"""Issue 18: the tables of the mixed-text study from its evaluation records.

    configs/train/mix-report.py [DIR (results/train/mix)]  > DIR/summary.md

Reads every DIR/NAME.eval.json written by configs/train/mix-run.sh (and NAME.train.log for the
training time) and prints, in Markdown:
  1. every run: recipe, seed, budget, window, validation loss, held-out PPL, the outlier
     statistics of the full-precision model and the ΔPPL of every scheme;
  2. the issue's must-show checks for every A/B pair trained alike (same shape, seed, steps and
     window; one learning rate, or each recipe at its tuned one): kurtosis (rest) of A ≥ 5× B's,
     int8-coarse and int8-fine penalties larger for A, PPL within 5 %;
  3. mean ± standard deviation over the seeds of each shape's tuned pair (seq 128), per budget;
     and the ablations: every set of the four recipes trained alike, side by side;
  4. the statistics over training, from DIR/trajectory/RUN-STEP.json (checkpoints evaluated
     on the first 256 held-out windows), and the per-layer kurtosis of every run.
Only the standard library: the numbers come from the records, nothing is recomputed.
"""
import json
import math
import re
import statistics
import sys
from pathlib import Path

RECIPES = {  # (optimizer, softmax, norm) -> name used by mix-run.sh
    ("adam", "softmax", "layernorm"): "A",
    ("orthoadam", "softmax1", "rmsnorm_single"): "B",
    ("adam", "softmax1", "rmsnorm_single"): "A-B",
    ("orthoadam", "softmax", "layernorm"): "B-A",
}
# Each recipe's optimizer and architecture (attention + norm); an ablation takes the learning
# rate of the recipe whose optimizer it has.
RECIPE_PARTS = {"A": ("Adam", "softmax + LayerNorm"), "A-B": ("Adam", "softmax-1 + RMSNormSingle"),
                "B-A": ("OrthoAdam", "softmax + LayerNorm"), "B": ("OrthoAdam", "softmax-1 + RMSNormSingle")}
RECIPE_TEXT = {name: f"{optimizer} + {arch}" for name, (optimizer, arch) in RECIPE_PARTS.items()}
SCHEMES = ["int8-coarse", "int8-moderate", "int8-fine", "int8-vectorwise", "w4-zeropoint"]


def train_minutes(log: Path):
    if not log.exists():
        return None
    times = [int(m) + int(s) / 60 for m, s in re.findall(r"elapsed (\d+):(\d+)", log.read_text())]
    # A resumed run's log is its segments one after another; each segment's clock starts at 0.
    total = sum(t for t, after in zip(times, times[1:]) if after < t)
    return total + times[-1] if times else None


def load(path: Path):
    r = json.loads(path.read_text())
    cfg = r["model"]["config"]
    meta = r["model"].get("notes", {}).get("metadata", {})
    training = meta.get("training", {})
    schemes = {s["name"]: s for s in r["schemes"]}
    full = schemes["full"]
    st = full["statistics"]
    h, a = st["hidden"], st.get("attention") or {}
    name = path.name[: -len(".eval.json")]
    return {
        "name": name,
        "recipe": RECIPES.get((cfg.get("optimizer"), cfg["attention_softmax"], cfg["norm"]), "?"),
        "seed": training.get("seed"),
        "arch": (cfg["d_model"], cfg["n_layers"]),
        "steps": meta.get("step"),
        "tokens": meta.get("tokens_seen"),
        "seq": training.get("seq_len"),
        "lr": training.get("lr"),
        "bos": bool(training.get("bos_per_window", False)),
        "stopped_early": bool(meta.get("stopped_early", False)),
        "val_loss": meta.get("val_loss"),
        "minutes": train_minutes(path.with_name(name + ".train.log")),
        "ppl": full["perplexity"]["ppl"],
        "ppl_pm": full["perplexity"]["ppl_pm"],
        "eval_tokens": full["perplexity"]["tokens"],
        "k_first": h["kurtosis"]["first"],
        "k_rest": h["kurtosis"]["rest"],
        "k_rest_layers": h["kurtosis"]["per_layer"]["rest"],
        "m_first": h["max_abs"]["first"],
        "m_rest": h["max_abs"]["rest"],
        "first_attn": a.get("first_attn_pct"),
        "first_share": a.get("first_token_share"),
        "sink": a.get("sink_rate_pct"),
        "dppl": {s: schemes[s]["vs_full"]["dppl"] for s in SCHEMES if s in schemes},
        # The paired per-token NLL difference and its standard error: whether a penalty is noise.
        "dnll": {s: (schemes[s]["vs_full"]["paired_dnll_mean"], schemes[s]["vs_full"]["paired_dnll_se"])
                 for s in SCHEMES if s in schemes},
    }


def f(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def signed(x):
    return "–" if x is None else f"{x:+.4f}"


def dnll(r, scheme):
    """The paired ΔNLL per token of a scheme against full precision, ± its standard error."""
    return "{:+.5f} ± {:.5f}".format(*r["dnll"][scheme])


def budget(r):
    return f"{r['tokens'] / 1e6:.1f} M" + (" (stopped early)" if r["stopped_early"] else "")


def window(r):
    return f"{r['seq']}" + (" + BOS" if r["bos"] else "")


# Each model shape's peak learning rate per recipe, picked by its sweep (sweep/sweep.md for d 128,
# sweep-d256/sweep.md for d 256); runs at other rates are side experiments or probes.
TUNED_LR = {
    (128, 4): {"A": 5e-3, "B": 5e-3},
    (256, 4): {"A": 2e-3, "B": 3e-3},
}


def tuned(r):
    return TUNED_LR.get(r["arch"], {}).get(r["recipe"]) == r["lr"]


def seed_means(pairs):
    """Mean ± standard deviation over seeds trained alike (one shape, one budget), A beside B."""
    a0, b0 = pairs[0]
    print(f"\n## Over the {len(pairs)} seeds at d {a0['arch'][0]} × {a0['arch'][1]} layers, {budget(a0)} tokens "
          f"(window 128, tuned lr: A {a0['lr']:g}, B {b0['lr']:g}), mean ± standard deviation\n")
    print("Seeds " + ", ".join(str(a["seed"]) for a, _ in pairs) + "; the per-pair rows above are the exact figures.\n")
    print("| quantity | A | B | A / B |")
    print("|---|---:|---:|---:|")
    ms = lambda xs, d: f"{statistics.mean(xs):.{d}f} ± {statistics.stdev(xs):.{d}f}"

    def row(label, key, digits, ratio=True):
        xa = [a[key] for a, _ in pairs]
        xb = [b[key] for _, b in pairs]
        # No ratio of percentages near zero (a sink rate of 0.05 % against 0.14 % says nothing).
        r = ms([x / y for x, y in zip(xa, xb)], 2) if ratio else "–"
        print(f"| {label} | {ms(xa, digits)} | {ms(xb, digits)} | {r} |")

    row("PPL (held out)", "ppl", 3)
    row("kurtosis, first token", "k_first", 2)
    row("kurtosis, other tokens", "k_rest", 2)
    row("max \\|X\\|, first token", "m_first", 1)
    row("max \\|X\\|, other tokens", "m_rest", 1)
    row("%first-attn", "first_attn", 2, ratio=False)
    row("sink rate %", "sink", 2, ratio=False)
    for s in ("int8-coarse", "int8-fine"):
        xa = [a["dppl"][s] for a, _ in pairs]
        xb = [b["dppl"][s] for _, b in pairs]
        print(f"| {s} ΔPPL | {statistics.mean(xa):+.4f} ± {statistics.stdev(xa):.4f} | "
              f"{statistics.mean(xb):+.4f} ± {statistics.stdev(xb):.4f} | – |")


def ablations(runs):
    """Every group of the four recipes trained alike (same shape, seed, budget, window), one table each."""
    groups = {}
    for r in runs:
        groups.setdefault(alike(r), {}).setdefault(r["recipe"], r)
    for group in groups.values():
        if set(group) != set(RECIPE_PARTS):
            continue
        a = group["A"]
        print(f"\n## Ablations at d {a['arch'][0]} × {a['arch'][1]} layers, seed {a['seed']}, {budget(a)} tokens, "
              f"window {window(a)}\n")
        rates = ", ".join(f"{n} {group[n]['lr']:g}" for n in RECIPE_PARTS)
        print(f"Peak learning rates (an ablation takes that of the recipe whose optimizer it has): {rates}. "
              "ΔNLL: paired, nats a token ± se.\n")
        print("| run | optimizer | attention + norm | PPL | kurtosis first / rest | max \\|X\\| first / rest | %first-attn | "
              "sink % | coarse ΔNLL | fine ΔNLL | w4 ΔPPL |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, (optimizer, arch) in RECIPE_PARTS.items():
            r = group[name]
            print(f"| {r['name']} | {optimizer} | {arch} | {r['ppl']:.3f} | {f(r['k_first'], 1)} / {f(r['k_rest'], 2)} | "
                  f"{f(r['m_first'], 1)} / {f(r['m_rest'], 1)} | {f(r['first_attn'])} | {f(r['sink'])} | "
                  f"{dnll(r, 'int8-coarse')} | {dnll(r, 'int8-fine')} | {signed(r['dppl'].get('w4-zeropoint'))} |")


SOURCES = ["tinystories", "austen", "tinyshakespeare", "c4"]


def by_source(folder, runs):
    """The full-precision statistics on each held-out source alone (configs/train/mix-by-source.sh)."""
    rows = []
    for r in runs:
        for source in SOURCES:
            p = folder / "by-source" / f"{r['name']}.{source}.eval.json"
            if p.exists():
                rows.append((r, source, load(p)))
    if not rows:
        return
    print("\n## Per held-out source\n")
    print("Each source's held-out documents alone (`heldout-SOURCE.txt` of mix.py), full precision, every window of the "
          "run's length (`by-source/`). A / B: the kurtosis (rest) ratio against the B run trained alike.\n")
    print("| run | source | tokens | PPL | kurtosis first / rest | max \\|X\\| first / rest | %first-attn | A / B kurtosis rest |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    stats = {(r["name"], source): x for r, source, x in rows}
    for r, source, x in rows:
        ratio = "–"
        if r["recipe"] == "A":
            twin = next((b for b in runs if b["recipe"] == "B" and paired(r, b)), None)
            if twin and (twin["name"], source) in stats:
                ratio = f"{x['k_rest'] / stats[(twin['name'], source)]['k_rest']:.1f}×"
        print(f"| {r['name']} | {source} | {x['eval_tokens']} | {x['ppl']:.3f} | {x['k_first']:.1f} / {x['k_rest']:.2f} | "
              f"{x['m_first']:.1f} / {x['m_rest']:.1f} | {f(x['first_attn'])} | {ratio} |")


def alike(r):
    """What two runs of a pair share: everything but the recipe and the peak learning rate."""
    return (r["seed"], r["steps"], r["seq"], r["bos"], r["arch"])


def paired(a, b):
    """A pair is trained alike, either at one learning rate or each at its recipe's tuned rate."""
    return alike(a) == alike(b) and (a["lr"] == b["lr"] or (tuned(a) and tuned(b)))


def lr_text(a, b):
    return f"{a['lr']:g}" if a["lr"] == b["lr"] else f"{a['lr']:g} / {b['lr']:g}"


def main():
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "results/train/mix")
    runs = sorted((load(p) for p in folder.glob("*.eval.json")), key=lambda r: (r["arch"], not tuned(r), r["seq"], r["bos"], -r["steps"], r["seed"], r["recipe"]))
    if not runs:
        sys.exit(f"mix-report: no *.eval.json in {folder}")

    print("## Every run\n")
    print("Held-out mix (`mix-heldout.txt`), every window of the run's length; statistics of the full-precision model.\n")
    print("| run | recipe | seed | tokens | window | peak lr | train min | val loss | PPL (held out) | kurtosis first / rest | "
          "max \\|X\\| first / rest | %first-attn | first-token share | sink % | " + " | ".join(f"{s} Δ" for s in SCHEMES) + " |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(SCHEMES))
    for r in runs:
        print(f"| {r['name']} | {RECIPE_TEXT.get(r['recipe'], '?')} | {r['seed']} | {budget(r)} | {window(r)} | {r['lr']:g} | "
              f"{f(r['minutes'], 1)} | {f(r['val_loss'], 4)} | {r['ppl']:.3f} ± {r['ppl_pm']:.3f} | "
              f"{f(r['k_first'], 1)} / {f(r['k_rest'], 2)} | {f(r['m_first'], 1)} / {f(r['m_rest'], 1)} | "
              f"{f(r['first_attn'])} | {f(r['first_share'], 3)} | {f(r['sink'])} | "
              + " | ".join(signed(r["dppl"].get(s)) for s in SCHEMES) + " |")

    print("\n## The issue's checks, per A/B pair trained alike\n")
    print("ΔPPL of each model against its own full precision, with the paired ΔNLL per token ± its standard error "
          "(nats) in brackets.\n")
    print("| seed | d × layers | tokens | window | peak lr | kurtosis rest A / B | ≥ 5×? | coarse Δ A vs B | larger for A? | fine Δ A vs B | "
          "larger for A? | PPL B / A − 1 | within 5 %? |")
    print("|---:|---:|---:|---|---:|---:|---|---:|---|---:|---|---:|---|")
    pairs = []
    for a in (r for r in runs if r["recipe"] == "A"):
        for b in (r for r in runs if r["recipe"] == "B"):
            if paired(a, b):
                pairs.append((a, b))
    for a, b in pairs:
        ratio = a["k_rest"] / b["k_rest"]
        gap = b["ppl"] / a["ppl"] - 1
        c_a, c_b = a["dppl"]["int8-coarse"], b["dppl"]["int8-coarse"]
        f_a, f_b = a["dppl"]["int8-fine"], b["dppl"]["int8-fine"]
        yes = lambda ok: "yes" if ok else "**no**"
        nll = lambda r, s: f"({dnll(r, s)})"
        print(f"| {a['seed']} | {a['arch'][0]} × {a['arch'][1]} | {budget(a)} | {window(a)} | {lr_text(a, b)} | {ratio:.1f}× ({a['k_rest']:.2f} / {b['k_rest']:.2f}) | "
              f"{yes(ratio >= 5)} | {c_a:+.4f} {nll(a, 'int8-coarse')} vs {c_b:+.4f} {nll(b, 'int8-coarse')} | "
              f"{yes(c_a > c_b)} | {f_a:+.4f} {nll(a, 'int8-fine')} vs {f_b:+.4f} {nll(b, 'int8-fine')} | "
              f"{yes(f_a > f_b)} | {gap * 100:+.1f} % | {yes(abs(gap) <= 0.05)} |")

    tuned_pairs = [(a, b) for a, b in pairs if a["seq"] == 128 and not a["bos"] and tuned(a) and tuned(b)]
    for arch, steps in sorted({(a["arch"], a["steps"]) for a, _ in tuned_pairs}, key=lambda k: (k[0], -k[1])):
        seeds = [(a, b) for a, b in tuned_pairs if (a["arch"], a["steps"]) == (arch, steps)]
        if len(seeds) >= 2:
            seed_means(seeds)

    ablations(runs)
    by_source(folder, runs)

    snapshots = []
    for p in sorted((folder / "trajectory").glob("*.json")):
        r = json.loads(p.read_text())
        st = r["schemes"][0]["statistics"]
        run, step = p.stem.rsplit("-", 1)
        snapshots.append((run, int(step), r["schemes"][0]["perplexity"]["ppl"], st["hidden"]["kurtosis"]["first"],
                          st["hidden"]["kurtosis"]["rest"], st["hidden"]["max_abs"]["first"], st["hidden"]["max_abs"]["rest"],
                          st["attention"]["first_attn_pct"]))
    if snapshots:
        print("\n## Over training: the checkpoints written every tenth of the schedule\n")
        print("The first 256 held-out windows, full precision only (`trajectory/`).\n")
        print("| run | step | tokens | PPL | kurtosis first / rest | max \\|X\\| first / rest | %first-attn |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for run, step, ppl, kf, kr, mf, mr, fa in sorted(snapshots):
            print(f"| {run} | {step} | {step * 2048 / 1e6:.1f} M | {ppl:.3f} | {kf:.1f} / {kr:.2f} | {mf:.1f} / {mr:.1f} | {fa:.2f} |")

    print("\n## Per-layer kurtosis (other tokens)\n")
    print("| run | " + " | ".join(f"layer {i + 1}" for i in range(max(len(r["k_rest_layers"]) for r in runs))) + " |")
    print("|---|" + "---:|" * max(len(r["k_rest_layers"]) for r in runs))
    for r in runs:
        print(f"| {r['name']} | " + " | ".join(f"{k:.2f}" for k in r["k_rest_layers"]) + " |")


if __name__ == "__main__":
    main()
