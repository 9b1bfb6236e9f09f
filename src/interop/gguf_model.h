/* A model, or a LoRA adapter, as the GGUF file llama.cpp loads
 * (interop/gguf.h writes the format). The architecture, names and layouts
 * are llama.cpp's, as its converter (convert_hf_to_gguf.py) writes them:
 *  - GPT-2 -> "gpt2": token_embd, position_embd, blk.N.attn_norm,
 *    attn_qkv (the fused q|k|v, [3C, C] rows = ne {C, 3C}: our layout, which
 *    is Hugging Face's Conv1D transposed), attn_output, ffn_norm, ffn_up,
 *    ffn_down (weights and biases), output_norm; the head is tied (no
 *    output tensor: llama.cpp reuses token_embd).
 *  - Llama without q/k/v biases -> "llama": token_embd, blk.N.attn_norm,
 *    attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
 *    ffn_down, output_norm, output (untied), rope_freqs (Llama 3.1 RoPE
 *    scaling: the per-frequency divisors). llama.cpp rotates adjacent pairs
 *    (its "normal" RoPE) where Hugging Face rotates the two halves of a
 *    head, so the rows of attn_q and attn_k are permuted per head as the
 *    converter does: row 2j+s of a head takes row s*hd/2+j.
 *  - Llama with q/k/v biases (Qwen2's shape) -> "qwen2": the same names
 *    plus attn_q/k/v biases, rotating halves (NeoX RoPE): no permutation;
 *    llama.cpp's qwen2 needs head_dim * heads = dim and has no RoPE scaling.
 * Matrices (2-D tensors) are stored as dtype; norms, biases and rope_freqs
 * stay f32 (as the converter does). The embedding's padding rows are not
 * written: token_embd (and output) have vocab_size rows, one per token.
 *
 * A {peft} / {freeze} checkpoint is merged first (a QLoRA base
 * dequantized): the caller passes merged weights.
 *
 * The LoRA adapter file: general.type "adapter", adapter.type "lora",
 * adapter.lora.alpha = scale * r (llama.cpp scales by alpha / r), and for
 * each target <name>.lora_a (A, [r, in] = ne {in, r}) and <name>.lora_b
 * (B, [out, r] = ne {r, out}; for llama's attn_q/attn_k B's rows are
 * permuted as the base's are), in f32. */
#ifndef MT_INTEROP_GGUF_MODEL_H
#define MT_INTEROP_GGUF_MODEL_H
#include "interop/gguf.h"
#include "interop/weights.h"

typedef struct {
    mt_gguf_type dtype;        /* of the matrices */
    const char *tokenizer;     /* "byte", "gpt2" or "hf:PATH/tokenizer.json" (interop/gguf_vocab.h) */
    const char *vocab_dir;     /* gpt2: encoder.json + vocab.bpe (NULL: the default) */
    const char *chat_template; /* NULL: the tokenizer's own, if any */
    const char *name;          /* general.name */
    int q4_k_m;                /* llama.cpp's Q4_K_M mix instead of dtype (llama and qwen2 architectures) */
} mt_gguf_export_opts;

/* llama.cpp's architecture name for this config ("gpt2", "llama",
 * "qwen2"), or NULL with err when llama.cpp has none that computes it. */
const char *mt_gguf_arch(const mt_model_config *cfg, mt_error *err);
/* The model (plain weights: no adapters) to path, atomically. */
int mt_gguf_export(const char *path, const mt_weights *w, const mt_gguf_export_opts *o, mt_error *err);
/* A {peft} lora checkpoint's adapters to path, atomically. */
int mt_gguf_export_lora(const char *path, const mt_weights *w, const char *name, mt_error *err);

#endif
