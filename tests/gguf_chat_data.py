"""The chat test's data (tests/check_gguf.sh): a byte-level tokenizer.json
of the 256 bytes plus the ChatML tokens <|im_start|> 256, <|im_end|> 257,
<|endoftext|> 258 (Qwen2's pre-tokenizer; no merges), its
tokenizer_config.json (a ChatML chat template, EOS <|im_end|>), and a corpus
of ChatML conversations (fixed questions and answers, shuffled).

  gguf_chat_data.py QWEN_TOKENIZER_JSON OUT_DIR
"""
import json
import random
import sys

src, out = sys.argv[1], sys.argv[2]
q = json.load(open(src))
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b)
        cs.append(256 + n)
        n += 1
byte_char = {b: chr(c) for b, c in zip(bs, cs)}
specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, s in enumerate(specials)],
    "normalizer": None, "pre_tokenizer": q["pre_tokenizer"], "post_processor": None, "decoder": q["decoder"],
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
              "vocab": {byte_char[b]: b for b in range(256)}, "merges": []},
}
json.dump(tok, open(f"{out}/tokenizer.json", "w"), ensure_ascii=False)
template = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
            "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
json.dump({"chat_template": template, "eos_token": "<|im_end|>", "bos_token": None},
          open(f"{out}/tokenizer_config.json", "w"))
pairs = [("What color is the sky?", "Blue."), ("Name a fruit.", "A pear."), ("How many legs has a cat?", "Four."),
         ("Say hello.", "Hello there!")]
rng = random.Random(3)
with open(f"{out}/chats.txt", "w") as f:
    for _ in range(600):
        u, a = rng.choice(pairs)
        f.write(f"<|im_start|>user\n{u}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n")
