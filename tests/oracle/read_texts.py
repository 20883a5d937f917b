"""Shared by the oracle scripts: the "text" field of the first LIMIT non-empty JSON lines of
each INPUT given as PATH:LIMIT (the C++ test reads back the texts from the oracle's output, so
both sides encode exactly the same strings)."""
import json


def read_texts(specs):
    texts = []
    for spec in specs:
        path, limit = spec.rsplit(":", 1)
        taken = 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                if taken >= int(limit):
                    break
                if line.strip():
                    texts.append(json.loads(line)["text"])
                    taken += 1
    return texts


def write_records(out, texts, ids):
    with open(out, "w", encoding="utf-8") as f:
        for text, row in zip(texts, ids):
            f.write(json.dumps({"text": text, "ids": list(row)}, ensure_ascii=False) + "\n")
