/* The adapter layout transform (nn/adapters.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "nn/adapters.h"
#include "core/strlist.h"
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>

void mt_adapters_module_name(const mt_adapter_names *nm, const char *tensor, char *buf, size_t cap) {
    nm->hf_name(nm->ctx, tensor, buf, cap);
    size_t n = strlen(buf);
    if (n > 7 && strcmp(buf + n - 7, ".weight") == 0) buf[n - 7] = 0;
}

/* The kind's default targets for this family. */
static const char *default_targets(const mt_adapter_spec *s, const mt_adapter_names *nm) {
    return s->kind == MT_PEFT_IA3 ? nm->ia3_targets : nm->lora_targets;
}

/* module == target, or module ends with "." target (PEFT's suffix match). */
static int module_matches(const char *module, const char *target, size_t tlen) {
    size_t n = strlen(module);
    if (n < tlen || strncmp(module + n - tlen, target, tlen)) return 0;
    return n == tlen || module[n - tlen - 1] == '.';
}

/* Whether unit u's tensor t is a linear weight a target list names; *hit
 * records which targets matched (bit i: target i). */
static int is_target(const mt_adapter_spec *s, const mt_adapter_names *nm, const mt_unit_layout *u, const mt_tensor *t,
                     unsigned *hit) {
    if (t->ndim != 2 || u->role != MT_UNIT_BLOCK) return 0; /* linears live in blocks; not embeddings or heads */
    char module[128];
    mt_adapters_module_name(nm, t->name, module, sizeof module);
    const char *list = s->targets[0] ? s->targets : default_targets(s, nm);
    if (strcmp(list, "all-linear") == 0) return 1;
    int found = 0;
    const char *cur = list, *item;
    size_t len;
    for (int i = 0; mt_strlist_next(&cur, &item, &len); i++)
        if (len && module_matches(module, item, len)) {
            found = 1;
            if (hit && i < 32) *hit |= 1u << i;
        }
    return found;
}

static void add_lora(const mt_adapter_spec *s, mt_layout *l, int u, int k) {
    mt_tensor tt = l->units[u].t[k]; /* a copy: adding tensors may move the list */
    char base[MT_TENSOR_NAME_LEN], name[MT_TENSOR_NAME_LEN + 16];
    snprintf(base, sizeof base, "%s", tt.name);
    size_t n = strlen(base);
    if (n > 7 && strcmp(base + n - 7, ".weight") == 0) base[n - 7] = 0;
    int64_t out = tt.gshape[0], in = tt.gshape[1];
    snprintf(name, sizeof name, "%s.lora_A.weight", base);
    mt_tensor *a = mt_unit_add_tensor(l, u, name, s->r, in, 2, 1, 0.0f, tt.split == MT_TP_COLS ? MT_TP_COLS : MT_TP_REPLICATED);
    a->init_bound = 1.0f / sqrtf((float)in); /* PyTorch's kaiming_uniform_(a = sqrt(5)) on [r, in] */
    a->adapter = 1;
    a->expert = tt.expert; /* an expert's adapters live with it (expert parallelism) */
    int ia = l->units[u].n_tensors - 1;
    snprintf(name, sizeof name, "%s.lora_B.weight", base);
    mt_tensor *b = mt_unit_add_tensor(l, u, name, out, s->r, 2, 1, 0.0f, tt.split == MT_TP_ROWS ? MT_TP_ROWS : MT_TP_REPLICATED);
    b->adapter = 1;
    b->expert = tt.expert;
    if (tt.split == MT_TP_ROWS && tt.split_parts > 1) mt_tensor_set_parts(b, tt.split_parts, tt.part_rows);
    if (tt.split == MT_TP_ROWS && tt.tp_replicas > 1) mt_unit_set_tp_replicas(l, u, tt.tp_replicas);
    int ib = l->units[u].n_tensors - 1;
    l->units[u].t[k].lora_a = ia + 1;
    l->units[u].t[k].lora_b = ib + 1;
}

/* Whether module `module` is in the comma-separated list. */
static int in_list(const char *list, const char *module) {
    const char *cur = list, *item;
    size_t len;
    while (mt_strlist_next(&cur, &item, &len))
        if (len && module_matches(module, item, len)) return 1;
    return 0;
}

/* IA3's vector, initialised to ones: the target's output rows (cut with them), or for a
 * feedforward module its input columns (cut as its columns are). */
static void add_ia3(const mt_adapter_spec *s, const mt_adapter_names *nm, mt_layout *l, int u, int k) {
    mt_tensor tt = l->units[u].t[k];
    char base[MT_TENSOR_NAME_LEN], name[MT_TENSOR_NAME_LEN + 16], module[128];
    snprintf(base, sizeof base, "%s", tt.name);
    size_t n = strlen(base);
    if (n > 7 && strcmp(base + n - 7, ".weight") == 0) base[n - 7] = 0;
    mt_adapters_module_name(nm, tt.name, module, sizeof module);
    int input = in_list(s->feedforward[0] ? s->feedforward : nm->ia3_feedforward, module);
    snprintf(name, sizeof name, "%s.ia3_l", base);
    mt_tensor *v;
    if (input) {
        v = mt_unit_add_tensor(l, u, name, tt.gshape[1], 1, 1, 0, -1.0f, tt.split == MT_TP_COLS ? MT_TP_ROWS : MT_TP_REPLICATED);
    } else {
        v = mt_unit_add_tensor(l, u, name, tt.gshape[0], 1, 1, 0, -1.0f, tt.split == MT_TP_ROWS ? MT_TP_ROWS : MT_TP_REPLICATED);
        if (tt.split == MT_TP_ROWS && tt.split_parts > 1) mt_tensor_set_parts(v, tt.split_parts, tt.part_rows);
        if (tt.split == MT_TP_ROWS && tt.tp_replicas > 1) mt_unit_set_tp_replicas(l, u, tt.tp_replicas);
    }
    v->adapter = 1;
    v->expert = tt.expert;
    l->units[u].t[k].ia3 = l->units[u].n_tensors;
    l->units[u].t[k].ia3_input = input;
    snprintf(name, sizeof name, "%s.bias", base); /* backward recomputes the scaled output: W x + b */
    for (int i = 0; i < l->units[u].n_tensors; i++)
        if (!strcmp(l->units[u].t[i].name, name)) l->units[u].t[k].bias_of = i + 1;
}

void mt_adapters_apply(const mt_adapter_spec *s, const mt_adapter_names *nm, mt_layout *l) {
    if (!mt_adapter_spec_active(s)) return;
    pcre2_code *re = NULL;
    pcre2_match_data *md = NULL;
    /* without adapters the pattern names what is frozen; with them, what of the base is trained too */
    const char *pat = s->kind == MT_PEFT_NONE ? s->freeze : s->train_also;
    if (pat[0]) {
        int ec;
        PCRE2_SIZE eo;
        re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
        if (!re) mt_die("pattern '%s' does not compile (mt_adapter_spec_validate checks it first)", pat);
        md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) mt_die("out of memory for the {freeze} pattern's match data");
    }
    int any = 0;
    for (int u = 0; u < l->n_units; u++) {
        int n0 = l->units[u].n_tensors;
        for (int k = 0; k < n0; k++) {
            mt_tensor *t = &l->units[u].t[k];
            int match = 0;
            if (re) {
                char hf[160];
                nm->hf_name(nm->ctx, t->name, hf, sizeof hf);
                match = pcre2_match(re, (PCRE2_SPTR)hf, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) >= 0;
            }
            t->trainable = s->kind == MT_PEFT_NONE ? !match : match;
            any |= !t->trainable;
            if (!t->trainable && s->quant && t->ndim == 2 && l->units[u].role == MT_UNIT_BLOCK) t->quant = s->quant;
            if (s->kind == MT_PEFT_LORA && is_target(s, nm, &l->units[u], t, NULL)) add_lora(s, l, u, k);
            else if (s->kind == MT_PEFT_IA3 && is_target(s, nm, &l->units[u], &l->units[u].t[k], NULL)) add_ia3(s, nm, l, u, k);
        }
    }
    if (md) pcre2_match_data_free(md);
    if (re) pcre2_code_free(re);
    if (!any) return;
    for (int u = 0; u < l->n_units; u++) mt_unit_split_frozen(l, u);
    mt_layout_finish(l);
}

int mt_adapters_check_targets(const mt_adapter_spec *s, const mt_adapter_names *nm, const mt_layout *base,
                              size_t trained, mt_error *err) {
    const mt_layout *l = base;
    unsigned hit = 0;
    char names[512] = "";
    size_t nn = 0;
    if (s->kind != MT_PEFT_NONE)
        for (int u = 0; u < l->n_units; u++)
            for (int k = 0; k < l->units[u].n_tensors; k++) {
                const mt_tensor *t = &l->units[u].t[k];
                is_target(s, nm, &l->units[u], t, &hit);
                if (u == 1 && t->ndim == 2 && nn < sizeof names) { /* the first block's linears, for the message */
                    char m[128];
                    mt_adapters_module_name(nm, t->name, m, sizeof m);
                    const char *last = strrchr(m, '.');
                    nn += (size_t)snprintf(names + nn, sizeof names - nn, "%s%s", nn ? ", " : "", last ? last + 1 : m);
                }
            }
    if (!trained)
        return mt_errorf(err, "{freeze} '%s' matches every tensor of the model: nothing is left to train (check the "
                              "pattern against the Hugging Face names, e.g. h.0.attn.c_attn.weight)", s->freeze);
    if (s->kind == MT_PEFT_NONE || strcmp(s->targets, "all-linear") == 0) return 0;
    const char *list = s->targets[0] ? s->targets : default_targets(s, nm);
    const char *cur = list, *item;
    size_t len;
    for (int i = 0; mt_strlist_next(&cur, &item, &len); i++)
        if (!len || i >= 32 || !(hit >> i & 1u))
            return mt_errorf(err, "%s target ({%s-targets}, target_modules) '%.*s' names no linear module of this %s model (its blocks' linear "
                                  "modules: %s; or all-linear)", s->kind == MT_PEFT_IA3 ? "IA3" : "LoRA",
                             s->kind == MT_PEFT_IA3 ? "ia3" : "lora", (int)len, item, nm->model_name, names);
    return 0;
}
