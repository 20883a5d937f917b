"""The DataFrames equal the binary's own tables, on records committed under results/."""
import json
import math
import subprocess

import pandas as pd
import pytest

import qeval

STORIES = ["results/posthoc/stories260k/none.json", "results/posthoc/stories260k/rotate.json",
           "results/posthoc/stories260k/smooth.json"]
BAND = "results/rounding-band/gemma3-270m-wikitext2.json"
SERIES = "results/train/trajectory/A128-lr2.5e-3.json"
SENSITIVITY = "results/posthoc/gemma3-270m/sensitivity-moderate-none.json"


def binary_json(binary, *args):
    done = subprocess.run([binary, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def same(a, b):
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


@pytest.fixture(scope="module")
def stories(repo, binary):
    return [qeval.Record.load(repo / p) for p in STORIES]


def test_penalties_equal_the_binary_check_table(stories, binary, tmp_path):
    """PPL and ΔPPL of every scheme as `qeval check --format json` reports them (a record checked
    against itself with limits that pass everything)."""
    tolerances = tmp_path / "all.json"
    tolerances.write_text(json.dumps({"schemes": {"*": {"ppl_abs": 1e9, "dppl_abs": 1e9}}}))
    for r in stories:
        report = binary_json(binary, "check", "--baseline", r.path, "--tolerances", tolerances, r.path, "--format", "json")
        pen = r.penalties()
        checked = {(i["scheme"], i["quantity"]): i["new"] for i in report["items"]}
        assert {s for s, _ in checked} == set(pen.index)
        for scheme, row in pen.iterrows():
            assert row["ppl"] == checked[(scheme, "PPL")]
            assert same(row["dppl"], checked.get((scheme, "ΔPPL")))


def test_compare_and_headline_statistics_equal_the_binary(stories, binary, repo):
    table = qeval.compare(stories)
    out = binary_json(binary, "compare", *[repo / p for p in STORIES], "--format", "json")
    assert list(table.index) == [row["model"] for row in out["rows"]]
    for r, row in zip(stories, out["rows"]):
        pen, st = r.penalties(), r.statistics()
        assert pen.loc["full", "ppl"] == row["ppl_full"] == table.loc[row["model"], "ppl_full"]
        for scheme, dppl in row["dppl"].items():
            assert same(pen["dppl"].get(scheme), dppl)
            column = f"dppl_{scheme}"  # left out, as in the binary's CSV, when no record has the preset
            assert same(table.loc[row["model"], column] if column in table else None, dppl)
        for key in ("kurtosis_first", "kurtosis_rest", "max_abs_first", "max_abs_rest", "first_attn_pct",
                    "sink_rate_pct"):
            assert st.loc["full", key] == row[key], key


def test_per_layer_statistics_equal_the_binary_plot_data(stories, binary, has_gnuplot, tmp_path):
    """Per layer: `qeval plot`'s layer_curves.dat (9 significant digits, layers counted from 1)."""
    if not has_gnuplot:
        pytest.skip("no gnuplot: qeval plot writes no data files")
    for i, r in enumerate(stories):
        out = tmp_path / str(i)
        subprocess.run([binary, "plot", r.path, "--out", out], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        lines = (out / "layer_curves.dat").read_text().splitlines()
        names = next(l for l in lines if l.startswith("# layer ")).split()[2:]
        rows = [l.split() for l in lines if l and not l.startswith("#")]
        st = r.statistics(per_layer=True).loc["full"]
        assert len(rows) == len(st) > 0
        for row in rows:
            layer = int(row[0]) - 1
            for name, text in zip(names, row[1:]):
                assert st.loc[layer, name] == pytest.approx(float(text), rel=1e-8, abs=1e-300), (layer, name)


def test_timings_equal_the_binary_csv(stories, binary, repo):
    with_timings = 0
    for r in stories + [qeval.Record.load(repo / BAND)]:
        done = subprocess.run([binary, "compare", r.path, "--timings", "--format", "csv"], stdout=subprocess.PIPE,
                              text=True, check=True)
        header, *rows = done.stdout.strip().splitlines()
        names, values = header.split(","), rows[0].split(",")
        t = r.timings()
        for name, text in zip(names[1:], values[1:]):
            column = name[:-2]  # "forward_s" → "forward"
            if text == "":
                assert column not in t.columns or math.isnan(t.iloc[0][column])
            else:  # the CSV rounds to 2 decimals
                with_timings += 1
                assert f"{t.iloc[0][column]:.2f}" == text, column
    assert with_timings > 0


def test_series_equals_the_binary_csv(repo, binary):
    r = qeval.Record.load(repo / SERIES)
    assert r.kind == "series"
    s = r.series()
    done = subprocess.run([binary, "compare", repo / SERIES, "--format", "csv"], stdout=subprocess.PIPE, text=True,
                          check=True)
    import io
    csv = pd.read_csv(io.StringIO(done.stdout))
    schemes = sorted({c[len("dppl_"):] for c in csv.columns if c.startswith("dppl_")})
    assert sorted(s.index.get_level_values("scheme").unique()) == schemes
    checked = 0
    for _, row in csv.iterrows():
        for scheme in schemes:
            ours = s.loc[(row["step"], scheme)]
            for column, key in (("dppl", "dppl"), ("dnll", "paired_dnll_mean"), ("dnll_se", "paired_dnll_se")):
                theirs = row[f"{column}_{scheme}"]  # the CSV keeps 15 significant digits
                assert math.isnan(ours[key]) if pd.isna(theirs) else ours[key] == pytest.approx(theirs, rel=1e-13)
            assert ours["ppl"] == pytest.approx(row["ppl"], rel=1e-13)
            checked += 1
    assert checked == len(s) > 0


def test_rounding_band_equals_the_binary_tables(repo, binary, has_gnuplot, tmp_path):
    """The band of every banded scheme: `qeval compare`'s Markdown (5 decimals) and `qeval plot`'s
    penalties.dat (9 significant digits), with the paired ΔNLL and its se."""
    r = qeval.Record.load(repo / BAND)
    pen = r.penalties()
    markdown = subprocess.run([binary, "compare", repo / BAND], stdout=subprocess.PIPE, text=True, check=True).stdout
    banded = 0
    for line in markdown.split("Rounding band", 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and " ± " in cells[2] and cells[2][:1] in "+-":
            dnll, se, band = cells[2].split(" ± ")
            p = pen.loc[cells[1]]
            assert (f"{p['paired_dnll_mean']:+.5f}", f"{p['paired_dnll_se']:.5f}", f"{p['rounding_band']:.5f}") == \
                (dnll, se, band)
            banded += 1
    assert banded == pen["rounding_band"].notna().sum() > 0
    if not has_gnuplot:
        pytest.skip("no gnuplot: qeval plot cannot write penalties.dat")
    subprocess.run([binary, "plot", repo / BAND, "--out", tmp_path], check=True, stdout=subprocess.PIPE,
                   stderr=subprocess.PIPE)
    rows = [l.split() for l in (tmp_path / "penalties.dat").read_text().splitlines() if l and not l.startswith("#")]
    for _, scheme, mean, se, band, _record in rows:
        assert float(mean) == pytest.approx(pen.loc[scheme, "paired_dnll_mean"], rel=1e-8)
        assert float(se) == pytest.approx(pen.loc[scheme, "paired_dnll_se"], rel=1e-8)
        assert pen.loc[scheme, "rounding_band"] == pytest.approx(float(band), rel=1e-8)


def test_sensitivity(repo, binary):
    r = qeval.Record.load(repo / SENSITIVITY, binary=binary)
    s = r.sensitivity()
    assert len(s) > 0 and s.index.name == "rank"
    assert list(s.index) == sorted(s.index)


def test_a_record_the_binary_refuses_raises_its_message(repo, binary, tmp_path):
    bad = json.loads((repo / STORIES[0]).read_text())
    bad["schemes"][1]["perplexity"]["ppl"] *= 1.01  # no longer what its per-window rows say
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(qeval.QevalError) as e:
        qeval.Record.load(path, binary=binary)
    assert e.value.returncode == 2
    assert "tampered.json" in e.value.message


def test_html_view(stories, has_gnuplot):
    html = stories[0]._repr_html_()
    assert "<table" in html and "int8-coarse" in html
    if has_gnuplot:
        assert "data:image/png;base64," in html


def test_token_tails_and_position_buckets_equal_the_binary(binary, data_dir, tmp_path):
    """Beyond the mean (docs/record.md): every number of `token_tails()` and `position_buckets()` is the
    one `qeval compare --format json` gives for the same record, on a stories260K run."""
    out = tmp_path / "tails.json"
    done = subprocess.run([binary, "eval", "-q", "--tokenizer", "models/stories260K/tok512.bin", "--seq-len", "64",
                           "--max-windows", "4", "--schemes", "full,int8-coarse", "--stats-for", "none", "--out", out],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 0, done.stderr
    r = qeval.Record.load(out, binary=binary)
    tails, buckets = r.token_tails(), r.position_buckets()
    shown = binary_json(binary, "compare", out, "--format", "json")["per_token"]
    assert [e["scheme"] for e in shown] == list(tails.index) == ["int8-coarse"]
    t = shown[0]["per_token"]
    row = tails.loc["int8-coarse"]
    assert row["tokens"] == t["tokens"] == 4 * 63
    for level in ("max", "p99.9", "p99", "median", "p0.1", "min"):
        assert row[f"kl_{level}"] == t["kl"]["percentiles"][level]
        assert row[f"dp_{level}"] == t["dp"]["percentiles"][level]
    assert row["kl_mean"] == t["kl"]["mean"] and row["reverse_kl_mean"] == t["reverse_kl"]["mean"]
    assert row["dp_rms"] == t["dp_rms"]["value"] and row["same_top"] == t["same_top"]["rate"]
    assert row["top1_lost"] == t["top1_flips"]["lost"]["count"]
    b = shown[0]["position_buckets"]
    assert list(buckets.loc["int8-coarse"].index) == [x["label"] for x in b]
    assert list(buckets["tokens"]) == [x["tokens"] for x in b] and sum(buckets["tokens"]) == 4 * 63
    assert list(buckets["paired_dnll_mean"]) == [x["paired_dnll_mean"] for x in b]
