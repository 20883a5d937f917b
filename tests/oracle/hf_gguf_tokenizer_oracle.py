#!/usr/bin/env python3
"""Oracle for qeval's byte-level BPE from GGUF metadata: Hugging Face `tokenizers` (Rust) built
from the GGUF's own tokenizer.ggml.tokens and tokenizer.ggml.merges (read with the `gguf` pip
package, not qeval's reader), with the pre-tokenizer a Hugging Face tokenizer.json uses for the
tokenizer.ggml.pre name:

  gpt2 / default   ByteLevel(add_prefix_space=False, use_regex=True)
  smollm           Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]
                   (SmolLM2's tokenizer.json)
  llama-bpe        Sequence[Split(Regex(LLAMA3), "isolated"), ByteLevel(use_regex=False)],
                   BPE(ignore_merges=True) (Llama 3's tokenizer.json)
  qwen2            the same with Qwen2's regex (single digits), ignore_merges=False

Special tokens follow qeval's rule (loaders/tokenizers/gguf_tokenizer.h): control tokens are not
added, so their text in a document is ordinary text; user-defined tokens (type 4) are added as
non-special AddedTokens, which `tokenizers` cuts out of the text.

  hf_gguf_tokenizer_oracle.py GGUF PRE OUT_JSONL INPUT.jsonl:LIMIT [...]
  hf_gguf_tokenizer_oracle.py --pieces PRE OUT_JSONL INPUT.jsonl:LIMIT [...]

PRE is one of the names above, or "file" for the GGUF's own tokenizer.ggml.pre. Writes one JSON
line {"text", "ids"} per input text (the "text" field of the first LIMIT lines of each INPUT).
With --pieces no GGUF is read: the lines are {"text", "pieces"}, the text cut by the same
pre-tokenizer without the byte-level mapping (GPT-2's regex as a Split, as ByteLevel applies it).
"""
import json
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from read_texts import read_texts, write_records

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
USER_DEFINED = 4


def field_strings(reader, key):
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def field_ints(reader, key):
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def build(path, pre):
    import gguf  # only here: --pieces needs no GGUF reader

    reader = gguf.GGUFReader(path)
    model = bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode()
    if model != "gpt2":
        sys.exit(f"{path}: tokenizer.ggml.model is {model!r}, this oracle reads 'gpt2' vocabularies")
    if pre == "file":
        field = reader.fields.get("tokenizer.ggml.pre")
        pre = bytes(field.parts[-1]).decode() if field else "default"
    tokens = field_strings(reader, "tokenizer.ggml.tokens")
    merges = []
    for m in field_strings(reader, "tokenizer.ggml.merges"):
        at = m.index(" ", 1)  # llama.cpp splits at the first space after the first byte
        merges.append((m[:at], m[at + 1:]))
    vocab = {t: i for i, t in enumerate(tokens)}
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    byte_level_only = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("gpt2", "gpt-2", "default"):
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = byte_level
    elif pre == "smollm":
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("llama-bpe", "qwen2"):
        tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=(pre == "llama-bpe")))
        regex = LLAMA3 if pre == "llama-bpe" else QWEN2
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False), byte_level_only])
    else:
        sys.exit(f"unknown pre-tokenizer {pre!r}")
    tok.decoder = decoders.ByteLevel()
    if "tokenizer.ggml.token_type" in reader.fields:
        types = field_ints(reader, "tokenizer.ggml.token_type")
        user = [tokens[i] for i, t in enumerate(types) if t == USER_DEFINED]
        if user:
            tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    return tok


def splitter(pre):
    """The pre-tokenizer of `pre` on raw text (no byte-level mapping)."""
    def split(regex):
        return pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)
    if pre in ("gpt2", "gpt-2", "default"):
        return split(GPT2)
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), split(GPT2)])
    if pre == "llama-bpe":
        return split(LLAMA3)
    if pre == "qwen2":
        return split(QWEN2)
    sys.exit(f"unknown pre-tokenizer {pre!r}")


def main(argv):
    path, pre, out, *inputs = argv
    texts = read_texts(inputs)
    if path == "--pieces":
        split = splitter(pre)
        with open(out, "w", encoding="utf-8") as f:
            for text in texts:
                pieces = [p for p, _ in split.pre_tokenize_str(text)]
                f.write(json.dumps({"text": text, "pieces": pieces}, ensure_ascii=False) + "\n")
        return
    tok = build(path, pre)
    encodings = tok.encode_batch(texts, add_special_tokens=False)
    write_records(out, texts, [e.ids for e in encodings])


if __name__ == "__main__":
    main(sys.argv[1:])
