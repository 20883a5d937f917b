# Reference draws for tests/loaders/protocols/protocol_test.cpp (GptqC4Protocol): GPTQ get_c4 loop with
# Python random, HF tokenizers GPT-2 BPE and pip sentencepiece (Llama-2, BOS first).
import json, random, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
import sentencepiece as spm
import os
D = os.environ.get("QEVAL_DATA_DIR", "/work/shared/data") + "/"
docs = [json.loads(l)["text"] for l in open(D + "text/c4/c4-en-validation-excerpt-1025.jsonl") if l.strip()]
enc = json.load(open(D + "tokenizers/gpt2/encoder.json"))
merges = [tuple(l.split()) for l in open(D + "tokenizers/gpt2/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if l.strip()]
gpt2 = Tokenizer(models.BPE(enc, merges))
gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
sp = spm.SentencePieceProcessor(model_file=D + "tokenizers/llama2/tokenizer.model")
def run(tok, seqlen, n):
    random.seed(0)
    out = []
    for _ in range(n):
        while True:
            i = random.randint(0, len(docs) - 1)
            tmp = tok(docs[i])
            if len(tmp) >= seqlen:
                break
        d = i
        i = random.randint(0, len(tmp) - seqlen - 1)
        out.append((d, i, tmp[i:i+3]))
    return out
print(len(docs))
print("gpt2", run(lambda t: gpt2.encode(t).ids, 512, 8))
print("llama", run(lambda t: [1] + sp.encode(t), 1024, 6))
