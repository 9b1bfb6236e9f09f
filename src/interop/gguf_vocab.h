/* A tokenizer as llama.cpp's GGUF metadata (tokenizer.ggml.*): model
 * "gpt2" (byte-level BPE), the token strings in GPT-2's byte alphabet, their
 * types (1 normal, 3 control, 4 user-defined, 5 unused), the merges "a b" in
 * rank order, the pre-tokenizer by the name llama.cpp knows it, BOS/EOS and
 * the chat template. Which tokenizer is spec's name as data/tokenizer.h
 * opens it:
 *  - "byte": 256 tokens, token i is byte i, no merges, pre-tokenizer
 *    "gpt-2" (with no merges BPE keeps every byte a token, so llama.cpp's
 *    encoding is the byte string whatever the pre-split); no EOS of its own;
 *  - "gpt2": encoder.json + vocab.bpe from vocab_dir (or the default GPT-2
 *    vocabulary), pre-tokenizer "gpt-2", BOS = EOS = <|endoftext|>;
 *  - "hf:PATH/tokenizer.json": its vocabulary, added tokens (special:
 *    control, else user-defined) and merges; the pre-tokenizer named by its
 *    Split regex: Llama 3's ("llama-bpe"), Qwen2's ("qwen2"), or GPT-2's
 *    (ByteLevel with use_regex: "gpt-2"); any other regex cannot be
 *    represented and is refused. BOS <|begin_of_text|> if present; EOS the
 *    eos_token of tokenizer_config.json beside it, else <|end_of_text|>,
 *    else <|endoftext|>; chat_template from that file too.
 *    A SentencePiece-style tokenizer.json (BPE with byte_fallback: Llama 2,
 *    Mistral) becomes model "llama": the tokens as written (U+2581 for the
 *    space), scores (minus the rank of each token's first merge: llama.cpp
 *    joins the adjacent pair making the highest-scored token), types (6 for
 *    <0xXX> byte tokens, 2 for the unknown token), add_space_prefix from the
 *    Prepend normalizer or Metaspace's prepend_scheme, BOS <s>, EOS </s>
 *    (or tokenizer_config.json's). Refused when llama.cpp would encode
 *    otherwise: a token that splits into two tokens no merge joins,
 *    Metaspace prepend_scheme "first", a splitting Metaspace with tokens
 *    holding an inner space, byte tokens missing.
 * Ids the tokenizer does not use up to the model's vocab_size become
 * "[PAD<id>]" of type unused (as llama.cpp's converter writes them). BOS is
 * never added by llama.cpp (add_bos_token false): meshtrain trains without
 * (a template that wants one writes it, as Llama 2's does).
 * chat_template (if non-NULL) overrides the one found. */
#ifndef MT_INTEROP_GGUF_VOCAB_H
#define MT_INTEROP_GGUF_VOCAB_H
#include "interop/gguf.h"

/* GPT-2's byte alphabet (byte-level BPE): byte b as the UTF-8 of its code
 * point (b itself when printable, else 256 + its rank among the others);
 * returns the length, 1 or 2. */
size_t mt_bytelevel_char(unsigned b, char out[2]);

int mt_gguf_add_vocab(mt_gguf_writer *w, const char *spec, const char *vocab_dir, int vocab_size,
                      const char *chat_template, mt_error *err);

#endif
