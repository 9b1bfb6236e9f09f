"""Writes SentencePiece-style BPE tokenizer.json files (the layout of Llama
2, Mistral and TinyLlama's: model BPE with byte_fallback, <unk>/<s>/</s>,
<0x00>..<0xFF>, U+2581 for spaces) trained here on a text, for
tests/check_sp_tokenizer.sh.

  sp_tokenizer.py TEXT OUTDIR MERGES
      OUTDIR/legacy.json    normalizer Prepend(U+2581) + Replace(" " -> U+2581),
                            no pre-tokenizer (Llama 2 / TinyLlama / Mistral v0.1)
      OUTDIR/first.json     no normalizer, Metaspace prepend_scheme "first",
                            split false (what newer transformers write)
      OUTDIR/split.json     Metaspace prepend_scheme "always", split true
The vocabulary: the special and byte tokens, the 400 most frequent
characters of TEXT (rarer ones fall back to bytes), then MERGES merges
learnt greedily from TEXT's word counts (words begin at a space).
"""
import collections
import json
import sys

SP = "\u2581"


def train(text, n_merges):
    chars = collections.Counter(text.replace(" ", SP))
    alphabet = [c for c, _ in chars.most_common(400)]
    words = collections.Counter()
    for line in text.split("\n"):
        norm = SP + line.replace(" ", SP)
        start = 0
        for i in range(1, len(norm) + 1):
            if i == len(norm) or norm[i] == SP:
                words[norm[start:i]] += 1
                start = i
    keep = set(alphabet)
    seqs = {w: [c for c in w] for w in words}
    merges, vocab_new = [], []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                if a in keep and b in keep:
                    pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        m = a + b
        keep.add(m)
        vocab_new.append(m)
        for w in words:
            s = seqs[w]
            i, out = 0, []
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(m)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t in alphabet + vocab_new:
        if t not in vocab:
            vocab[t] = len(vocab)
    return vocab, merges


def write(path, vocab, merges, normalizer, pre_tokenizer, decoder):
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(["<unk>", "<s>", "</s>"])]
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": normalizer,
         "pre_tokenizer": pre_tokenizer,
         "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                                                     {"Sequence": {"id": "A", "type_id": 0}}],
                            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
         "decoder": decoder,
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                   "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)


def main():
    text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
    vocab, merges = train(text, int(sys.argv[3]))
    legacy_dec = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    out = sys.argv[2]
    write(f"{out}/legacy.json", vocab, merges,
          {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                               {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
          None, legacy_dec)
    meta = lambda scheme, split: {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}
    dec = lambda scheme: {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Metaspace",
                          "replacement": SP, "prepend_scheme": scheme, "split": False}]}
    write(f"{out}/first.json", vocab, merges, None, meta("first", False), dec("first"))
    write(f"{out}/split.json", vocab, merges, None, meta("always", True), dec("always"))
    print(f"sp_tokenizer: {len(vocab)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
