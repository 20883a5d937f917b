#!/usr/bin/env python3
"""The training mix of issue 18: every text source of the shared data folder, split by document
so that evaluation is on text of the same mix that was never trained on.

  configs/train/mix.py DATA_DIR OUT_DIR

Sources and what a document is there: TinyStories validation-head (paragraphs: one story each),
the six Austen novels (paragraphs), Tiny Shakespeare (paragraphs: one speech each), the C4
excerpt (one JSON line each; its text's blank lines collapsed so a record stays one document).
WikiText-2 test is left out: it is the evaluation text of the real-model results.

Split: within each source, document i (0-based, file order) is held out when i % 20 == 19
(5 %), trained on otherwise. Each side's documents are then shuffled together with Python's
random.Random(0), so the trainer's own validation windows (the last 5 % of its stream) are a mix
too. Writes OUT_DIR/mix-train.txt and mix-heldout.txt (documents separated by blank lines, as
`--text-split paragraph` reads them), mix.json (documents and characters per source and side)
and heldout-SOURCE.txt: each source's held-out documents alone, in file order, for the
statistics per source (configs/train/mix-by-source.sh).
"""
import json
import os
import random
import re
import sys
from pathlib import Path


def paragraphs(path):
    text = Path(path).read_text(encoding="utf-8")
    return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]


def c4(path):
    docs = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            text = json.loads(line)["text"]
            docs.append(re.sub(r"\n\s*\n+", "\n", text).strip())
    return [d for d in docs if d]


def write_atomic(path, text):
    """Runs started side by side regenerate the same files while another run may be reading
    them: write a temporary file and rename it over, so a reader sees the old or the new file
    (identical), never a half-written one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(data, out):
    data, out = Path(data), Path(out)
    sources = {
        "tinystories": paragraphs(data / "text/tinystories/validation-head.txt"),
        "austen": [p for f in sorted((data / "text/austen").glob("*.txt")) for p in paragraphs(f)],
        "tinyshakespeare": paragraphs(data / "text/tinyshakespeare/input.txt"),
        "c4": c4(data / "text/c4/c4-en-validation-excerpt-1025.jsonl"),
    }
    train, heldout, manifest = [], [], {}
    for name, docs in sources.items():
        t = [d for i, d in enumerate(docs) if i % 20 != 19]
        h = [d for i, d in enumerate(docs) if i % 20 == 19]
        train += t
        heldout += h
        manifest[name] = {"train_documents": len(t), "train_chars": sum(map(len, t)),
                          "heldout_documents": len(h), "heldout_chars": sum(map(len, h))}
    out.mkdir(parents=True, exist_ok=True)
    for name, docs in sources.items():
        write_atomic(out / f"heldout-{name}.txt", "\n\n".join(d for i, d in enumerate(docs) if i % 20 == 19) + "\n")
    random.Random(0).shuffle(train)
    random.Random(0).shuffle(heldout)
    write_atomic(out / "mix-train.txt", "\n\n".join(train) + "\n")
    write_atomic(out / "mix-heldout.txt", "\n\n".join(heldout) + "\n")
    write_atomic(out / "mix.json", json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:3])
