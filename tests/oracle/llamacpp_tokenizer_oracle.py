#!/usr/bin/env python3
"""Oracle for qeval's GGUF tokenizers: llama.cpp's own tokenizer through llama-cpp-python
(llama_cpp.Llama(model, vocab_only=True)), as llama.cpp's perplexity tool tokenises a document:
no BOS (qeval's encode() adds none; the protocols add it), special tokens not parsed
(parse_special = false: control tokens' text stays text, user-defined tokens are cut out).

  llamacpp_tokenizer_oracle.py GGUF OUT_JSONL INPUT.jsonl:LIMIT [...]

Writes one JSON line {"text", "ids"} per input text (the "text" field of the first LIMIT
non-empty lines of each INPUT; tests/oracle/read_texts.py). Also prints the tokenizer facts
llama.cpp reports (BOS, EOS, add_bos) on stderr.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_texts import read_texts, write_records  # noqa: E402

import llama_cpp  # noqa: E402


def main():
    model, out = sys.argv[1:3]
    texts = read_texts(sys.argv[3:])
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model) if hasattr(llama_cpp, "llama_model_get_vocab") else None
    if vocab is not None:
        print(f"llama.cpp {llama_cpp.__version__}: n_vocab {llm.n_vocab()}, bos {llama_cpp.llama_vocab_bos(vocab)}, "
              f"eos {llama_cpp.llama_vocab_eos(vocab)}, add_bos {llama_cpp.llama_vocab_get_add_bos(vocab)}",
              file=sys.stderr)
    ids = [llm.tokenize(t.encode("utf-8"), add_bos=False, special=False) if t else [] for t in texts]
    write_records(out, texts, ids)


if __name__ == "__main__":
    main()
