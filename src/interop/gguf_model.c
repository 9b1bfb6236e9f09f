#include "interop/gguf_model.h"
#include "interop/gguf_vocab.h"
#include "ops/ops.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mt_gguf_arch(const mt_model_config *cfg, mt_error *err) {
    if (cfg->family == MT_FAMILY_GPT2) return "gpt2";
    if (cfg->family == MT_FAMILY_LLAMA) {
        if (cfg->rope_scaling == MT_ROPE_DYNAMIC) {
            /* llama.cpp's scalings are none, linear, yarn and longrope (and llama3's per-frequency factors):
             * none of them grows the base with the sequence length */
            mt_errorf(err, "this model's RoPE scaling (dynamic NTK: the base grows with the sequence length) has no "
                           "counterpart in llama.cpp: it cannot be exported to GGUF (export --format hf instead)");
            return NULL;
        }
        if (cfg->rope_scaling == MT_ROPE_YARN && ((cfg->rope_beta_fast > 0.0f && cfg->rope_beta_fast != 32.0f) ||
                                                  (cfg->rope_beta_slow > 0.0f && cfg->rope_beta_slow != 1.0f))) {
            /* this llama.cpp reads the yarn_beta keys for a few architectures only, not llama or qwen2 */
            mt_errorf(err, "this model's YaRN scaling has beta_fast %g, beta_slow %g; llama.cpp's llama and qwen2 "
                           "architectures use 32 and 1: it cannot be exported to GGUF exactly",
                      cfg->rope_beta_fast > 0.0f ? cfg->rope_beta_fast : 32.0f,
                      cfg->rope_beta_slow > 0.0f ? cfg->rope_beta_slow : 1.0f);
            return NULL;
        }
        if (cfg->rope_scaling == MT_ROPE_YARN && !cfg->rope_truncate) {
            mt_errorf(err, "this model's YaRN scaling keeps the ramp's ends fractional (rope_scaling truncate false); "
                           "llama.cpp rounds them to whole dims: it cannot be exported to GGUF exactly");
            return NULL;
        }
        if (!cfg->qkv_bias) return "llama";
        if (mt_model_head_dim(cfg) * cfg->n_head != cfg->n_embd) {
            mt_errorf(err, "llama.cpp's qwen2 architecture (the Llama shape with q/k/v biases) needs head dim x heads "
                           "= dim, this model has %d x %d != %d: it cannot be exported to GGUF",
                      mt_model_head_dim(cfg), cfg->n_head, cfg->n_embd);
            return NULL;
        }
        if (cfg->rope_scaling == MT_ROPE_LLAMA3) {
            mt_errorf(err, "llama.cpp's qwen2 architecture (the Llama shape with q/k/v biases) has no llama3 RoPE "
                           "scaling: this model cannot be exported to GGUF");
            return NULL;
        }
        return "qwen2";
    }
    mt_errorf(err, "llama.cpp has no architecture for the %s family: it cannot be exported to GGUF",
              mt_family_name(cfg->family));
    return NULL;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Our (= Hugging Face's) tensor name -> llama.cpp's; *permute: 1 for q rows,
 * 2 for k rows (llama arch). 0 on success, -1 for a name llama.cpp has no
 * tensor for. */
static int gguf_name(const mt_model_config *cfg, const char *arch, const char *name, char *out, size_t cap,
                     int *permute) {
    *permute = 0;
    static const char *const gpt2_map[][2] = {
        {"ln_1.weight", "attn_norm.weight"},      {"ln_1.bias", "attn_norm.bias"},
        {"attn.c_attn.weight", "attn_qkv.weight"}, {"attn.c_attn.bias", "attn_qkv.bias"},
        {"attn.c_proj.weight", "attn_output.weight"}, {"attn.c_proj.bias", "attn_output.bias"},
        {"ln_2.weight", "ffn_norm.weight"},       {"ln_2.bias", "ffn_norm.bias"},
        {"mlp.c_fc.weight", "ffn_up.weight"},     {"mlp.c_fc.bias", "ffn_up.bias"},
        {"mlp.c_proj.weight", "ffn_down.weight"}, {"mlp.c_proj.bias", "ffn_down.bias"},
    };
    static const char *const llama_map[][2] = {
        {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"},  {"self_attn.q_proj.bias", "attn_q.bias"},
        {"self_attn.k_proj.weight", "attn_k.weight"},  {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.weight", "attn_v.weight"},  {"self_attn.v_proj.bias", "attn_v.bias"},
        {"self_attn.o_proj.weight", "attn_output.weight"},
        {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    int gpt2 = cfg->family == MT_FAMILY_GPT2;
    const char *g = gpt2 ? (!strcmp(name, "wte.weight")   ? "token_embd.weight"
                            : !strcmp(name, "wpe.weight") ? "position_embd.weight"
                            : !strcmp(name, "ln_f.weight") ? "output_norm.weight"
                            : !strcmp(name, "ln_f.bias")   ? "output_norm.bias"
                                                           : NULL)
                         : (!strcmp(name, "model.embed_tokens.weight") ? "token_embd.weight"
                            : !strcmp(name, "model.norm.weight")       ? "output_norm.weight"
                            : !strcmp(name, "lm_head.weight")          ? "output.weight"
                                                                       : NULL);
    if (g) {
        snprintf(out, cap, "%s", g);
        return 0;
    }
    const char *prefix = gpt2 ? "h." : "model.layers.";
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl)) return -1;
    char *end;
    long layer = strtol(name + pl, &end, 10);
    if (end == name + pl || *end != '.') return -1;
    const char *rest = end + 1;
    size_t n = gpt2 ? sizeof gpt2_map / sizeof gpt2_map[0] : sizeof llama_map / sizeof llama_map[0];
    for (size_t i = 0; i < n; i++) {
        const char *const *m = gpt2 ? gpt2_map[i] : llama_map[i];
        if (strcmp(rest, m[0])) continue;
        snprintf(out, cap, "blk.%ld.%s", layer, m[1]);
        if (!strcmp(arch, "llama")) *permute = !strncmp(m[1], "attn_q.", 7) ? 1 : !strncmp(m[1], "attn_k.", 7) ? 2 : 0;
        return 0;
    }
    return -1;
}

/* Hugging Face's rotate-half rows -> llama.cpp's adjacent pairs, per head:
 * dst row h*hd + 2j + s = src row h*hd + s*hd/2 + j (cols values per row). */
static void permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int hd) {
    for (int64_t h = 0; h < rows / hd; h++)
        for (int j = 0; j < hd / 2; j++)
            for (int s = 0; s < 2; s++)
                memcpy(dst + (h * hd + 2 * j + s) * cols, src + (h * hd + (int64_t)s * hd / 2 + j) * cols,
                       (size_t)cols * sizeof(float));
}

/* llama.cpp's Q4_K_M mix (its quantizer's choice for ftype MOSTLY_Q4_K_M,
 * llama and qwen2 without experts): Q6_K for the output head (the token
 * embedding when it is the head) and for attn_v and ffn_down in the layers
 * it gives more bits (the first and last eighth, and every third between),
 * Q4_K for the other matrices. */
static int more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}
static mt_gguf_type q4_k_m_type(const mt_model_config *cfg, const char *name) {
    int layer;
    if (!strcmp(name, "output.weight") || (cfg->tie_embeddings && !strcmp(name, "token_embd.weight")))
        return MT_GGUF_Q6_K;
    if (sscanf(name, "blk.%d.", &layer) == 1 && (strstr(name, ".attn_v.weight") || strstr(name, ".ffn_down.weight")) &&
        more_bits(layer, cfg->n_layer))
        return MT_GGUF_Q6_K;
    return MT_GGUF_Q4_K;
}

/* One tensor of ours: rows (padding stripped for the vocabulary), the
 * llama permutation, stored as dtype (or the Q4_K_M mix's type) if 2-D. */
static int add_tensor(mt_gguf_writer *gw, const mt_model_config *cfg, const char *arch, const mt_tensor *t,
                      const float *data, mt_gguf_type dtype, int q4_k_m, mt_error *err) {
    char name[160];
    int perm;
    if (gguf_name(cfg, arch, t->name, name, sizeof name, &perm))
        return mt_errorf(err, "tensor %s has no counterpart in llama.cpp's %s architecture: it cannot be exported to "
                              "GGUF", t->name, arch);
    if (q4_k_m) dtype = q4_k_m_type(cfg, name);
    int64_t rows = t->gshape[0], cols = t->ndim == 2 ? t->gshape[1] : 1;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) rows = cfg->vocab_size;
    int64_t ne[2] = {t->ndim == 2 ? cols : rows, rows};
    /* GPT-2's position table stays f32, as llama.cpp's converter and quantizer keep it */
    mt_gguf_type type = t->ndim == 2 && strcmp(name, "position_embd.weight") ? dtype : MT_GGUF_F32;
    if (!perm) return mt_gguf_add_tensor(gw, name, t->ndim, ne, type, data, err);
    float *p = mt_xmalloc((size_t)(rows * cols) * sizeof(float), "GGUF permuted rows");
    permute_rows(p, data, rows, cols, mt_model_head_dim(cfg));
    return mt_gguf_add_tensor_owned(gw, name, t->ndim, ne, type, p, err);
}

/* transformers' YaRN attention factor (ops/rope.c's op_rope_attention_factor) */
static double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * log(scale) + 1.0; }
static double yarn_attention_factor(const mt_model_config *c) {
    if (c->rope_attention_factor > 0.0f) return c->rope_attention_factor;
    if (c->rope_mscale != 0.0f && c->rope_mscale_all_dim != 0.0f)
        return yarn_mscale(c->rope_factor, c->rope_mscale) / yarn_mscale(c->rope_factor, c->rope_mscale_all_dim);
    return yarn_mscale(c->rope_factor, 1.0);
}

static void add_hparams(mt_gguf_writer *gw, const mt_model_config *c, const char *arch, uint32_t file_type,
                        const char *name) {
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    mt_gguf_kv_string(gw, "general.architecture", arch);
    mt_gguf_kv_string(gw, "general.name", name ? name : "meshtrain model");
    mt_gguf_kv_u32(gw, "general.file_type", file_type);
    mt_gguf_kv_u32(gw, "general.quantization_version", 2);
    int gpt2 = c->family == MT_FAMILY_GPT2;
    mt_gguf_kv_u32(gw, K("context_length"), (uint32_t)(gpt2 ? c->seq_len : (c->max_pos > c->seq_len ? c->max_pos : c->seq_len)));
    mt_gguf_kv_u32(gw, K("embedding_length"), (uint32_t)c->n_embd);
    mt_gguf_kv_u32(gw, K("feed_forward_length"), (uint32_t)(gpt2 ? 4 * c->n_embd : c->ffn_dim));
    mt_gguf_kv_u32(gw, K("block_count"), (uint32_t)c->n_layer);
    mt_gguf_kv_u32(gw, K("attention.head_count"), (uint32_t)c->n_head);
    if (gpt2) {
        mt_gguf_kv_f32(gw, K("attention.layer_norm_epsilon"), 1e-5f); /* GPT-2's LayerNorm */
    } else {
        int hd = mt_model_head_dim(c);
        mt_gguf_kv_u32(gw, K("attention.head_count_kv"), (uint32_t)mt_model_kv_heads(c));
        mt_gguf_kv_u32(gw, K("attention.key_length"), (uint32_t)hd);
        mt_gguf_kv_u32(gw, K("attention.value_length"), (uint32_t)hd);
        mt_gguf_kv_u32(gw, K("rope.dimension_count"), (uint32_t)hd);
        mt_gguf_kv_f32(gw, K("attention.layer_norm_rms_epsilon"), c->norm_eps);
        mt_gguf_kv_f32(gw, K("rope.freq_base"), c->rope_theta);
        mt_gguf_kv_u32(gw, K("vocab_size"), (uint32_t)c->vocab_size);
        if (c->rope_scaling == MT_ROPE_LINEAR || c->rope_scaling == MT_ROPE_YARN) {
            /* llama.cpp: angle = pos * freq / factor (linear); YaRN mixes that with pos * freq over the dims
             * between 32 and 1 turns (beta_fast, beta_slow) in the original context, and multiplies cos and
             * sin by attn_factor * (1 + 0.1 ln factor) -- transformers' default attention factor, so ours is
             * written divided by it */
            int yarn = c->rope_scaling == MT_ROPE_YARN;
            mt_gguf_kv_string(gw, K("rope.scaling.type"), yarn ? "yarn" : "linear");
            mt_gguf_kv_f32(gw, K("rope.scaling.factor"), c->rope_factor);
            if (yarn) {
                mt_gguf_kv_u32(gw, K("rope.scaling.original_context_length"), (uint32_t)c->rope_original_max_pos);
                mt_gguf_kv_f32(gw, K("rope.scaling.attn_factor"),
                               (float)(yarn_attention_factor(c) / (1.0 + 0.1 * log(c->rope_factor))));
            }
        }
    }
#undef K
}

int mt_gguf_export(const char *path, const mt_weights *w, const mt_gguf_export_opts *o, mt_error *err) {
    const mt_model_config *c = &w->cfg;
    if (mt_adapter_spec_active(&c->adapters))
        return mt_errorf(err, "GGUF export takes a plain model: merge the adapters first");
    const char *arch = mt_gguf_arch(c, err);
    if (!arch) return -1;
    if (o->q4_k_m && (!strcmp(arch, "gpt2") || c->num_experts))
        return mt_errorf(err, "llama.cpp's q4_k_m mix gives %s Q5_K, which is not written: export q4_k or q6_k instead",
                         !strcmp(arch, "gpt2") ? "GPT-2's fused attn_qkv" : "a mixture of experts' attention");
    mt_gguf_writer *gw = mt_gguf_writer_new();
    add_hparams(gw, c, arch, o->q4_k_m ? 15 /* MOSTLY_Q4_K_M */ : mt_gguf_file_type(o->dtype), o->name);
    int rc = mt_gguf_add_vocab(gw, o->tokenizer, o->vocab_dir, c->vocab_size, o->chat_template, err);
    for (int u = 0; u < w->layout.n_units && !rc; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors && !rc; i++) {
            const mt_tensor *t = &w->layout.units[u].t[i];
            rc = add_tensor(gw, c, arch, t, w->unit[u] + t->offset, o->dtype, o->q4_k_m, err);
        }
    if (!rc && c->family == MT_FAMILY_LLAMA && c->rope_scaling == MT_ROPE_LLAMA3) {
        /* llama.cpp divides each base frequency by rope_freqs[j]: Llama 3.1's
         * factor per frequency, as the converter computes it (1 for short
         * wavelengths, factor for long ones, interpolated between) */
        int hd = mt_model_head_dim(c);
        float *tmp = mt_xmalloc((size_t)(hd / 2) * sizeof(float), "rope_freqs");
        double old = c->rope_original_max_pos, lo = old / c->rope_low_freq_factor, hi = old / c->rope_high_freq_factor;
        for (int j = 0; j < hd / 2; j++) {
            double f = 1.0 / pow(c->rope_theta, 2.0 * j / hd), wavelen = 2.0 * M_PI / f;
            double sm = (old / wavelen - c->rope_low_freq_factor) / (c->rope_high_freq_factor - c->rope_low_freq_factor);
            tmp[j] = wavelen < hi ? 1.0f : wavelen > lo ? c->rope_factor : (float)(1.0 / ((1.0 - sm) / c->rope_factor + sm));
        }
        int64_t ne[1] = {hd / 2};
        rc = mt_gguf_add_tensor_owned(gw, "rope_freqs.weight", 1, ne, MT_GGUF_F32, tmp, err);
    }
    if (!rc) rc = mt_gguf_write(gw, path, err);
    mt_gguf_writer_free(gw);
    return rc;
}

int mt_gguf_export_lora(const char *path, const mt_weights *w, const char *name, mt_error *err) {
    const mt_model_config *c = &w->cfg;
    if (c->adapters.kind != MT_PEFT_LORA)
        return mt_errorf(err, "a LoRA adapter GGUF needs a {peft} lora checkpoint; this one %s",
                         c->adapters.kind == MT_PEFT_NONE ? "has no LoRA adapters" : "has IA3 adapters");
    const char *arch = mt_gguf_arch(c, err);
    if (!arch) return -1;
    mt_gguf_writer *gw = mt_gguf_writer_new();
    mt_gguf_kv_string(gw, "general.architecture", arch);
    mt_gguf_kv_string(gw, "general.type", "adapter");
    mt_gguf_kv_string(gw, "general.name", name ? name : "meshtrain LoRA adapter");
    mt_gguf_kv_string(gw, "adapter.type", "lora");
    mt_gguf_kv_f32(gw, "adapter.lora.alpha", mt_lora_scale(&c->adapters) * (float)c->adapters.r);
    int rc = 0, n = 0;
    for (int u = 0; u < w->layout.n_units && !rc; u++)
        for (int i = 0; i < w->layout.units[u].n_tensors && !rc; i++) {
            const mt_tensor *a = &w->layout.units[u].t[i];
            if (!a->adapter) {
                rc = mt_errorf(err, "%s was trained in full (by {peft-train} or {freeze}): a LoRA adapter GGUF holds "
                                    "only A and B; export the merged model instead",
                               a->name);
                break;
            }
            if (!ends_with(a->name, ".lora_A.weight")) continue;
            char target[MT_TENSOR_NAME_LEN + 16], bname[MT_TENSOR_NAME_LEN + 16], g[160], full[200];
            size_t bl = strlen(a->name) - strlen(".lora_A.weight");
            snprintf(target, sizeof target, "%.*s.weight", (int)bl, a->name);
            snprintf(bname, sizeof bname, "%.*s.lora_B.weight", (int)bl, a->name);
            int ub, perm;
            const mt_tensor *b = mt_layout_find_tensor(&w->layout, bname, &ub);
            if (!b) {
                rc = mt_errorf(err, "%s has no %s", a->name, bname);
                break;
            }
            if (gguf_name(c, arch, target, g, sizeof g, &perm)) {
                rc = mt_errorf(err, "LoRA target %s has no counterpart in llama.cpp's %s architecture", target, arch);
                break;
            }
            int64_t r = a->gshape[0], in = a->gshape[1], out = b->gshape[0];
            int64_t nea[2] = {in, r}, neb[2] = {r, out};
            snprintf(full, sizeof full, "%s.lora_a", g);
            rc = mt_gguf_add_tensor(gw, full, 2, nea, MT_GGUF_F32, w->unit[u] + a->offset, err);
            const float *bd = w->unit[ub] + b->offset;
            snprintf(full, sizeof full, "%s.lora_b", g);
            if (!rc && !perm) rc = mt_gguf_add_tensor(gw, full, 2, neb, MT_GGUF_F32, bd, err);
            if (!rc && perm) { /* B's rows are the target's output rows: permuted as the base's are */
                float *p = mt_xmalloc((size_t)(out * r) * sizeof(float), "GGUF permuted rows");
                permute_rows(p, bd, out, r, mt_model_head_dim(c));
                rc = mt_gguf_add_tensor_owned(gw, full, 2, neb, MT_GGUF_F32, p, err);
            }
            n++;
        }
    if (!rc && !n) rc = mt_errorf(err, "the checkpoint holds no LoRA tensors");
    if (!rc) rc = mt_gguf_write(gw, path, err);
    mt_gguf_writer_free(gw);
    return rc;
}
