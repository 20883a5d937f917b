"""Every value under every scheme name the binary accepts: a scheme file's "name" may hold spaces,
"|", "±", a leading "#" and any non-ASCII text (the binary refuses only an empty name and control
characters). The package once read the rounding band back from the binary's text tables, where
Markdown escapes "|" and gnuplot's data file turns spaces and "#" into "_": such a scheme's band
came back NaN. It now reads every value from the scheme's own entry in the verified record.

The first tests need no binary: synthetic records, and a stand-in binary that prints the binary's
two text tables as reports/penalty_plot.cpp and reports/compare.cpp write them, so that a reader
of those tables fails here as it did on the binary's. The last runs the binary on stories260K
(skipped, with the reason, where there is no binary or no shared data).
"""
import itertools
import json
import math
import re
import subprocess
import sys

import pytest

import qeval

NAMES = ["int8 tensor", "int8|tensor", "int8 ± tensor", "#int8", "ñ-int8", "量化",
         "# a | b ± ñ 量化", "int8-plain"]


def band_of(k):
    return 1e-4 * (k + 1) + 3.25e-7 * k  # distinct, and not round at 5 decimals


def entry(name, k, description):
    return {
        "name": name,
        "description": description,
        "perplexity": {"ppl": 10.0 + k, "ppl_pm": 0.5, "nll_mean": math.log(10.0 + k), "nll_se": 0.01,
                       "tokens": 64},
        "vs_full": {"dppl": 0.25 * k, "dppl_rel": 0.025 * k, "paired_dnll_mean": 0.01 * (k + 1),
                    "paired_dnll_se": 0.002 + 1e-5 * k, "kl_mean": 0.001 * k, "top1_agreement": 0.9,
                    "dp_correct_mean": -0.001},
        "statistics": {"hidden": {"kurtosis": {"first": 100.0 + k, "rest": 3.0 + k}}},
        "timing": {"tokens_per_second": 1000.0 + k},
    }


def synthetic_record(names):
    """A record as qeval eval --rounding-band 2 writes it, reduced to what the package reads: full
    precision, each named scheme with its band summary, and each scheme's two rounding variants."""
    full = entry("full", -1, {"kind": "full"})
    full["vs_full"] = None
    schemes = [full]
    for k, name in enumerate(names):
        s = entry(name, k, {"weights": {"kind": "int8_absmax"}})
        s["rounding_band"] = {"variants": 2, "eps": 2 ** -22, "seeds": [1, 2], "delta_nll_sd": band_of(k),
                              "delta_nll_range": 2 * band_of(k)}
        schemes.append(s)
        for seed in (1, 2):
            v = entry(f"{name}~r{seed}", k, {"weights": {"kind": "int8_absmax"}, "rounding_band_of": name,
                                             "rounding_seed": seed, "rounding_eps": 2 ** -22})
            schemes.append(v)
    return {"model": {"name": "synthetic"}, "schemes": schemes}


# The stand-in binary: `plot` writes penalties.dat (unless FAKE_QEVAL_GNUPLOT=0: "gnuplot not
# found", as the binary says without gnuplot), `compare` prints the rounding band table; both with
# the binary's own escaping of names (data_word, markdown_cell).
FAKE = r'''
import json, os, sys
args = sys.argv[1:]
record = json.load(open(args[-1], encoding="utf-8"))
schemes = [s for s in record["schemes"] if "rounding_band_of" not in (s.get("description") or {})]
def data_word(text):
    word = "".join("_" if c in " \"#'" else c for c in text)
    return word or "_"
def markdown_cell(text):
    return text.replace("|", "\\|")
if args[0] == "plot":
    if os.environ.get("FAKE_QEVAL_GNUPLOT") == "0":
        sys.exit("plot: gnuplot not found on PATH")
    out = next(a[len("--out="):] for a in args if a.startswith("--out="))
    os.makedirs(out, exist_ok=True)
    rows = ["# qeval plot: paired ΔNLL per quantised scheme (nats per token)",
            "# x scheme dnll_mean dnll_se rounding_band_sd record", "# index 0: synthetic"]
    for x, s in enumerate(schemes[1:], 1):
        v, band = s["vs_full"], (s.get("rounding_band") or {}).get("delta_nll_sd")
        rows.append("%d %s %.9g %.9g %s 0" % (x, data_word(s["name"]), v["paired_dnll_mean"], v["paired_dnll_se"],
                                               "NaN" if band is None else "%.9g" % band))
    open(os.path.join(out, "penalties.dat"), "w", encoding="utf-8").write("\n".join(rows) + "\n")
elif args[0] == "compare":
    print("| model | PPL |\n|---|---:|\n| synthetic | 10 |\n")
    print("Rounding band (paired ΔNLL ± se (sampling) ± band (rounding))\n")
    print("| model | scheme | ΔNLL ± se ± band | band range | variants | ε | |\n|---|---|---:|---:|---:|---:|---|")
    for s in schemes[1:]:
        v, b = s["vs_full"], s["rounding_band"]
        print("| synthetic | %s | %+.5f ± %.5f ± %.5f | %.5f | %d | %.3g | |" % (
            markdown_cell(s["name"]), v["paired_dnll_mean"], v["paired_dnll_se"], b["delta_nll_sd"],
            b["delta_nll_range"], b["variants"], b["eps"]))
else:
    sys.exit("fake qeval: no %s here" % args[0])
'''


@pytest.fixture
def synthetic(tmp_path):
    """A Record of the synthetic record, as Record.load makes it once the binary has verified the
    file (the binary's summary row, the parsed file), with the stand-in binary."""
    path = tmp_path / "names.json"
    data = synthetic_record(NAMES)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    fake = tmp_path / "fake-qeval"
    fake.write_text(f"#!{sys.executable}\n" + FAKE, encoding="utf-8")
    fake.chmod(0o755)
    return qeval.Record(path, {"rows": [{"model": "synthetic"}]}, json.loads(path.read_text(encoding="utf-8")),
                        binary=str(fake))


@pytest.mark.parametrize("gnuplot", ["1", "0"], ids=["with-gnuplot", "without-gnuplot"])
def test_the_band_of_every_scheme_name(synthetic, monkeypatch, gnuplot):
    # Was, with gnuplot: NaN for the names with a space or "#" (penalties.dat writes "_" for them);
    # without: NaN for the names with "|" (Markdown's "\|"), and every other band rounded to 5
    # decimals.
    pytest.importorskip("pandas")
    monkeypatch.setenv("FAKE_QEVAL_GNUPLOT", gnuplot)
    pen = synthetic.penalties()
    assert list(pen.index) == ["full"] + NAMES
    assert math.isnan(pen.loc["full", "rounding_band"])
    for k, name in enumerate(NAMES):
        assert pen.loc[name, "rounding_band"] == band_of(k), name
        assert pen.loc[name, "paired_dnll_mean"] == 0.01 * (k + 1), name
        assert pen.loc[name, "dppl"] == 0.25 * k, name


def test_every_column_under_every_scheme_name(synthetic):
    pytest.importorskip("pandas")
    pen, st = synthetic.penalties(), synthetic.statistics()
    assert list(st.index) == ["full"] + NAMES
    for k, name in enumerate(NAMES):
        row = pen.loc[name]
        assert (row["ppl"], row["nll_se"], row["paired_dnll_se"], row["kl_mean"], row["tokens_per_second"]) == \
            (10.0 + k, 0.01, 0.002 + 1e-5 * k, 0.001 * k, 1000.0 + k), name
        assert (st.loc[name, "kurtosis_first"], st.loc[name, "kurtosis_rest"]) == (100.0 + k, 3.0 + k), name


def test_a_scheme_without_variants_has_no_band(tmp_path):
    pytest.importorskip("pandas")
    data = synthetic_record(["#int8 | ±"])
    del data["schemes"][1]["rounding_band"]
    data["schemes"] = data["schemes"][:2]
    r = qeval.Record(tmp_path / "r.json", {"rows": [{"model": "synthetic"}]}, data, binary="/nonexistent/qeval")
    assert math.isnan(r.penalties().loc["#int8 | ±", "rounding_band"])


def test_the_binary_band_of_every_scheme_name(binary, data_dir, has_gnuplot, tmp_path):
    """stories260K, int8-coarse's spec under each name, with 2 rounding variants each: every band
    is finite, and is what `qeval compare`'s Markdown and `qeval plot`'s penalties.dat print for that
    scheme, row by row (their names being escaped, the rows are matched by position)."""
    pytest.importorskip("pandas")
    names = [n for n in NAMES if n != "int8-plain"]
    files = []
    for k, name in enumerate(names):
        spec = tmp_path / f"scheme{k}.json"
        spec.write_text(json.dumps({"name": name,
                                    "weights": {"kind": "int8_absmax", "granularity": "tensor"},
                                    "input_activations": {"kind": "int8_absmax", "granularity": "tensor"},
                                    "output_activations": {"kind": "int8_absmax", "granularity": "tensor"}},
                                   ensure_ascii=False), encoding="utf-8")
        files.append(str(spec))
    out = tmp_path / "names.json"
    done = subprocess.run([binary, "eval", "-q", "--data-dir", str(data_dir),
                           "--model", "models/stories260K/stories260K.bin", "--tokenizer", "models/stories260K/tok512.bin",
                           "--seq-len", "32", "--max-windows", "2", "--no-attention-stats", "--rounding-band", "2",
                           "--schemes", ",".join(["full"] + files), "--out", str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    r = qeval.Record.load(out, binary=binary)
    pen = r.penalties()
    assert list(pen.index) == ["full"] + names
    bands = pen.loc[names, "rounding_band"]
    assert bands.notna().all(), bands

    markdown = subprocess.run([binary, "compare", "--", str(out)], stdout=subprocess.PIPE, text=True,
                              check=True).stdout
    section = markdown.split("Rounding band", 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("|"))
    rows = list(itertools.takewhile(lambda line: line.startswith("|"), section[start:]))[2:]  # past header, rule
    assert len(rows) == len(names)
    for name, line in zip(names, rows):
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        assert cells[1] == name
        band = cells[2].split(" ± ")[-1]
        assert f"{pen.loc[name, 'rounding_band']:.5f}" == band, name

    if not has_gnuplot:
        pytest.skip("no gnuplot: qeval plot writes no penalties.dat (the Markdown was checked)")
    subprocess.run([binary, "plot", "--out", str(tmp_path / "plot"), "--", str(out)], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    data = (tmp_path / "plot" / "penalties.dat").read_text(encoding="utf-8").splitlines()
    rows = [line.split() for line in data if line and not line.startswith("#")]
    assert len(rows) == len(names)
    for name, row in zip(names, rows):
        assert pen.loc[name, "rounding_band"] == pytest.approx(float(row[4]), rel=1e-8), name
