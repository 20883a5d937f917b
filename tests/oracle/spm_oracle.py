#!/usr/bin/env python3
"""Oracle for qeval's SentencePiece path: the pip `sentencepiece` package (its own build of the
library, independent of the Debian libsentencepiece behind qeval's shim) encodes texts.

  spm_oracle.py MODEL OUT_JSONL INPUT.jsonl:LIMIT [...]

Writes one JSON line {"text", "ids"} per text: SentencePieceProcessor.encode(text), no BOS/EOS.
"""
import sys

import sentencepiece as spm

from read_texts import read_texts, write_records


def main(argv):
    model, out, *inputs = argv
    sp = spm.SentencePieceProcessor(model_file=model)
    texts = read_texts(inputs)
    write_records(out, texts, sp.encode(texts))


if __name__ == "__main__":
    main(sys.argv[1:])
