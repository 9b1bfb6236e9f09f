/* The tokenizer files of a Hugging Face model directory, so that other
 * tools (transformers' AutoTokenizer, vLLM, llama.cpp's converter) take an
 * exported directory whole. spec names the tokenizer as data/tokenizer.h
 * opens it:
 *  - "hf:PATH/tokenizer.json": tokenizer.json copied as is;
 *    tokenizer_config.json (PreTrainedTokenizerFast) with the bos_token,
 *    eos_token and chat_template of the tokenizer_config.json beside PATH
 *    when there is one (else <|begin_of_text|> if present; EOS
 *    <|end_of_text|> or <|endoftext|>);
 *  - "gpt2": vocab.json and merges.txt (the encoder.json and vocab.bpe of
 *    vocab_dir or the default GPT-2 vocabulary, copied), tokenizer_config.json
 *    (GPT2Tokenizer, <|endoftext|> as BOS, EOS and UNK);
 *  - "byte": a tokenizer.json whose 256 tokens are the bytes (byte-level
 *    BPE with no merges: any text encodes to its bytes, as meshtrain's byte
 *    tokenizer does), tokenizer_config.json without special tokens;
 * and generation_config.json with the BOS and EOS ids (those known).
 * chat_template (non-NULL) replaces the template found. model_max_length is
 * the model's context. Every file is written whole or not at all. */
#ifndef MT_INTEROP_HF_DIR_TOKENIZER_H
#define MT_INTEROP_HF_DIR_TOKENIZER_H
#include "core/error.h"

int mt_hf_dir_write_tokenizer(const char *dir, const char *spec, const char *vocab_dir, const char *chat_template,
                              int model_max_length, mt_error *err);

#endif
