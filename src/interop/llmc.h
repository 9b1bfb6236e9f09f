/* llm.c GPT-2 model files (train_gpt2.c's gpt2_build_from_checkpoint):
 * a header of 256 little-endian int32 — [0] magic 20240326, [1] version
 * (3: fp32, 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp — then
 * the parameters back to back in llm.c's order: wte [Vp,C], wpe [maxT,C],
 * ln1w [L,C], ln1b [L,C], qkvw [L,3C,C], qkvb [L,3C], attprojw [L,C,C],
 * attprojb [L,C], ln2w [L,C], ln2b [L,C], fcw [L,4C,C], fcb [L,4C],
 * fcprojw [L,C,4C], fcprojb [L,C], lnfw [C], lnfb [C]. llm.c's weights are
 * [out, in] like ours, so no transposes are needed.
 *
 * Export writes version 3 (fp32) with our padded vocabulary. Import accepts
 * version 3 and 5, checks the header ranges, C % NH, Vp >= V and that the
 * file size is exactly the header plus the parameters, and re-pads wte to
 * mt_pad_vocab(V) rows (extra rows zero). n_head > 0 must agree with the
 * header's NH (the header always carries it). */
#ifndef MT_INTEROP_LLMC_H
#define MT_INTEROP_LLMC_H
#include "interop/weights.h"

#define MT_LLMC_MAGIC 20240326
int mt_llmc_export(const char *path, const mt_weights *w, mt_error *err);
int mt_llmc_import(const char *path, int n_head, mt_weights *out, mt_error *err);

#endif
