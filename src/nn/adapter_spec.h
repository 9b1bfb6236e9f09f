/* What a run trains of a model: everything (the default), everything but
 * the tensors a {freeze} pattern names, or adapters on a frozen base
 * ({peft} lora|ia3). The spec is part of the model config (it decides the
 * layout: which tensors exist and which store they live in), so every
 * place that builds a layout from a config -- the trainer, checkpoints,
 * export, the planner -- sees the same tensors. */
#ifndef MT_NN_ADAPTER_SPEC_H
#define MT_NN_ADAPTER_SPEC_H
#include "core/error.h"
#include "core/json.h"

typedef enum { MT_PEFT_NONE = 0, MT_PEFT_LORA, MT_PEFT_IA3 } mt_peft_kind;

#define MT_ADAPTER_TEXT 256
typedef struct {
    mt_peft_kind kind;
    int r;                          /* LoRA rank */
    float alpha;                    /* LoRA scale alpha / r (alpha / sqrt(r) with rslora) */
    float dropout;                  /* LoRA dropout on the adapter's input */
    int rslora;
    char targets[MT_ADAPTER_TEXT];  /* comma-separated HF module names (last component, e.g. q_proj,
                                       c_attn), or "all-linear"; empty: the kind's default */
    char feedforward[MT_ADAPTER_TEXT]; /* IA3: the targets whose input (not output) is scaled; empty: the family's */
    char freeze[MT_ADAPTER_TEXT];   /* {freeze}: a PCRE2 pattern over HF tensor names (empty: none) */
    char train_also[MT_ADAPTER_TEXT]; /* {peft-train}: base tensors (PCRE2 over HF names) trained in full
                                         beside the adapters (peft's modules_to_save) */
    int quant;                      /* {quantize-base}: the frozen linear weights of the blocks stored as
                                       mt_quant_kind (quant/qweight.h: 0 none, 1 nf4, 2 int8, 3 gptq) */
    int double_quant;               /* {double-quant} (nf4): the block absmaxes quantized to 8 bits */
    int gptq_bits, gptq_group_size; /* {quantize-base} gptq: the base's GPTQ directory's bits (4, 8) and
                                       group size (-1: one group), as its import recorded them (the
                                       trainer sets them; the planner takes them as flags) */
    float int8_threshold;           /* {int8-threshold} (int8): > 0 runs LLM.int8()'s decomposition (input
                                       columns with |x| >= it in fp32, the rest int8 x int8: ops/matmul_int8.h);
                                       0: the dequantized weight in an fp32 GEMM */
} mt_adapter_spec;

int mt_peft_kind_parse(const char *s, mt_peft_kind *out, mt_error *err);
const char *mt_peft_kind_name(mt_peft_kind k);
/* Anything frozen or added at all. */
static inline int mt_adapter_spec_active(const mt_adapter_spec *s) { return s->kind != MT_PEFT_NONE || s->freeze[0]; }
/* The LoRA output scale: alpha / r, or alpha / sqrt(r) with rslora. */
float mt_lora_scale(const mt_adapter_spec *s);
/* Ranges (r >= 1, alpha > 0, dropout in [0, 1)) and that the pattern compiles; messages speak the flags. */
int mt_adapter_spec_validate(const mt_adapter_spec *s, mt_error *err);
/* JSON object form (in the model config of a checkpoint). */
void mt_adapter_spec_write_json(mt_json_writer *w, const mt_adapter_spec *s);
int mt_adapter_spec_read_json(const mt_json *obj, mt_adapter_spec *s, mt_error *err);

#endif
