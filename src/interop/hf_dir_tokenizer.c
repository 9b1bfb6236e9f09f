#include "interop/hf_dir_tokenizer.h"
#include "interop/gguf_vocab.h"
#include "core/fileio.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_FILE_LIMIT ((size_t)1 << 30)

static char *dup_n(const char *s, size_t n) {
    char *d = mt_xmalloc(n + 1, "tokenizer string");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
static char *dup(const char *s) { return dup_n(s, strlen(s)); }

static int write_file(const char *dir, const char *name, const char *data, size_t len, mt_error *err) {
    char *path = mt_path_join(dir, name), *tmp = NULL;
    FILE *f = mt_fopen_temp(path, &tmp, err);
    int rc = f ? mt_fcommit_temp(f, tmp, path, fwrite(data, 1, len, f) != len, err) : -1;
    free(path);
    return rc;
}

static int copy_file(const char *src, const char *dir, const char *name, mt_error *err) {
    char *data = NULL;
    size_t len = 0;
    if (mt_read_file(src, TOKENIZER_FILE_LIMIT, &data, &len, err)) return -1;
    int rc = write_file(dir, name, data, len, err);
    free(data);
    return rc;
}

/* The id of the token whose text is s (an added token such as <|im_end|>),
 * or -1. */
static int32_t token_id(mt_tokenizer *tk, const char *s) {
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    if (!s || mt_tokenizer_encode(tk, (const unsigned char *)s, strlen(s), &ids, &n, NULL)) return -1;
    const unsigned char *b = n == 1 ? mt_tokenizer_token_bytes(tk, ids[0], &len) : NULL;
    int32_t id = b && len == strlen(s) && !memcmp(b, s, len) ? ids[0] : -1;
    free(ids);
    return id;
}

static const char *token_text(const mt_json *j) {
    if (!j) return NULL;
    if (j->type == MT_JSON_STRING) return j->str;
    const mt_json *c = j->type == MT_JSON_OBJECT ? mt_json_get(j, "content") : NULL;
    return c && c->type == MT_JSON_STRING ? c->str : NULL;
}

/* A tokenizer.json of the 256 bytes: byte-level BPE without merges. */
static void byte_tokenizer_json(mt_json_writer *w) {
    mt_jw_begin_object(w);
    mt_jw_key(w, "version"); mt_jw_string(w, "1.0");
    mt_jw_key(w, "truncation"); mt_jw_null(w);
    mt_jw_key(w, "padding"); mt_jw_null(w);
    mt_jw_key(w, "added_tokens"); mt_jw_begin_array(w); mt_jw_end_array(w);
    mt_jw_key(w, "normalizer"); mt_jw_null(w);
    for (int k = 0; k < 2; k++) {
        mt_jw_key(w, k ? "decoder" : "pre_tokenizer");
        mt_jw_begin_object(w);
        mt_jw_key(w, "type"); mt_jw_string(w, "ByteLevel");
        mt_jw_key(w, "add_prefix_space"); mt_jw_bool(w, 0);
        mt_jw_key(w, "trim_offsets"); mt_jw_bool(w, 1);
        mt_jw_key(w, "use_regex"); mt_jw_bool(w, 0);
        mt_jw_end_object(w);
    }
    mt_jw_key(w, "post_processor"); mt_jw_null(w);
    mt_jw_key(w, "model");
    mt_jw_begin_object(w);
    mt_jw_key(w, "type"); mt_jw_string(w, "BPE");
    mt_jw_key(w, "dropout"); mt_jw_null(w);
    mt_jw_key(w, "unk_token"); mt_jw_null(w);
    mt_jw_key(w, "continuing_subword_prefix"); mt_jw_null(w);
    mt_jw_key(w, "end_of_word_suffix"); mt_jw_null(w);
    mt_jw_key(w, "fuse_unk"); mt_jw_bool(w, 0);
    mt_jw_key(w, "byte_fallback"); mt_jw_bool(w, 0);
    mt_jw_key(w, "ignore_merges"); mt_jw_bool(w, 0);
    mt_jw_key(w, "vocab");
    mt_jw_begin_object(w);
    for (unsigned b = 0; b < 256; b++) {
        char c[3] = {0};
        mt_bytelevel_char(b, c);
        mt_jw_key(w, c);
        mt_jw_int(w, b);
    }
    mt_jw_end_object(w);
    mt_jw_key(w, "merges"); mt_jw_begin_array(w); mt_jw_end_array(w);
    mt_jw_end_object(w);
    mt_jw_end_object(w);
}

int mt_hf_dir_write_tokenizer(const char *dir, const char *spec, const char *vocab_dir, const char *chat_template,
                              int model_max_length, mt_error *err) {
    int hf = !strncmp(spec, "hf:", 3), gpt2 = !strcmp(spec, "gpt2");
    if (!hf && !gpt2 && strcmp(spec, "byte"))
        return mt_errorf(err, "unknown tokenizer '%s' (byte, gpt2 or hf:PATH/tokenizer.json)", spec);
    mt_tokenizer *tk = mt_tokenizer_open(spec, vocab_dir, err);
    if (!tk) return -1;
    char *bos = NULL, *eos = NULL, *tmpl = NULL;
    int rc = 0;
    if (hf) {
        const char *path = spec + 3, *slash = strrchr(path, '/');
        char *src_dir = slash ? dup_n(path, (size_t)(slash - path)) : dup(".");
        char *cfg = mt_path_join(src_dir, "tokenizer_config.json"), *text = NULL;
        size_t len = 0;
        mt_error e2 = {{0}};
        if (!mt_read_file(cfg, TOKENIZER_FILE_LIMIT, &text, &len, &e2)) {
            mt_json_doc *doc = mt_json_parse(text, len, 64, &e2);
            if (!doc) rc = mt_errorf(err, "%s: %s", cfg, e2.msg);
            const mt_json *r = doc ? mt_json_root(doc) : NULL, *ct = r ? mt_json_get(r, "chat_template") : NULL;
            const char *b = r ? token_text(mt_json_get(r, "bos_token")) : NULL, *e = r ? token_text(mt_json_get(r, "eos_token")) : NULL;
            if (b) bos = dup(b);
            if (e) eos = dup(e);
            if (ct && ct->type == MT_JSON_STRING) tmpl = dup(ct->str);
            mt_json_free(doc);
            free(text);
        }
        free(cfg);
        free(src_dir);
        if (!bos && token_id(tk, "<|begin_of_text|>") >= 0) bos = dup("<|begin_of_text|>");
        if (!eos && mt_tokenizer_eot(tk) >= 0) {
            size_t n = 0;
            const unsigned char *s = mt_tokenizer_token_bytes(tk, mt_tokenizer_eot(tk), &n);
            eos = dup_n((const char *)s, n);
        }
        if (!rc) rc = copy_file(path, dir, "tokenizer.json", err);
    } else if (gpt2) {
        char vd[4096];
        if (vocab_dir) snprintf(vd, sizeof vd, "%s", vocab_dir);
        else rc = mt_tokenizer_find_gpt2_vocab(vd, sizeof vd, err);
        char *enc = rc ? NULL : mt_path_join(vd, "encoder.json"), *bpe = rc ? NULL : mt_path_join(vd, "vocab.bpe");
        if (!rc) rc = copy_file(enc, dir, "vocab.json", err);
        if (!rc) rc = copy_file(bpe, dir, "merges.txt", err);
        free(enc);
        free(bpe);
        bos = dup("<|endoftext|>");
        eos = dup("<|endoftext|>");
    } else {
        mt_json_writer w;
        mt_jw_init(&w);
        byte_tokenizer_json(&w);
        rc = write_file(dir, "tokenizer.json", w.buf, w.len, err);
        mt_jw_free(&w);
    }
    if (chat_template) {
        free(tmpl);
        tmpl = dup(chat_template);
    }
    /* gpt-3-encoder reads "<|endoftext|>" written in text as text: GPT-2's ids are its EOT */
    int32_t bos_id = gpt2 ? mt_tokenizer_eot(tk) : bos ? token_id(tk, bos) : -1;
    int32_t eos_id = gpt2 ? mt_tokenizer_eot(tk) : eos ? token_id(tk, eos) : -1;
    if (!rc) {
        mt_json_writer w;
        mt_jw_init(&w);
        mt_jw_begin_object(&w);
        mt_jw_key(&w, "tokenizer_class"); mt_jw_string(&w, gpt2 ? "GPT2Tokenizer" : "PreTrainedTokenizerFast");
        mt_jw_key(&w, "model_max_length"); mt_jw_int(&w, model_max_length);
        mt_jw_key(&w, "add_bos_token"); mt_jw_bool(&w, 0); /* meshtrain trains without BOS */
        mt_jw_key(&w, "add_eos_token"); mt_jw_bool(&w, 0);
        mt_jw_key(&w, "add_prefix_space"); mt_jw_bool(&w, 0);
        mt_jw_key(&w, "clean_up_tokenization_spaces"); mt_jw_bool(&w, 0);
        if (bos_id >= 0) { mt_jw_key(&w, "bos_token"); mt_jw_string(&w, bos); }
        if (eos_id >= 0) { mt_jw_key(&w, "eos_token"); mt_jw_string(&w, eos); }
        if (gpt2) { mt_jw_key(&w, "unk_token"); mt_jw_string(&w, "<|endoftext|>"); }
        if (tmpl) { mt_jw_key(&w, "chat_template"); mt_jw_string(&w, tmpl); }
        mt_jw_end_object(&w);
        rc = write_file(dir, "tokenizer_config.json", w.buf, w.len, err);
        mt_jw_free(&w);
    }
    if (!rc) {
        mt_json_writer w;
        mt_jw_init(&w);
        mt_jw_begin_object(&w);
        if (bos_id >= 0) { mt_jw_key(&w, "bos_token_id"); mt_jw_int(&w, bos_id); }
        if (eos_id >= 0) { mt_jw_key(&w, "eos_token_id"); mt_jw_int(&w, eos_id); }
        mt_jw_end_object(&w);
        rc = write_file(dir, "generation_config.json", w.buf, w.len, err);
        mt_jw_free(&w);
    }
    free(bos);
    free(eos);
    free(tmpl);
    mt_tokenizer_free(tk);
    return rc;
}
