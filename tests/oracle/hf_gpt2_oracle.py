#!/usr/bin/env python3
"""Oracle for qeval's GPT-2 BPE: Hugging Face `tokenizers` (Rust) encodes texts with the GPT-2
vocabulary files, configured as HF's own GPT-2 tokenizer is (ByteLevel pre-tokenizer without
prefix space, BPE, ByteLevel decoder, no added tokens: "<|endoftext|>" in text stays text).

  hf_gpt2_oracle.py VOCAB_JSON MERGES_TXT OUT_JSONL INPUT.jsonl:LIMIT [...] [--save-tokenizer-json PATH]

Writes one JSON line {"text", "ids"} per input text (the "text" field of the first LIMIT lines
of each INPUT), and with --save-tokenizer-json the tokenizer.json that tokenizers writes for it.
"""
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from read_texts import read_texts, write_records


def main(argv):
    save = None
    if "--save-tokenizer-json" in argv:
        i = argv.index("--save-tokenizer-json")
        save = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    vocab, merges, out, *inputs = argv
    tok = Tokenizer(models.BPE.from_file(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    if save:
        tok.save(save)
    texts = read_texts(inputs)
    encodings = tok.encode_batch(texts, add_special_tokens=False)
    write_records(out, texts, [e.ids for e in encodings])

if __name__ == "__main__":
    main(sys.argv[1:])
