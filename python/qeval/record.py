"""Result records as pandas DataFrames.

A record is verified by the qeval binary before anything here reads it: ``Record.load`` runs
``qeval compare PATH --format json`` (series records: the same command gives their trajectory), and
a record the binary refuses raises QevalError with the binary's words. The binary's own tables are
used wherever it offers them as JSON (``compare --format json``: headline statistics and the
Table 3 ΔPPL columns; ``compare --timings --format json``; a series' trajectory). What the binary
prints only as text for a terminal or gnuplot (the per-scheme table of ``eval``, the rounding band
of ``compare``'s Markdown and ``plot``'s penalties.dat) is read as stored in the verified record,
entry by entry: values are taken as they are, none is recomputed and no check of the binary is
repeated here. No text table is parsed, so a scheme is found under any name the binary accepts
(spaces, "|", "±", a leading "#", non-ASCII): Markdown escapes "|" and gnuplot's data file turns
spaces and "#" into "_", so a name read back from them is not the scheme's name.
"""
from __future__ import annotations

import html
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from ._binary import PathLike, QevalError, run, run_json

__all__ = ["Record", "compare"]


def _pandas():
    try:
        import pandas as pd  # type: ignore
    except ImportError as e:  # pragma: no cover - pandas is a dependency
        raise ImportError("qeval's DataFrames need pandas: pip install pandas") from e
    return pd


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _get(j: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(j, dict) or key not in j:
            return None
        j = j[key]
    return j


def _statistic_name(path: Sequence[str]) -> str:
    """hidden.kurtosis.per_layer.first → kurtosis_first; attention.entropy_per_layer → entropy (the
    names `qeval compare --format json` gives the headline statistics)."""
    parts = [p for p in path[1:] if p != "per_layer"]
    if parts and parts[-1].endswith("_per_layer"):
        parts[-1] = parts[-1][: -len("_per_layer")]
    return "_".join(parts)


def _read_verified(path: PathLike, command: Sequence[str]) -> Dict[str, Any]:
    """The record the binary has just verified, parsed here (a UTF-8 byte-order mark is allowed, as
    the binary allows it)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise QevalError(f"{os.fspath(path)}: the binary verified this record, but it cannot be read here: {e}", 2,
                         command) from None


def _record_args(path: PathLike) -> List[str]:
    """A record path as the last argument, after "--": a file named like an option stays a file."""
    return ["--", os.fspath(path)]


class Record:
    """One result record (``qeval eval --out``, a series record, a sensitivity record), verified by
    the binary on load."""

    def __init__(self, path: PathLike, summary: Dict[str, Any], data: Dict[str, Any], binary: Optional[str] = None,
                 stdout: str = ""):
        self.path = Path(path)
        self.binary = binary
        self.summary = summary  # what `qeval compare --format json` printed for it
        self._data = data
        self.stdout = stdout  # what the run that made it printed (qeval.evaluate), else ""
        self._timings = None
        self._figures: Optional[List[Path]] = None

    # -- loading -------------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: PathLike, binary: Optional[PathLike] = None, allow_partial: bool = False) -> "Record":
        """Reads and verifies a record through the binary; QevalError when it refuses it."""
        args = ["compare", "--format", "json"] + (["--allow-partial"] if allow_partial else []) + _record_args(path)
        # The rows this package reads: a binary that is not qeval is named here instead of failing later.
        summary = run_json(args, binary, keys=("runs", "rows"), rows=True)
        # The binary has read and verified this file; its fields are now read as stored.
        data = _read_verified(path, args)
        return cls(path, summary, data, None if binary is None else os.fspath(binary))

    @property
    def kind(self) -> str:
        """"series", "sensitivity" or "eval"."""
        if "runs" in self.summary:
            return "series"
        return "sensitivity" if "sensitivity" in self._data else "eval"

    @property
    def label(self) -> str:
        if self.kind == "series":
            return self.summary["runs"][0]["label"]
        return self.summary["rows"][0]["model"]

    @property
    def raw(self) -> Dict[str, Any]:
        """The verified record as parsed JSON (read-only by convention)."""
        return self._data

    def _run(self, args: Iterable[PathLike]):
        return run(list(args), self.binary)

    def _eval_only(self, what: str) -> None:
        if self.kind == "series":
            raise ValueError(f"{self.path}: a series record has no {what} of its own; use series(), or "
                             "Record.load() on one of its checkpoints' records")

    def _schemes(self) -> List[Dict[str, Any]]:
        return [s for s in self._data.get("schemes", [])
                if not (isinstance(s.get("description"), dict) and "rounding_band_of" in s["description"])]

    # -- tables --------------------------------------------------------------------------------------------------
    def headline(self) -> Dict[str, Any]:
        """The binary's comparison row for this record (`qeval compare --format json`): PPL of full
        precision, the headline statistics, ΔPPL of the Table 3 presets."""
        self._eval_only("comparison row")
        return self.summary["rows"][0]

    def penalties(self):
        """One row per scheme: PPL ± (95 % half-width) and se of the NLL, ΔPPL and ΔPPL %, the paired
        ΔNLL ± se (± rounding band where the record has one), KL(full‖q), top-1 agreement,
        Δp(correct), tokens/s.

        The rounding band (σ of the paired ΔNLL over the scheme and its rounding variants) is the
        ``rounding_band.delta_nll_sd`` of the scheme's own entry, which the binary held to what the
        variants give (1e-9) when it verified the record: the number `qeval compare` and `qeval
        plot` print, at full precision. NaN where the scheme has no rounding variants."""
        self._eval_only("penalties")
        pd = _pandas()
        rows = []
        for s in self._schemes():
            p, v = s.get("perplexity") or {}, s.get("vs_full") or {}
            rows.append({
                "scheme": s["name"],
                "execution": _get(s, "description", "execution"),
                "ppl": _number(p.get("ppl")),
                "ppl_pm": _number(p.get("ppl_pm")),
                "nll_mean": _number(p.get("nll_mean")),
                "nll_se": _number(p.get("nll_se")),
                "dppl": _number(v.get("dppl")),
                "dppl_pct": 100 * _number(v.get("dppl_rel")),
                "paired_dnll_mean": _number(v.get("paired_dnll_mean")),
                "paired_dnll_se": _number(v.get("paired_dnll_se")),
                "rounding_band": _number(_get(s, "rounding_band", "delta_nll_sd")),
                "kl_mean": _number(v.get("kl_mean")),
                "top1_agreement": _number(v.get("top1_agreement")),
                "dp_correct_mean": _number(v.get("dp_correct_mean")),
                "tokens": p.get("tokens"),
                "tokens_per_second": _number(_get(s, "timing", "tokens_per_second")),
            })
        return pd.DataFrame(rows).set_index("scheme")

    def token_tails(self):
        """One row per quantised scheme: the per-token comparison with full precision as `llama-perplexity
        --kl-divergence` states it (record section ``per_token``, docs/record.md): KL mean ± uncertainty and
        its percentiles (kl_max, kl_p99.9, ..., kl_median, ..., kl_min), Δp likewise (as fractions, not %),
        RMS Δp ± uncertainty, same top p ± uncertainty, reverse KL ± uncertainty, the top-1 flips (lost: full
        right and the scheme wrong; gained: the reverse) as counts and rates ± se. Percentile columns are NaN
        where the record has none (a merge without the shards' per-token values)."""
        self._eval_only("per-token tails")
        pd = _pandas()
        levels = ["max", "p99.9", "p99", "p95", "p90", "p75", "median", "p25", "p10", "p5", "p1", "p0.1", "min"]
        rows = []
        for s in self._schemes():
            t = s.get("per_token")
            if not isinstance(t, dict):
                continue
            row: Dict[str, Any] = {"scheme": s["name"], "tokens": t.get("tokens")}
            for q in ("kl", "dp"):
                row[f"{q}_mean"] = _number(_get(t, q, "mean"))
                row[f"{q}_uncertainty"] = _number(_get(t, q, "uncertainty"))
                for level in levels:
                    row[f"{q}_{level}"] = _number(_get(t, q, "percentiles", level))
            row["reverse_kl_mean"] = _number(_get(t, "reverse_kl", "mean"))
            row["reverse_kl_uncertainty"] = _number(_get(t, "reverse_kl", "uncertainty"))
            row["dp_rms"] = _number(_get(t, "dp_rms", "value"))
            row["dp_rms_uncertainty"] = _number(_get(t, "dp_rms", "uncertainty"))
            row["same_top"] = _number(_get(t, "same_top", "rate"))
            row["same_top_uncertainty"] = _number(_get(t, "same_top", "uncertainty"))
            for kind in ("lost", "gained"):
                row[f"top1_{kind}"] = _get(t, "top1_flips", kind, "count")
                row[f"top1_{kind}_rate"] = _number(_get(t, "top1_flips", kind, "rate"))
                row[f"top1_{kind}_uncertainty"] = _number(_get(t, "top1_flips", kind, "uncertainty"))
            rows.append(row)
        return pd.DataFrame(rows, columns=None if rows else ["scheme"]).set_index("scheme")

    def position_buckets(self):
        """One row per (quantised scheme, position bucket): the prediction positions it holds (first, last;
        0 is the first token), its tokens, the paired ΔNLL ± se and the mean KL (record section
        ``position_buckets``)."""
        self._eval_only("position buckets")
        pd = _pandas()
        rows = []
        for s in self._schemes():
            for b in s.get("position_buckets") or []:
                rows.append({"scheme": s["name"], "positions": b.get("label"), "first": b["positions"][0],
                             "last": b["positions"][1], "tokens": b.get("tokens"),
                             "paired_dnll_mean": _number(b.get("paired_dnll_mean")),
                             "paired_dnll_se": _number(b.get("paired_dnll_se")), "kl_mean": _number(b.get("kl_mean"))})
        keys = ["scheme", "positions"]
        return pd.DataFrame(rows, columns=None if rows else keys).set_index(keys)

    def statistics(self, per_layer: bool = False):
        """The outlier and attention statistics of each scheme that collected them. per_layer=False:
        one row per scheme, the headline values (named as `qeval compare --format json` names them:
        kurtosis_first, max_abs_rest, first_attn_pct, sink_rate_pct, entropy, ...). per_layer=True:
        one row per (scheme, layer), a column per per-layer statistic."""
        self._eval_only("statistics")
        pd = _pandas()
        rows = []
        for s in self._schemes():
            st = s.get("statistics")
            if not isinstance(st, dict):
                continue
            values: Dict[str, Any] = {}

            def walk(j: Any, path: List[str]) -> None:
                if isinstance(j, dict):
                    for k, v in j.items():
                        walk(v, path + [k])
                elif per_layer and isinstance(j, list) and j and all(isinstance(x, (int, float)) for x in j) and \
                        ("per_layer" in path or path[-1].endswith("_per_layer")):
                    values[_statistic_name(path)] = j
                elif not per_layer and isinstance(j, (int, float)) and not isinstance(j, bool) and len(path) > 1:
                    values[_statistic_name(path)] = j

            for group in ("hidden", "attention", "ssm", "selection"):
                if group in st:
                    walk(st[group], [group])
            for k, v in st.items():  # groups this package does not know by name are shown too
                if k not in ("hidden", "attention", "ssm", "selection") and isinstance(v, dict):
                    walk(v, [k])
            if per_layer:
                n = max((len(v) for v in values.values()), default=0)
                for layer in range(n):
                    row = {"scheme": s["name"], "layer": layer}
                    row.update({k: (_number(v[layer]) if layer < len(v) else math.nan) for k, v in values.items()})
                    rows.append(row)
            else:
                rows.append({"scheme": s["name"], **values})
        keys = ["scheme", "layer"] if per_layer else ["scheme"]
        return pd.DataFrame(rows, columns=None if rows else keys).set_index(keys if per_layer else "scheme")

    def timings(self):
        """Where the run's time went by phase, in seconds (`qeval compare --timings --format json`)."""
        self._eval_only("timings")
        pd = _pandas()
        if self._timings is None:
            self._timings = run_json(["compare", "--timings", "--format", "json", "--allow-partial"] +
                                     _record_args(self.path), self.binary, keys=("timings",))["timings"]
        rows = []
        for r in self._timings:
            t = r.get("timings") or {}
            row = {"model": r["model"], "total": _number(t.get("total_s"))}
            row.update({k: _number(v) for k, v in (t.get("phases") or {}).items()})
            rows.append(row)
        return pd.DataFrame(rows).set_index("model")

    def series(self):
        """A series record's trajectory, one row per (step, scheme), as `qeval compare` gives it:
        tokens, lr, val_loss, PPL of full precision, each scheme's ΔPPL and paired ΔNLL ± se, and
        the headline statistics of the step."""
        if self.kind != "series":
            raise ValueError(f"{self.path}: not a series record (qeval eval --model FOLDER-OF-CHECKPOINTS)")
        pd = _pandas()
        rows = []
        for run_ in self.summary["runs"]:
            for r in run_["rows"]:
                common = {k: v for k, v in r.items() if k != "penalties"}
                for scheme, p in (r.get("penalties") or {}).items():
                    rows.append({"run": run_["label"], **common, "scheme": scheme,
                                 **{k: _number(v) for k, v in p.items()}})
        df = pd.DataFrame(rows)
        return df.set_index(["step", "scheme"]) if not df.empty else df

    def sensitivity(self):
        """A sensitivity record's units (`qeval sensitivity --out`), sorted by harm as the binary
        ranked them: ΔNLL ± se, ΔPPL %, the first-token share, input kurtosis."""
        if "sensitivity" not in self._data:
            raise ValueError(f"{self.path}: not a sensitivity record (qeval sensitivity --out)")
        pd = _pandas()
        rows = []
        for u in self._data["sensitivity"].get("units", []):
            row: Dict[str, Any] = {}

            def flat(j: Any, prefix: str) -> None:
                for k, v in j.items():
                    if isinstance(v, dict):
                        flat(v, f"{prefix}{k}_")
                    elif not isinstance(v, list):
                        row[prefix + k] = v

            flat(u, "")
            rows.append(row)
        df = pd.DataFrame(rows)
        return df.set_index("rank") if "rank" in df else df

    # -- figures and notebooks -----------------------------------------------------------------------------------
    def figures(self, out: Optional[PathLike] = None) -> List[Path]:
        """Draws the record's figures with `qeval plot` (gnuplot) into ``out`` (a temporary folder by
        default) and returns the PNGs; empty when the binary cannot draw (no gnuplot). Any other
        refusal (an ``out`` that is a file, ...) raises QevalError."""
        if self._figures is not None and out is None:
            return self._figures
        folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="qeval-plot-"))
        try:
            self._run(["plot", f"--out={os.fspath(folder)}"] + _record_args(self.path))
        except QevalError as e:
            if "gnuplot not found" in e.message:
                return []
            raise
        pngs = sorted(folder.rglob("*.png"))
        if out is None:
            self._figures = pngs
        return pngs

    def _repr_html_(self) -> str:
        import base64

        title = f"<h4>qeval {html.escape(self.kind)} record: {html.escape(str(self.path))}</h4>"
        if self.kind == "series":
            body = self.series().to_html(float_format=lambda x: f"{x:.4g}")
        else:
            body = self.penalties().drop(columns=["nll_mean", "tokens"]).to_html(float_format=lambda x: f"{x:.5g}")
        images = ""
        for png in self.figures()[:6]:
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            images += (f'<figure style="display:inline-block;margin:4px"><img src="data:image/png;base64,{data}" '
                       f'style="max-width:480px"/><figcaption>{html.escape(png.name)}</figcaption></figure>')
        return title + body + images

    def __repr__(self) -> str:
        return f"Record({str(self.path)!r}, kind={self.kind!r}, label={self.label!r})"


def compare(records: Sequence, binary: Optional[PathLike] = None, allow_protocol_mismatch: bool = False,
            allow_partial: bool = False, labels: Optional[Sequence[str]] = None):
    """Several records side by side, the binary's comparison (`qeval compare --format json`): one
    row per record with the full-precision PPL, the headline statistics and each Table 3 preset's
    ΔPPL (columns dppl_<scheme>). Records may be paths or Record objects. The binary refuses
    records measured under different protocols unless allow_protocol_mismatch."""
    if isinstance(records, (str, bytes, os.PathLike, Record)):  # one record, not its characters
        records = [records]
    paths = [os.fspath(r.path) if isinstance(r, Record) else os.fspath(r) for r in records]
    args = ["compare", "--format", "json"]
    if allow_protocol_mismatch:
        args.append("--allow-protocol-mismatch")
    if allow_partial:
        args.append("--allow-partial")
    if labels:
        for label in labels:
            if "," in str(label):
                raise ValueError(f"compare: label {label!r} holds a comma, which `qeval compare --labels` splits on")
        args += ["--labels", ",".join(str(label) for label in labels)]
    args += ["--", *paths]
    out = run_json(args, binary, keys=("runs", "rows"), rows=True)
    pd = _pandas()
    if "runs" in out:  # series records: their trajectories
        rows = [{"run": r["label"], **{k: v for k, v in row.items() if k != "penalties"},
                 **{f"{key}_{s}": _number(val) for s, p in (row.get("penalties") or {}).items() for key, val in p.items()}}
                for r in out["runs"] for row in r["rows"]]
        return pd.DataFrame(rows).set_index(["run", "step"])
    rows = []
    for r in out["rows"]:
        row = {k: v for k, v in r.items() if k != "dppl"}
        row.update({f"dppl_{k}": _number(v) for k, v in r["dppl"].items()})
        rows.append(row)
    df = pd.DataFrame(rows).set_index("model")
    # The binary's CSV order (JSON objects come sorted); a preset no record evaluated is left out, as there.
    first = [c for c in ("record", "partial", "softmax1", "orthoadam", "optimizer", "ppl_full", "kurtosis_first",
                         "kurtosis_rest", "max_abs_first", "max_abs_rest", "first_attn_pct", "sink_rate_pct") if c in df]
    dppl = [f"dppl_{k}" for k in out["rows"][0]["dppl"]] if out["rows"] else []
    dppl = [c for c in dppl if df[c].notna().any()]
    df = df[first + dppl + [c for c in df.columns if c not in first and not c.startswith("dppl_")]]
    df.attrs["protocol_mismatch"] = out.get("protocol_mismatch", False)
    df.attrs["partial_records"] = out.get("partial_records", False)
    return df
