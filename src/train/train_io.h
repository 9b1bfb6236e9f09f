/* The trainer's files: token shards in, checkpoints in and out. */
#ifndef MT_TRAIN_TRAIN_IO_H
#define MT_TRAIN_TRAIN_IO_H
#include "train/state.h"

typedef struct {
    int has_config;
    mt_model_config cfg;
    int64_t step;
    int gptq_bits, gptq_group_size; /* imported from a GPTQ directory (state "gptq"): its bits, group size; 0 */
} mt_ckpt_info;

/* Reads a whole llm.c token shard (uint16 or uint32 ids) into a malloc'd
 * uint32 array. With vocab_size > 0 every id must be below it (else -1 with
 * a line naming the file, the position and the id); 0 skips the check (for
 * a caller that infers the vocabulary from the data). */
int mt_train_read_tokens(const char *path, int vocab_size, uint32_t **tokens, size_t *n, mt_error *err);
/* An extended shard's per-token flags (data/shard.h: the loss mask and
 * document starts) as a malloc'd *flags and its window length; NULL and 0
 * for a plain shard. */
int mt_train_read_flags(const char *path, uint8_t **flags, int *window, mt_error *err);
/* Reads the model config and step of a checkpoint directory. */
int mt_train_ckpt_peek(const char *dir, mt_ckpt_info *info, mt_error *err);
/* Loads parameters (and, when resuming, optimizer state and step). */
int mt_train_ckpt_load(mt_trainer *tr, const char *dir, int resume, mt_error *err);
/* The frozen stores of the model's held units from base checkpoint dir (the
 * quantized ones quantized; {quantize-base} gptq: the codes of the GPTQ
 * directory the base was imported from, which must still dequantize to the
 * base's weights bit for bit). */
int mt_model_read_frozen(mt_model *m, const char *dir, mt_error *err);
/* Loads only the parameters of a checkpoint into a model of the same config. */
int mt_model_load_checkpoint(mt_model *m, const char *dir, mt_error *err);
/* Collective: a checkpoint of the run's state in its checkpoint directory. */
int mt_trainer_save(mt_trainer *tr, mt_error *err);
/* {ckpt-async}. Collective: snapshots the state mt_trainer_save would write
 * into a host buffer (allocated at the first call, accounted as scratch)
 * and starts a thread writing this rank's data file from it; the manifest is
 * written later, on this thread, by mt_trainer_save_async_finish. A save
 * still in flight is finished (committed) first: at most one is. */
int mt_trainer_save_async(mt_trainer *tr, mt_error *err);
/* This rank's writer is still writing (0: none in flight, or done). */
int mt_trainer_save_async_busy(const mt_trainer *tr);
/* The step of the save in flight and when its snapshot started, or -1. */
int64_t mt_trainer_save_async_step(const mt_trainer *tr, double *started);
/* Collective (every rank has the same save in flight or none): waits for
 * this rank's writer; commit: the ranks agree and rank 0 writes the manifest
 * (the checkpoint is then complete), else the files are left uncommitted
 * (the next save removes them). No save in flight: returns 0 at once. */
int mt_trainer_save_async_finish(mt_trainer *tr, int commit, mt_error *err);
/* Waits for a writer still running (nothing committed) and frees the buffers. */
void mt_trainer_save_async_free(mt_trainer *tr);
/* Test aid: writes the current gradients as raw fp32 in layout order. */
void mt_train_dump_grads(mt_trainer *tr, const char *path);

#endif
