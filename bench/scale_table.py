#!/usr/bin/env python3
"""One row of issue 50's time-at-scale table from a qeval record and its /usr/bin/time output.

  bench/scale_table.py --header
  bench/scale_table.py --shape llama-2-7b --record r.json --time time.txt

The row's columns: shape, schemes (count), windows x tokens, plan, wall s (the process's, from
/usr/bin/time), the record's phases (read, convert, quantize, copy, forward, statistics, head;
summed over schemes), device peak GiB and host peak GiB (the record's measured peaks; the host
peak is /usr/bin/time's maximum RSS), then wall / (forward + statistics + head), the aim being
at most 1.5.
"""
import argparse
import json
import re

COLUMNS = ["shape", "schemes", "windows × tokens", "plan", "wall s", "read s", "convert s", "quantize s", "copy s",
           "forward s", "statistics s", "head s", "device peak GiB", "host peak GiB", "wall / (forward + statistics + head)"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--header", action="store_true")
    ap.add_argument("--shape")
    ap.add_argument("--record")
    ap.add_argument("--time", help="/usr/bin/time -v output")
    a = ap.parse_args()
    if a.header:
        print("| " + " | ".join(COLUMNS) + " |")
        print("| " + " | ".join(["---"] * 4 + ["---:"] * (len(COLUMNS) - 4)) + " |")
        return
    r = json.load(open(a.record))
    text = open(a.time).read()
    wall_match = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    h, m, s = wall_match.groups()
    wall = int(h or 0) * 3600 + int(m) * 60 + float(s)
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    phases = r["timings"]["phases"]
    plan = r["plan"]
    windows, seq_len = r["protocol"]["windows"], r["protocol"]["seq_len"]
    compute = phases["forward"] + phases["statistics"] + phases["head"]
    row = [a.shape, str(len(r["schemes"])), f"{windows} × {seq_len}", f"{plan['name']} ({plan['chunk_windows']} per chunk)",
           f"{wall:.1f}"] + [f"{phases[p]:.1f}" for p in ["read", "convert", "quantize", "copy", "forward", "statistics", "head"]]
    row += [f"{plan.get('measured_peak_device_bytes', 0) / 2**30:.1f}", f"{rss_kib / 2**20:.1f}", f"{wall / max(compute, 1e-9):.2f}"]
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
