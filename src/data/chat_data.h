/* Instruction and chat data: JSONL files, one sample a line, turned into
 * windows of tokens with a loss mask (the extended shards of shard.h).
 *
 * A line is one JSON object of one of three shapes:
 *   {"text": S}                           every token trained
 *   {"prompt": S, "completion": S}        the completion and the EOS trained
 *   {"messages": [{"role": R, "content": S}, ...]}   R system|user|assistant
 *                                         (OpenAI style), rendered with a
 *                                         chat template (chat_template.h);
 *                                         the answers and their end-of-turn
 *                                         token trained
 * Other members are ignored; blank lines are skipped. text and
 * prompt/completion samples are BOS (when the model has one) + text + EOS.
 *
 * Which tokens count ({train-on}): assistant (default: the answers, or the
 * completion), all (every token but a sample's first), last (the last
 * answer only). A token counts when any of its bytes lies in a trained
 * range; tokens are those of the whole rendered conversation (identical to
 * the tokenizer's encoding of the text a Jinja template renders), whose
 * bytes are found by walking the token texts along the rendered text (a
 * SentencePiece tokenizer's prepended space stands for no byte); where the
 * tokens do not spell the text (a normalising tokenizer: NFC), the answers
 * and the text between them are encoded one piece at a time instead.
 *
 * Each sample becomes one window of T tokens ({seq-len}): its tokens, then
 * padding (never counted). With {packing}, samples go one after the other
 * into the open window while they fit (the next one opens a new window; the
 * rest of the old one is padding); each sample's first token is marked as a
 * document start, so attention stays inside it and positions restart
 * there. A sample longer than T is dropped, truncated to T or an error
 * ({overlong}). Every error is one line naming the file and the line.
 * mt_chat_data_finish closes the last window. */
#ifndef MT_DATA_CHAT_DATA_H
#define MT_DATA_CHAT_DATA_H
#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"

typedef enum { MT_TRAIN_ON_ASSISTANT = 0, MT_TRAIN_ON_ALL, MT_TRAIN_ON_LAST } mt_train_on;
typedef enum { MT_OVERLONG_DROP = 0, MT_OVERLONG_TRUNCATE, MT_OVERLONG_ERROR } mt_overlong;

int mt_train_on_parse(const char *s, mt_train_on *out, mt_error *err);
int mt_overlong_parse(const char *s, mt_overlong *out, mt_error *err);

/* What a tokenizer_config.json says (every field optional). */
typedef struct {
    char *chat_template; /* malloc'd, NULL when absent */
    char bos[128], eos[128]; /* token texts, "" when absent/null */
    int add_bos;             /* add_bos_token (1 when absent but a bos_token is named) */
} mt_tokenizer_config;
/* Reads path; -1 with a one-line error when it is unreadable or not JSON
 * (a missing file is the caller's business). */
int mt_tokenizer_config_read(const char *path, mt_tokenizer_config *c, mt_error *err);
void mt_tokenizer_config_free(mt_tokenizer_config *c);

typedef struct {
    mt_tokenizer *tk;
    int has_template;        /* messages samples need a template */
    mt_chat_template tpl;
    int32_t bos, eos;        /* ids for text and prompt/completion samples, -1 none */
    int32_t pad;             /* the id padding holds (never a target) */
    int eot_known;           /* eot_piecewise set (0 on entry: found at the first conversation) */
    int32_t eot_piecewise;   /* mt_chat_eot_piecewise_id of tk and tpl */
    mt_train_on train_on;
    int seq_len;
    mt_overlong overlong;
    int packing;             /* several samples a window (first fit in file order) */
    /* out: samples as windows of seq_len tokens */
    mt_tokens tokens;
    uint8_t *flags;          /* MT_TOK_* per token */
    size_t flags_cap;
    int64_t samples, dropped, truncated, piecewise, lines;
    int64_t windows;         /* windows written (== samples without packing) */
    size_t win_used;         /* packing: tokens in the open window */
    int64_t sample_tokens;   /* non-padding tokens */
    int64_t counted;         /* counted targets */
    int64_t bytes;
    /* scratch */
    mt_bytes text;
    mt_tokens tmp;
    mt_chat_msg *msgs;
    size_t msgs_cap;
} mt_chat_data;

/* The id of the single token whose text is s (added tokens such as
 * "<|eot_id|>"); -1 when s does not encode to exactly one token. */
int32_t mt_tokenizer_single_id(mt_tokenizer *tk, const char *s);

/* Template t's end-of-turn token where the tokenizer spells its text in
 * pieces but has a token of exactly those bytes: GPT-2's <|endoftext|>
 * (its end-of-text token; gpt-3-encoder encodes the text as 6 tokens).
 * A rendered conversation's end-of-turn texts are that token, as llama.cpp
 * parses them; -1 when the text is one token already (an hf added token)
 * or there is none. */
int32_t mt_chat_eot_piecewise_id(mt_tokenizer *tk, mt_chat_template t);
/* Encodes rendered conversation text as mt_tokenizer_encode_append does,
 * each occurrence of t's end-of-turn text becoming eot_id when eot_id >= 0
 * (mt_chat_eot_piecewise_id). */
int mt_chat_encode_append(mt_tokenizer *tk, mt_chat_template t, int32_t eot_id, const unsigned char *text, size_t len,
                          mt_tokens *out, mt_error *err);

/* Appends the samples of a JSONL file's contents (path names it in
 * errors). */
int mt_chat_data_add_jsonl(mt_chat_data *d, const char *path, const char *text, size_t len, mt_error *err);
/* Pads the open window of packing (no-op otherwise). */
void mt_chat_data_finish(mt_chat_data *d);
void mt_chat_data_free(mt_chat_data *d);

#endif
