"""Oracle side of tests/check_chat_data.sh (system python3 with jinja2).

  chat_data.py gen OUT.jsonl N SEED sys|nosys|think
      N seeded random conversations (user/assistant alternating, ending with
      an answer; `sys`: half of them open with a system message; `think`:
      also answers holding <think>...</think>), mixed scripts, whitespace at
      the ends of contents, newlines, digits, emoji
  chat_data.py specials TOKENIZER_JSON OUT_JSON
      OUT_JSON: TOKENIZER_JSON with the other families' special tokens added
  chat_data.py check TEMPLATE TOKENIZER_JSON JSONL PREFIX WORK TRAIN_ON [CONFIG]
      renders every conversation of JSONL with the Jinja chat template
      (CONFIG's chat_template for llama3 / qwen3: the published files;
      the others as transcribed below from their models'
      tokenizer_config.json), encodes the texts with the Hugging Face
      tokenizers library (node tests/hf_oracle.js encode-list) and compares
      with PREFIX_train.bin + PREFIX_val.bin: the ids of every sample must be
      identical, and the counted tokens (the loss mask) must spell the
      answers the template writes (each answer's content and end-of-turn
      token; a counted run may begin with at most two bytes of the
      separator before the answer that its first token merges with).
"""
import json
import os
import random
import re
import struct
import subprocess
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATES = {
    # meta-llama/Llama-2-7b-chat-hf
    "llama2": "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
    # mistralai/Mistral-7B-Instruct-v0.1
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    # ChatML without a default system message
    "chatml": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    # google/gemma-2b-it
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
    # TinyLlama/TinyLlama-1.1B-Chat-v1.0 (Zephyr's)
    "zephyr": "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
    # ours (configs/chat/zephyr-endoftext.jinja): Zephyr's turns ended by <|endoftext|>
    "zephyr-endoftext": open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "chat",
                                          "zephyr-endoftext.jinja"), encoding="utf-8").read(),
}
SPECIALS = {
    "llama3": ("<|begin_of_text|>", "<|end_of_text|>"), "llama2": ("<s>", "</s>"), "mistral": ("<s>", "</s>"),
    "chatml": ("", "<|im_end|>"), "qwen3": ("", "<|im_end|>"), "gemma": ("<bos>", "<eos>"), "zephyr": ("<s>", "</s>"),
    "zephyr-endoftext": ("", "<|endoftext|>"),
}
# an answer as the template writes it: (regex over the rendered text)
ANSWERS = {
    "llama3": r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n(.*?<\|eot_id\|>)",
    "llama2": r"\[/INST\] (.*? </s>)", "mistral": r"\[/INST\](.*?</s>)",
    "chatml": r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)", "qwen3": r"<\|im_start\|>assistant\n(.*?<\|im_end\|>)",
    "gemma": r"<start_of_turn>model\n(.*?<end_of_turn>)", "zephyr": r"<\|assistant\|>\n(.*?</s>)",
    "zephyr-endoftext": r"<\|assistant\|>\n(.*?<\|endoftext\|>)",
}

WORDS = ["hello", "world", "the", "answer", "is", "42", "café", "naïve", "Straße", "русский", "中文字符", "日本語",
         "한국어", "العربية", "😀", "👍🏽", "x=f(y)+1;", "{\"a\": [1, 2]}", "it's", "don't", "3.14", "1,000", "...",
         "--", "tab\there", "line\nbreak", "two\n\nbreaks", "  spaced  ", "\u00a0nbsp", "ok", "Yes.", "No!", "why?"]


def sentence(r):
    s = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 12)))
    k = r.random()
    if k < 0.15:
        s = "  " + s
    elif k < 0.3:
        s = s + " \n"
    elif k < 0.35:
        s = "\n" + s
    return s


def gen(out, n, seed, kind):
    r = random.Random(seed)
    with open(out, "w", encoding="utf-8") as f:
        for _ in range(n):
            msgs = []
            if kind != "nosys" and r.random() < 0.5:
                msgs.append({"role": "system", "content": sentence(r)})
            for _ in range(r.randint(1, 3)):
                msgs.append({"role": "user", "content": sentence(r)})
                a = sentence(r)
                if kind == "think" and r.random() < 0.4:
                    a = "<think>\n" + sentence(r) + "\n</think>\n\n" + a
                if not a.strip():
                    a = "ok"
                msgs.append({"role": "assistant", "content": a})
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")


def with_specials(tokjson, out):
    """tokjson with the special tokens of the families whose own tokenizer
    we do not have (<s>, </s>, <bos>, <eos>, <start_of_turn>,
    <end_of_turn>, <|user|>, <|assistant|>, <|system|>, <|endoftext|>) added after its
    vocabulary, as their tokenizer.json files declare them."""
    j = json.load(open(tokjson, encoding="utf-8"))
    nxt = max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"])) + 1
    have = {a["content"] for a in j["added_tokens"]}
    for c in ["<s>", "</s>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|assistant|>",
              "<|system|>", "<|endoftext|>"]:
        if c not in have:
            j["added_tokens"].append({"id": nxt, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                                      "normalized": False, "special": True})
            nxt += 1
    json.dump(j, open(out, "w", encoding="utf-8"), ensure_ascii=False)


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def token_bytes(tokjson):
    j = json.load(open(tokjson, encoding="utf-8"))
    if j["model"].get("byte_fallback"):  # SentencePiece style: U+2581 is a space, <0xAB> a byte
        out = {i: bytes([int(t[3:5], 16)]) if re.fullmatch(r"<0x[0-9A-F]{2}>", t) else t.replace("\u2581", " ").encode()
               for t, i in j["model"]["vocab"].items()}
    else:
        bd = byte_decoder()
        out = {i: bytes(bd[ch] for ch in t) for t, i in j["model"]["vocab"].items()}
    for a in j.get("added_tokens", []):
        out[a["id"]] = a["content"].encode()
    return out


def read_shard(path):
    raw = open(path, "rb").read()
    h = struct.unpack("<256i", raw[:1024])
    assert h[1] in (101, 107), f"{path}: version {h[1]}, expected an extended shard"
    n, T, w = h[2], h[4], 2 if h[1] == 101 else 4
    toks = struct.unpack(f"<{n}{'H' if w == 2 else 'I'}", raw[1024:1024 + w * n])
    flags = raw[1024 + w * n:]
    assert len(flags) == n and (n - 1) % T == 0
    samples = []
    for s in range((n - 1) // T):  # the documents of each window (several when packed), padding left out
        assert flags[s * T] & 2, f"{path}: window {s} does not start a document"
        for t in range(s * T, (s + 1) * T):
            if flags[t] & 4:
                continue
            if flags[t] & 2:
                assert not flags[t] & 1, f"{path}: token {t} starts a document and is counted"
                samples.append(([], []))
            samples[-1][0].append(toks[t])
            samples[-1][1].append(bool(flags[t] & 1))
    return samples


def check(tpl, tokjson, jsonl, prefix, work, train_on, config=None):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(m):
        raise Exception(m)
    env.globals["raise_exception"] = raise_exception
    src = json.load(open(config, encoding="utf-8"))["chat_template"] if config else TEMPLATES[tpl]
    # The first Llama 3 Instruct template wrote the generation header at the
    # end unconditionally; Meta's later one (and our renderer) only with
    # add_generation_prompt, which training data leaves off.
    gen = "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    if tpl == "llama3" and "add_generation_prompt" not in src and src.endswith(gen):
        src = src[:-len(gen)] + "{% if add_generation_prompt %}" + gen + "{% endif %}"
    t = env.from_string(src)
    bos, eos = SPECIALS[tpl]
    convs = [json.loads(l)["messages"] for l in open(jsonl, encoding="utf-8") if l.strip()]
    texts = [t.render(messages=c, bos_token=bos, eos_token=eos, add_generation_prompt=False) for c in convs]
    json.dump(texts, open(f"{work}/texts.json", "w"))
    subprocess.run(["node", "tests/hf_oracle.js", "deps", "encode-list", tokjson, f"{work}/texts.json",
                    f"{work}/ids.json"], check=True)
    ref = json.load(open(f"{work}/ids.json"))
    got = read_shard(prefix + "_train.bin") + read_shard(prefix + "_val.bin")
    assert len(got) == len(ref), f"{tpl}: {len(got)} samples in the shards, {len(ref)} conversations"
    tb = token_bytes(tokjson)
    ntok = nrun = 0
    extras = set()
    for k, ((ids, cnt), want, text) in enumerate(zip(got, ref, texts)):
        if ids != want:
            i = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
            raise AssertionError(f"{tpl}: sample {k} differs at token {i}: ours {ids[i:i + 5]}, reference "
                                 f"{want[i:i + 5]} (of {len(ids)} / {len(want)} tokens); text {text[:200]!r}")
        ntok += len(ids)
        runs, cur = [], None
        for i, (tid, c) in enumerate(zip(ids, cnt)):
            if c:
                cur = (cur or b"") + tb[tid]
            elif cur is not None:
                runs.append(cur)
                cur = None
        if cur is not None:
            runs.append(cur)
        answers = [a.encode() for a in re.findall(ANSWERS[tpl], text, re.S)]
        if train_on == "all":
            assert not cnt[0] and all(cnt[1:]), f"{tpl}: sample {k}: --train-on all counts {sum(cnt)} of {len(cnt)}"
            continue
        if train_on == "last":
            answers = answers[-1:]
        assert len(runs) == len(answers), f"{tpl}: sample {k}: {len(runs)} counted runs, {len(answers)} answers: " \
            f"{runs!r} vs {answers!r}"
        for run, a in zip(runs, answers):
            extra = run[:len(run) - len(a)]
            assert run.endswith(a) and len(extra) <= 2 and not re.search(rb"\w", extra), \
                f"{tpl}: sample {k}: counted {run!r}, the answer is {a!r}"
            extras.add(extra)
            nrun += 1
    print(f"{tpl} ({train_on}): {len(got)} conversations, {ntok} tokens identical to the reference; "
          f"{nrun} answers masked exactly (leading separator bytes in a merged first token: "
          f"{sorted(extras) if extras else 'none'})")


if __name__ == "__main__":
    if sys.argv[1] == "specials":
        with_specials(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        check(*sys.argv[2:])
