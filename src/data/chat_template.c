/* Chat templates: see chat_template.h. Each renderer is a transcription of
 * its family's Jinja template; tests/check_chat_data.sh renders the same
 * conversations with Jinja (the templates as published) and compares. */
#include "data/chat_template.h"
#include <string.h>

static const char *const NAMES[MT_CHAT_COUNT] = {"llama3", "llama2", "mistral", "chatml", "qwen3",
                                                 "gemma",  "zephyr", "zephyr-endoftext"};
static const char *const EOTS[MT_CHAT_COUNT] = {"<|eot_id|>",    "</s>", "</s>",         "<|im_end|>", "<|im_end|>",
                                                "<end_of_turn>", "</s>", "<|endoftext|>"};

static const char *const GEN[MT_CHAT_COUNT] = {"<|start_header_id|>assistant<|end_header_id|>\n\n", "", "",
                                               "<|im_start|>assistant\n", "<|im_start|>assistant\n",
                                               "<start_of_turn>model\n", "<|assistant|>\n", "<|assistant|>\n"};

const char *mt_chat_template_generation_prompt(mt_chat_template t) { return (unsigned)t < MT_CHAT_COUNT ? GEN[t] : ""; }

const char *mt_chat_template_name(mt_chat_template t) { return (unsigned)t < MT_CHAT_COUNT ? NAMES[t] : "?"; }
const char *mt_chat_template_names(void) { return "llama3|llama2|mistral|chatml|qwen3|gemma|zephyr|zephyr-endoftext"; }
const char *mt_chat_template_eot(mt_chat_template t) { return (unsigned)t < MT_CHAT_COUNT ? EOTS[t] : ""; }

int mt_chat_template_parse(const char *name, mt_chat_template *out, mt_error *err) {
    for (int i = 0; i < MT_CHAT_COUNT; i++)
        if (!strcmp(name, NAMES[i])) {
            *out = (mt_chat_template)i;
            return 0;
        }
    return mt_errorf(err, "unknown {chat-template} '%s' (built-in renderers: %s)", name, mt_chat_template_names());
}

static int has(const char *s, size_t n, const char *what) { return memmem(s, n, what, strlen(what)) != NULL; }

int mt_chat_template_match(const char *j, size_t n, mt_chat_template *out, mt_error *err) {
    const char *why = NULL;
    int t = -1;
    if (has(j, n, "<|start_header_id|>") && has(j, n, "<|eot_id|>")) {
        if (has(j, n, "Cutting Knowledge Date") || has(j, n, "tools_in_user_message"))
            why = "it is Llama 3.1+'s, which writes a date and tools header the llama3 renderer does not";
        else t = MT_CHAT_LLAMA3;
    } else if (has(j, n, "<|im_start|>")) {
        if (has(j, n, "<think>")) t = MT_CHAT_QWEN3;
        else if (has(j, n, "You are") || has(j, n, "tools"))
            why = "it is a ChatML variant with a default system message or tools (Qwen2/2.5), which the chatml "
                  "renderer does not write";
        else t = MT_CHAT_CHATML;
    } else if (has(j, n, "[INST]")) {
        t = has(j, n, "<<SYS>>") ? MT_CHAT_LLAMA2 : MT_CHAT_MISTRAL;
        if (t == MT_CHAT_MISTRAL && (has(j, n, "[SYSTEM_PROMPT]") || has(j, n, "[AVAILABLE_TOOLS]"))) {
            t = -1;
            why = "it is a later Mistral template (system prompt or tools markers) the mistral renderer does not write";
        }
    } else if (has(j, n, "<start_of_turn>"))
        t = MT_CHAT_GEMMA;
    else if (has(j, n, "<|user|>") && has(j, n, "<|endoftext|>"))
        t = MT_CHAT_ZEPHYR_ENDOFTEXT;
    else if (has(j, n, "<|user|>") && has(j, n, "<|assistant|>"))
        t = MT_CHAT_ZEPHYR;
    if (t >= 0) {
        *out = (mt_chat_template)t;
        return 0;
    }
    return mt_errorf(err,
                     "the model's chat_template (tokenizer_config.json) matches no built-in renderer%s%s; name the "
                     "renderer to use with {chat-template} %s",
                     why ? ": " : "", why ? why : "", mt_chat_template_names());
}

/* ---- string helpers with Python's semantics (Jinja's filters call str methods) ---- */

/* Length of the whitespace character (Python's str.isspace) at s[0..n), 0 if none. */
static size_t space_at(const unsigned char *s, size_t n) {
    if (!n) return 0;
    unsigned c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F)) return 1;
    if (c == 0xC2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
    if (n >= 3 && c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;                /* U+1680 */
    if (n >= 3 && c == 0xE2 && s[1] == 0x80 && (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
        return 3;                                                                    /* U+2000-200A, 2028, 2029, 202F */
    if (n >= 3 && c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3;                /* U+205F */
    if (n >= 3 && c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3;                /* U+3000 */
    return 0;
}

/* The whitespace character ending at s[n), its length or 0. */
static size_t space_before(const unsigned char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++)
        if (space_at(s + n - k, k) == k) return k;
    return 0;
}

typedef struct {
    const char *p;
    size_t n;
} str;

static str strip(str s) { /* str.strip() */
    const unsigned char *u = (const unsigned char *)s.p;
    size_t a = 0, b = s.n, k;
    while (a < b && (k = space_at(u + a, b - a))) a += k;
    while (b > a && (k = space_before(u + a, b - a))) b -= k;
    return (str){s.p + a, b - a};
}
static str lstrip_nl(str s) {
    while (s.n && s.p[0] == '\n') s.p++, s.n--;
    return s;
}
static str rstrip_nl(str s) {
    while (s.n && s.p[s.n - 1] == '\n') s.n--;
    return s;
}
static const char *find_last(str s, const char *w) {
    size_t wl = strlen(w);
    for (size_t i = s.n >= wl ? s.n - wl + 1 : 0; i-- > 0;)
        if (!memcmp(s.p + i, w, wl)) return s.p + i;
    return NULL;
}

static void put(mt_bytes *o, const char *s) { mt_bytes_append(o, s, strlen(s)); }
static void puts_(mt_bytes *o, str s) { mt_bytes_append(o, s.p, s.n); }

static const char *role_name(mt_chat_role r) {
    return r == MT_ROLE_SYSTEM ? "system" : r == MT_ROLE_USER ? "user" : "assistant";
}

/* user, assistant, user, ... from msgs[first] */
static int check_alternation(const mt_chat_msg *m, int first, int n, mt_chat_template t, mt_error *err) {
    for (int i = first; i < n; i++) {
        mt_chat_role want = (i - first) % 2 == 0 ? MT_ROLE_USER : MT_ROLE_ASSISTANT;
        if (m[i].role == MT_ROLE_SYSTEM)
            return mt_errorf(err, "messages[%d] is a system message, which the %s template takes %s", i, NAMES[t],
                             t == MT_CHAT_LLAMA2 ? "only as the first message" : "nowhere (it has no system role)");
        if (m[i].role != want)
            return mt_errorf(err, "messages[%d] is %s where the %s template needs %s: roles must alternate user, "
                             "assistant, user, ...%s", i, role_name(m[i].role), NAMES[t], role_name(want),
                             first ? " after the system message" : "");
    }
    return 0;
}

int mt_chat_render(mt_chat_template t, const mt_chat_msg *m, int n, mt_bytes *o, mt_chat_span *spans, int *n_spans,
                   mt_error *err) {
    size_t base = o->len;
    int ns = 0;
#define BEGIN_SPAN() (spans[ns].begin = o->len - base)
#define END_SPAN() (spans[ns].end = o->len - base, ns++)
    if (t == MT_CHAT_LLAMA2 || t == MT_CHAT_MISTRAL || t == MT_CHAT_GEMMA) {
        int first = t == MT_CHAT_LLAMA2 && n > 0 && m[0].role == MT_ROLE_SYSTEM;
        if (check_alternation(m, first, n, t, err)) return -1;
    } /* llama3, chatml, qwen3, zephyr(-endoftext): any order, as their templates */
    switch (t) {
    case MT_CHAT_LLAMA3:
        put(o, "<|begin_of_text|>");
        for (int i = 0; i < n; i++) {
            put(o, "<|start_header_id|>");
            put(o, role_name(m[i].role));
            put(o, "<|end_header_id|>\n\n");
            if (m[i].role == MT_ROLE_ASSISTANT) BEGIN_SPAN();
            puts_(o, strip((str){m[i].content, m[i].content_len}));
            put(o, "<|eot_id|>");
            if (m[i].role == MT_ROLE_ASSISTANT) END_SPAN();
        }
        break;
    case MT_CHAT_LLAMA2: {
        int first = n > 0 && m[0].role == MT_ROLE_SYSTEM;
        for (int i = first; i < n; i++) {
            str c = {m[i].content, m[i].content_len};
            if (m[i].role == MT_ROLE_USER) {
                put(o, "<s>[INST] ");
                if (i == 1 && first) { /* '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content, stripped whole */
                    mt_bytes tmp = {0};
                    put(&tmp, "<<SYS>>\n");
                    mt_bytes_append(&tmp, m[0].content, m[0].content_len);
                    put(&tmp, "\n<</SYS>>\n\n");
                    mt_bytes_append(&tmp, c.p, c.n);
                    puts_(o, strip((str){(const char *)tmp.data, tmp.len}));
                    mt_bytes_free(&tmp);
                } else
                    puts_(o, strip(c));
                put(o, " [/INST]");
            } else {
                put(o, " ");
                BEGIN_SPAN();
                puts_(o, strip(c));
                put(o, " </s>");
                END_SPAN();
            }
        }
        break;
    }
    case MT_CHAT_MISTRAL:
        put(o, "<s>");
        for (int i = 0; i < n; i++) {
            str c = {m[i].content, m[i].content_len};
            if (m[i].role == MT_ROLE_USER) {
                put(o, "[INST] ");
                puts_(o, c);
                put(o, " [/INST]");
            } else {
                BEGIN_SPAN();
                puts_(o, c);
                put(o, "</s>");
                END_SPAN();
            }
        }
        break;
    case MT_CHAT_CHATML:
        for (int i = 0; i < n; i++) {
            put(o, "<|im_start|>");
            put(o, role_name(m[i].role));
            put(o, "\n");
            if (m[i].role == MT_ROLE_ASSISTANT) BEGIN_SPAN();
            mt_bytes_append(o, m[i].content, m[i].content_len);
            put(o, "<|im_end|>");
            if (m[i].role == MT_ROLE_ASSISTANT) END_SPAN();
            put(o, "\n");
        }
        break;
    case MT_CHAT_QWEN3: {
        int last_query = n - 1;
        for (int i = n - 1; i >= 0; i--) {
            str c = {m[i].content, m[i].content_len};
            int tool_resp = c.n >= 15 && !memcmp(c.p, "<tool_response>", 15) && c.n >= 16 &&
                            !memcmp(c.p + c.n - 16, "</tool_response>", 16);
            if (m[i].role == MT_ROLE_USER && !tool_resp) {
                last_query = i;
                break;
            }
        }
        for (int i = 0; i < n; i++) {
            str c = {m[i].content, m[i].content_len};
            if (m[i].role != MT_ROLE_ASSISTANT) {
                put(o, "<|im_start|>");
                put(o, role_name(m[i].role));
                put(o, "\n");
                puts_(o, c);
                put(o, "<|im_end|>\n");
                continue;
            }
            str content = c, reasoning = {"", 0};
            const char *end_think = memmem(c.p, c.n, "</think>", 8);
            if (end_think) {
                const char *last = find_last(c, "</think>");
                content = lstrip_nl((str){last + 8, (size_t)(c.p + c.n - (last + 8))});
                str before = rstrip_nl((str){c.p, (size_t)(end_think - c.p)});
                const char *open = find_last(before, "<think>");
                reasoning = open ? (str){open + 7, (size_t)(before.p + before.n - (open + 7))} : before;
                reasoning = lstrip_nl(reasoning);
            }
            put(o, "<|im_start|>assistant\n");
            BEGIN_SPAN();
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                put(o, "<think>\n");
                puts_(o, rstrip_nl(lstrip_nl(reasoning)));
                put(o, "\n</think>\n\n");
                puts_(o, lstrip_nl(content));
            } else
                puts_(o, content);
            put(o, "<|im_end|>");
            END_SPAN();
            put(o, "\n");
        }
        break;
    }
    case MT_CHAT_GEMMA:
        put(o, "<bos>");
        for (int i = 0; i < n; i++) {
            put(o, m[i].role == MT_ROLE_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
            if (m[i].role == MT_ROLE_ASSISTANT) BEGIN_SPAN();
            puts_(o, strip((str){m[i].content, m[i].content_len}));
            put(o, "<end_of_turn>");
            if (m[i].role == MT_ROLE_ASSISTANT) END_SPAN();
            put(o, "\n");
        }
        break;
    case MT_CHAT_ZEPHYR:
    case MT_CHAT_ZEPHYR_ENDOFTEXT:
        for (int i = 0; i < n; i++) {
            put(o, m[i].role == MT_ROLE_USER ? "<|user|>\n" : m[i].role == MT_ROLE_SYSTEM ? "<|system|>\n" : "<|assistant|>\n");
            if (m[i].role == MT_ROLE_ASSISTANT) BEGIN_SPAN();
            mt_bytes_append(o, m[i].content, m[i].content_len);
            put(o, EOTS[t]);
            if (m[i].role == MT_ROLE_ASSISTANT) END_SPAN();
            put(o, "\n");
        }
        break;
    default:
        return mt_errorf(err, "unknown chat template %d", (int)t);
    }
#undef BEGIN_SPAN
#undef END_SPAN
    *n_spans = ns;
    return 0;
}
