/* The test consumer of meshtrain's GGUF exports: llama.cpp itself, the
 * prebuilt libllama of the npm package @node-llama-cpp/linux-x64 (never a
 * dependency of meshtrain; tests/check_gguf.sh builds this with cc -ldl).
 * It dlopens the library and declares the few functions it calls; the
 * parameter structs change between llama.cpp versions, so they are taken
 * as opaque blobs from llama_*_default_params (larger than any version's:
 * the callee reads and writes only its own size) and only their first
 * fields, stable for years, are set: n_ctx, n_batch, n_ubatch of the
 * context parameters.
 *
 *   gguf_consumer LIB MODEL logits IDS OUT [GREEDY [LORA]]
 *       evaluates each line of ids of the text file IDS as a sequence of its
 *       own (a fresh context) in one batch with the logits of every
 *       position on; writes them all as float32 [n, n_vocab] to OUT; then
 *       GREEDY argmax tokens continue the last line, one at a time, printed
 *       "greedy: ID ..."; with LORA, the adapter GGUF applied at scale 1
 *   gguf_consumer LIB MODEL quantize OUT q8_0|q4_0|q4_k|q6_k|q4_k_m
 *       llama.cpp's own quantizer (llama_model_quantize, "pure": every
 *       matrix of the type) from MODEL (f32) to OUT
 *   gguf_consumer LIB MODEL tokenize TEXTFILE
 *       llama.cpp's tokenizer (from the GGUF) on the file's bytes, no
 *       special-token insertion (add_special false, parse_special true):
 *       "ids: ID ..."
 *   gguf_consumer LIB MODEL chat MESSAGE_FILE MAX
 *       one user message (the file's text) through the GGUF's chat template
 *       (llama_chat_apply_template), then greedy tokens until an
 *       end-of-generation token or MAX: prints "prompt: ...", "answer: ..."
 *       and "stop: end of generation token ID|token limit after N tokens"
 *   gguf_consumer LIB MODEL complete PROMPT_FILE MAX
 *       as chat, but the file's text is the whole prompt, as it stands (no
 *       template; special tokens parsed): a model whose template llama.cpp
 *       renders otherwise than it was trained, or that has none
 *   gguf_consumer LIB MODEL special TEMPLATE_OUT
 *       prints "bos ID eos ID" (-1: none) as llama.cpp reads them, and
 *       writes the chat template it finds to TEMPLATE_OUT (empty: none)
 * LIB is the path of libllama*.so; the ggml CPU backends beside it are
 * loaded from its directory. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t llama_token;
typedef struct {
    int32_t n_tokens;
    llama_token *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch;
typedef struct {
    unsigned char bytes[4096];
} params_blob;

/* A batch of n tokens of sequence 0 at positions pos0.. (pos0 < 0: from 0),
 * the last one's logits wanted (static storage: one batch at a time). */
static llama_batch llama_batch_one(int32_t n, llama_token *ids, int32_t pos0) {
    static int32_t pos[4096], nseq[4096], seq0 = 0;
    static int32_t *seq[4096];
    static int8_t want[4096];
    if (n > 4096) exit(2);
    for (int32_t i = 0; i < n; i++) {
        pos[i] = (pos0 < 0 ? 0 : pos0) + i;
        nseq[i] = 1;
        seq[i] = &seq0;
        want[i] = i == n - 1;
    }
    llama_batch b = {n, ids, NULL, pos, nseq, seq, want};
    return b;
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "gguf_consumer: %s not found in libllama: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

static void quiet_log(int level, const char *text, void *user) {
    (void)user;
    if (level == 4 /* GGML_LOG_LEVEL_ERROR */) fputs(text, stderr);
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) b = realloc(b, (cap *= 2) + 1);
    if (!b) exit(2);
    fclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: gguf_consumer LIB MODEL logits IDS OUT [GREEDY [LORA]] | tokenize TEXTFILE\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "gguf_consumer: %s\n", dlerror());
        return 2;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    void (*load_backends)(const char *) = sym(RTLD_DEFAULT, "ggml_backend_load_all_from_path");
    void (*log_set)(void (*)(int, const char *, void *), void *) = sym(lib, "llama_log_set");
    void (*backend_init)(void) = sym(lib, "llama_backend_init");
    params_blob (*model_defaults)(void) = sym(lib, "llama_model_default_params");
    params_blob (*context_defaults)(void) = sym(lib, "llama_context_default_params");
    void *(*load_model)(const char *, params_blob) = sym(lib, "llama_model_load_from_file");
    void *(*init_context)(void *, params_blob) = sym(lib, "llama_init_from_model");
    const void *(*model_vocab)(const void *) = sym(lib, "llama_model_get_vocab");
    int32_t (*vocab_n)(const void *) = sym(lib, "llama_vocab_n_tokens");
    int32_t (*tokenize)(const void *, const char *, int32_t, llama_token *, int32_t, bool, bool) = sym(lib, "llama_tokenize");
    int32_t (*decode)(void *, llama_batch) = sym(lib, "llama_decode");
    float *(*logits_ith)(void *, int32_t) = sym(lib, "llama_get_logits_ith");
    void (*free_context)(void *) = sym(lib, "llama_free");
    log_set(quiet_log, NULL);
    load_backends(dir);
    backend_init();
    if (!strcmp(argv[3], "quantize")) {
        if (argc < 6) return 2;
        params_blob (*quant_defaults)(void) = sym(lib, "llama_model_quantize_default_params");
        uint32_t (*quantize)(const char *, const char *, const void *) = sym(lib, "llama_model_quantize");
        params_blob qp = quant_defaults();
        /* nthread, ftype, output_tensor_type, token_embedding_type (int32
         * each), then the flags allow_requantize, quantize_output_tensor,
         * only_copy, pure: defaults 0, 1, 0, 0, checked before pure is set */
        if (qp.bytes[16] != 0 || qp.bytes[17] != 1 || qp.bytes[18] != 0 || qp.bytes[19] != 0) {
            fprintf(stderr, "gguf_consumer: llama_model_quantize_params is not laid out as expected\n");
            return 2;
        }
        /* llama_ftype: MOSTLY_Q8_0 7, MOSTLY_Q4_0 2, MOSTLY_Q4_K_S 14 (pure: every matrix Q4_K), MOSTLY_Q6_K 18 */
        int32_t ftype = !strcmp(argv[5], "q8_0")   ? 7
                        : !strcmp(argv[5], "q4_0") ? 2
                        : !strcmp(argv[5], "q4_k") ? 14
                        : !strcmp(argv[5], "q6_k") ? 18
                        : !strcmp(argv[5], "q4_k_m") ? 15
                                                   : -1;
        if (ftype < 0) return 2;
        memcpy(qp.bytes + 4, &ftype, 4);
        qp.bytes[19] = ftype != 15; /* pure: every matrix of the type, as meshtrain writes them; q4_k_m: llama.cpp's mix */
        int32_t one_thread = 1;
        memcpy(qp.bytes, &one_thread, 4);
        if (quantize(argv[2], argv[4], qp.bytes)) {
            fprintf(stderr, "gguf_consumer: llama_model_quantize failed\n");
            return 1;
        }
        return 0;
    }
    params_blob mp = model_defaults();
    void *model = load_model(argv[2], mp);
    if (!model) {
        fprintf(stderr, "gguf_consumer: llama.cpp could not load %s\n", argv[2]);
        return 1;
    }
    const void *vocab = model_vocab(model);
    int32_t V = vocab_n(vocab);
    if (!strcmp(argv[3], "special")) {
        const char *(*chat_template)(const void *, const char *) = sym(lib, "llama_model_chat_template");
        llama_token (*bos)(const void *) = sym(lib, "llama_vocab_bos"), (*eos)(const void *) = sym(lib, "llama_vocab_eos");
        const char *t = chat_template(model, NULL);
        printf("bos %d eos %d\n", bos(vocab), eos(vocab));
        FILE *f = fopen(argv[4], "wb");
        if (!f || (t && fputs(t, f) == EOF) || fclose(f)) return 2;
        return 0;
    }
    size_t len;
    char *text = read_all(argv[4], &len);
    if (!strcmp(argv[3], "tokenize")) {
        llama_token *ids = malloc((len + 16) * sizeof *ids);
        int32_t n = tokenize(vocab, text, (int32_t)len, ids, (int32_t)len + 16, false, true);
        if (n < 0) {
            fprintf(stderr, "gguf_consumer: llama_tokenize failed (%d)\n", n);
            return 1;
        }
        printf("ids:");
        for (int32_t i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
        return 0;
    }
    int chat = !strcmp(argv[3], "chat"), complete = !strcmp(argv[3], "complete");
    if ((strcmp(argv[3], "logits") && !chat && !complete) || argc < 6) {
        fprintf(stderr, "gguf_consumer: unknown command %s\n", argv[3]);
        return 2;
    }
    int greedy = argc > 6 ? atoi(argv[6]) : 0;
    llama_token *ids = malloc((len / 2 + 2 + (size_t)greedy) * sizeof *ids);
    params_blob cp = context_defaults(); /* n_ctx, n_batch, n_ubatch (bytes 0..11) are set per sequence */
    /* The KV cache is f16 by default, which alone moves f32 logits by ~1e-4:
     * it is made f32, and flash attention (flash_attn_type at byte 52) is
     * turned off, as it rounds the queries to f16 on the CPU. type_k and type_v sit at bytes
     * 104 and 108 of this version's llama_context_params (after 9 uint32
     * sizes and thread counts, 5 enums, 6 floats, yarn_orig_ctx,
     * defrag_thold and the two eval-callback pointers); that the defaults
     * read there as expected (n_threads 4 at 28, flash_attn_type -1 at 52,
     * type_k = type_v = GGML_TYPE_F16 = 1) is checked before writing. */
    int32_t at28, at52, at104, at108;
    memcpy(&at28, cp.bytes + 28, 4);
    memcpy(&at52, cp.bytes + 52, 4);
    memcpy(&at104, cp.bytes + 104, 4);
    memcpy(&at108, cp.bytes + 108, 4);
    if (at28 != 4 || at52 != -1 || at104 != 1 || at108 != 1) {
        fprintf(stderr, "gguf_consumer: llama_context_params is not laid out as this program expects (%d %d %d %d at "
                        "bytes 28, 52, 104, 108): another llama.cpp version\n", at28, at52, at104, at108);
        return 2;
    }
    int32_t f32 = 0, one_thread = 1; /* n_threads, n_threads_batch (bytes 28, 32): the test machine has few cores */
    memcpy(cp.bytes + 28, &one_thread, 4);
    memcpy(cp.bytes + 32, &one_thread, 4);
    memcpy(cp.bytes + 104, &f32, 4);
    memcpy(cp.bytes + 108, &f32, 4);
    memcpy(cp.bytes + 52, &f32, 4); /* flash_attn_type disabled: on the CPU it rounds Q to f16 */
    if (chat || complete) {
        typedef struct {
            const char *role, *content;
        } chat_message;
        const char *(*chat_template)(const void *, const char *) = sym(lib, "llama_model_chat_template");
        int32_t (*apply)(const char *, const chat_message *, size_t, bool, char *, int32_t) =
            sym(lib, "llama_chat_apply_template");
        bool (*is_eog)(const void *, llama_token) = sym(lib, "llama_vocab_is_eog");
        int32_t (*piece)(const void *, llama_token, char *, int32_t, int32_t, bool) = sym(lib, "llama_token_to_piece");
        int max_new = atoi(argv[5]);
        char *prompt = text;
        int32_t pl = (int32_t)len;
        if (chat) {
            while (len && (text[len - 1] == '\n')) text[--len] = 0;
            const char *tmpl = chat_template(model, NULL);
            if (!tmpl) {
                fprintf(stderr, "gguf_consumer: the model has no chat template\n");
                return 1;
            }
            chat_message msg = {"user", text};
            prompt = malloc(2 * len + 4096);
            pl = apply(tmpl, &msg, 1, true, prompt, (int32_t)(2 * len + 4096));
            if (pl < 0 || pl >= (int32_t)(2 * len + 4096)) {
                fprintf(stderr, "gguf_consumer: llama_chat_apply_template failed (%d)\n", pl);
                return 1;
            }
            prompt[pl] = 0;
        }
        llama_token *ids = malloc(((size_t)pl + (size_t)max_new + 16) * sizeof *ids);
        int32_t n = tokenize(vocab, prompt, pl, ids, pl + 16, false, true);
        uint32_t ctx_fields[3] = {(uint32_t)(n + max_new + 8), 512, 512};
        memcpy(cp.bytes, ctx_fields, sizeof ctx_fields);
        void *ctx = n > 0 ? init_context(model, cp) : NULL;
        if (!ctx) {
            fprintf(stderr, "gguf_consumer: cannot evaluate the prompt\n");
            return 1;
        }
        llama_batch b = llama_batch_one(n, ids, -1);
        if (decode(ctx, b)) return 1;
        printf("prompt: %s", prompt);
        printf("answer: ");
        int g = 0, eog = 0;
        for (; g < max_new; g++) {
            const float *lg = logits_ith(ctx, -1);
            llama_token best = 0;
            for (int32_t v = 1; v < V; v++)
                if (lg[v] > lg[best]) best = v;
            ids[n + g] = best;
            if ((eog = is_eog(vocab, best))) break;
            char buf[256];
            int32_t k = piece(vocab, best, buf, sizeof buf, 0, false);
            if (k > 0) fwrite(buf, 1, (size_t)k, stdout);
            llama_batch s = llama_batch_one(1, ids + n + g, n + g);
            if (decode(ctx, s)) return 1;
        }
        if (eog) printf("\nstop: end of generation token %d after %d tokens\n", ids[n + g], g);
        else printf("\nstop: token limit after %d tokens\n", g);
        return 0;
    }
    void *lora = NULL;
    if (argc > 7) {
        void *(*lora_init)(void *, const char *) = sym(lib, "llama_adapter_lora_init");
        lora = lora_init(model, argv[7]);
        if (!lora) {
            fprintf(stderr, "gguf_consumer: llama.cpp could not load the LoRA adapter %s\n", argv[7]);
            return 1;
        }
    }
    FILE *out = fopen(argv[5], "wb");
    if (!out) {
        perror(argv[5]);
        return 2;
    }
    /* each line of IDS is a sequence of its own, in a fresh context */
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        int32_t n = 0;
        for (char *p = line, *e;; p = e) {
            long v = strtol(p, &e, 10);
            if (e == p) break;
            ids[n++] = (llama_token)v;
        }
        if (!n) continue;
        int last = !next || !*next;
        uint32_t ctx_fields[3] = {(uint32_t)(n + greedy + 8), 512, 512}; /* n_ctx, n_batch, n_ubatch */
        memcpy(cp.bytes, ctx_fields, sizeof ctx_fields);
        void *ctx = init_context(model, cp);
        if (!ctx) {
            fprintf(stderr, "gguf_consumer: llama_init_from_model failed\n");
            return 1;
        }
        if (lora) {
            int32_t (*set_loras)(void *, void **, size_t, float *) = sym(lib, "llama_set_adapters_lora");
            float scale = 1.0f;
            if (set_loras(ctx, &lora, 1, &scale)) {
                fprintf(stderr, "gguf_consumer: llama.cpp could not apply the LoRA adapter %s\n", argv[7]);
                return 1;
            }
        }
        int32_t *pos = malloc((size_t)n * sizeof *pos), *nseq = malloc((size_t)n * sizeof *nseq), seq0 = 0;
        int32_t **seq = malloc((size_t)n * sizeof *seq);
        int8_t *want = malloc((size_t)n);
        for (int32_t i = 0; i < n; i++) {
            pos[i] = i;
            nseq[i] = 1;
            seq[i] = &seq0;
            want[i] = 1;
        }
        llama_batch b = {n, ids, NULL, pos, nseq, seq, want};
        if (decode(ctx, b)) {
            fprintf(stderr, "gguf_consumer: llama_decode failed\n");
            return 1;
        }
        for (int32_t i = 0; i < n; i++)
            if (fwrite(logits_ith(ctx, i), sizeof(float), (size_t)V, out) != (size_t)V) return 2;
        if (greedy > 0 && last) {
            printf("greedy:");
            const float *lg = logits_ith(ctx, n - 1);
            for (int g = 0; g < greedy; g++) {
                llama_token best = 0;
                for (int32_t v = 1; v < V; v++)
                    if (lg[v] > lg[best]) best = v;
                printf(" %d", best);
                if (g + 1 == greedy) break;
                int32_t p = n + g;
                int8_t one = 1;
                llama_batch s = {1, &best, NULL, &p, nseq, seq, &one};
                if (decode(ctx, s)) {
                    fprintf(stderr, "gguf_consumer: llama_decode failed at generated token %d\n", g + 1);
                    return 1;
                }
                lg = logits_ith(ctx, -1);
            }
            printf("\n");
        }
        free_context(ctx);
        free(pos);
        free(nseq);
        free(seq);
        free(want);
    }
    if (fclose(out)) return 2;
    return 0;
}
