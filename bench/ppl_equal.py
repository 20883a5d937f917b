#!/usr/bin/env python3
"""Whether two qeval records agree bit for bit on every scheme's perplexity, as a Markdown table
(bench/eval_speed_ab.sh, bench/scheme_speed_ab.sh).

  bench/ppl_equal.py OLD.json NEW.json
"""
import json
import sys

old, new = (json.load(open(p)) for p in sys.argv[1:3])
print("| scheme | PPL old | PPL new | equal |")
print("|---|---:|---:|---|")
for a, b in zip(old["schemes"], new["schemes"]):
    pa, pb = a["perplexity"]["ppl"], b["perplexity"]["ppl"]
    print(f"| {a['name']} | {pa!r} | {pb!r} | {'yes' if pa == pb else '**no**'} |")
