/* Chat templates: a conversation (system / user / assistant messages)
 * rendered as the text a model family was fine-tuned on, with the byte
 * ranges of the assistant answers (the part the loss mask trains on).
 *
 * Built-in renderers, each producing exactly what the family's Jinja
 * chat_template (tokenizer_config.json, rendered by transformers with
 * trim_blocks and lstrip_blocks, no generation prompt) produces:
 *   llama3   Llama 3 / 3.x Instruct without tools or dates:
 *            <|begin_of_text|> then per message <|start_header_id|>ROLE
 *            <|end_header_id|>\n\n CONTENT(trimmed) <|eot_id|>
 *   llama2   Llama 2 chat: <s>[INST] <<SYS>>\nSYS\n<</SYS>>\n\nUSER [/INST]
 *            ANSWER </s><s>[INST] ... (strict user/assistant alternation)
 *   mistral  Mistral 7B Instruct v0.1: <s>[INST] USER [/INST]ANSWER</s>...
 *            (no system role; strict alternation)
 *   chatml   ChatML: <|im_start|>ROLE\nCONTENT<|im_end|>\n, no BOS, no
 *            default system message
 *   qwen3    Qwen3's ChatML: as chatml, and the assistant turns after the
 *            last user message carry a <think>\n...\n</think>\n\n block
 *            (empty when the answer has none; a '<think>...</think>' in an
 *            answer is taken apart as the template does)
 *   gemma    Gemma 1/2: <bos> then <start_of_turn>user|model\n
 *            CONTENT(trimmed)<end_of_turn>\n (no system role; alternation)
 *   zephyr   Zephyr / TinyLlama chat: <|user|>\nCONTENT</s>\n (also
 *            <|system|>, <|assistant|>)
 *   zephyr-endoftext  the same with <|endoftext|> ending each turn
 *            (StableLM Zephyr's; llama.cpp's built-in "zephyr"): with GPT-2's
 *            tokenizer the end of turn is its one end-of-text token, which
 *            llama.cpp stops at (configs/chat/zephyr-endoftext.jinja)
 * An answer's range is its content and the end-of-turn token that follows
 * (<|eot_id|>, </s>, <|im_end|>, <end_of_turn>, <|endoftext|>), so training on it teaches
 * the model to stop. */
#ifndef MT_DATA_CHAT_TEMPLATE_H
#define MT_DATA_CHAT_TEMPLATE_H
#include <stddef.h>
#include "core/error.h"
#include "data/tokenizer.h"

typedef enum { MT_ROLE_SYSTEM = 0, MT_ROLE_USER, MT_ROLE_ASSISTANT } mt_chat_role;

typedef struct {
    mt_chat_role role;
    const char *content; /* UTF-8, content_len bytes (may hold NULs) */
    size_t content_len;
} mt_chat_msg;

/* An assistant answer's bytes [begin, end) in the rendered text. */
typedef struct {
    size_t begin, end;
} mt_chat_span;

typedef enum {
    MT_CHAT_LLAMA3 = 0,
    MT_CHAT_LLAMA2,
    MT_CHAT_MISTRAL,
    MT_CHAT_CHATML,
    MT_CHAT_QWEN3,
    MT_CHAT_GEMMA,
    MT_CHAT_ZEPHYR,
    MT_CHAT_ZEPHYR_ENDOFTEXT,
    MT_CHAT_COUNT
} mt_chat_template;

/* "llama3", ... ; and all of them as "llama3|llama2|...". */
const char *mt_chat_template_name(mt_chat_template t);
const char *mt_chat_template_names(void);
/* By name: 0, or -1 with an error listing the names. */
int mt_chat_template_parse(const char *name, mt_chat_template *out, mt_error *err);
/* The built-in renderer of a Jinja chat_template (tokenizer_config.json's),
 * recognised by the markers each family's template writes (llama3:
 * <|start_header_id|> and <|eot_id|>; llama2: [INST] and <<SYS>>; mistral:
 * [INST] alone; qwen3: <|im_start|> and <think>; chatml: <|im_start|>;
 * gemma: <start_of_turn>; zephyr-endoftext: <|user|> and <|endoftext|>;
 * zephyr: <|user|> and <|assistant|>). Templates
 * that write more than the renderer (Llama 3.1's date and tools header,
 * Qwen2's default system message) are refused. 0, or -1 with an error
 * saying why and how to name one ({chat-template}). */
int mt_chat_template_match(const char *jinja, size_t len, mt_chat_template *out, mt_error *err);
/* The text of the end-of-turn token that closes an answer ("<|eot_id|>"). */
const char *mt_chat_template_eot(mt_chat_template t);

/* What the template writes after a conversation for the model to answer
 * (add_generation_prompt): "<|start_header_id|>assistant<|end_header_id|>\n\n"
 * (llama3), "<|im_start|>assistant\n" (chatml, qwen3), "<start_of_turn>model\n"
 * (gemma), "<|assistant|>\n" (zephyr, zephyr-endoftext), "" (llama2, mistral: the answer
 * follows [/INST]). */
const char *mt_chat_template_generation_prompt(mt_chat_template t);

/* Renders msgs[0..n) into *out (appended) and the answers' ranges into
 * spans (room for n; *n_spans set), offsets relative to out's length on
 * entry. -1 with a one-line error (without a file name: the caller adds
 * it) when the conversation breaks the template's rules: a system message
 * that is not first or that the template has no role for, roles that do
 * not alternate where the template requires it. */
int mt_chat_render(mt_chat_template t, const mt_chat_msg *msgs, int n, mt_bytes *out, mt_chat_span *spans,
                   int *n_spans, mt_error *err);

#endif
