/* meshtrain public API: the library (build/libmeshtrain.a) without the CLI,
 * so a program can run its own loop. Compile with -Iinclude -Isrc and link
 * build/libmeshtrain.a -lopenblas -lpcre2-8 -lm with mpicc -fopenmp.
 * Layers, bottom to top (see docs/design.md): */
#ifndef MESHTRAIN_H
#define MESHTRAIN_H
#include "core/error.h"      /* mt_error, mt_die */
#include "core/mem.h"        /* accounted allocation by category */
#include "core/philox.h"     /* counter-based RNG, init and dropout coordinates */
#include "core/json.h"       /* JSON reader/writer */
#include "core/trace.h"      /* Chrome trace-event timelines */
#include "ops/ops.h"         /* fp32 kernels, forward and backward */
#include "comm/comm.h"       /* communicators over MPI with counters and timeouts */
#include "comm/trace_merge.h" /* one timeline file for all ranks */
#include "parallel/mesh.h"   /* dp x pp x tp mesh and its groups */
#include "parallel/zero.h"   /* ZeRO 0-3 and hybrid sharding over units */
#include "parallel/pipeline_schedule.h" /* gpipe / 1f1b / interleaved schedules and their checker */
#include "models/family.h"    /* config, presets, families, unit layout */
#include "models/model.h"     /* parameters, activations, per-unit forward/backward */
#include "optim/optimizer.h" /* the optimizer table (AdamW, Adam, SGD, Adafactor, 8-bit AdamW), LR schedules, clipping */
#include "optim/opt_state.h" /* a rank's optimizer state streams per unit, in memory or offloaded */
#include "optim/adafactor.h" /* factored second moments, shard-aware */
#include "optim/adam8bit.h"  /* block-wise 8-bit AdamW */
#include "optim/offload.h"   /* optimizer state streamed from disk */
#include "optim/loss_scaler.h" /* fp16 dynamic loss scaling, non-finite gradient scan */
#include "data/tokenizer.h"  /* byte and GPT-2 BPE */
#include "data/shard.h"      /* llm.c token shards */
#include "data/loader.h"     /* global-index data order */
#include "ckpt/checkpoint.h" /* atomic, sharding-ready checkpoints */
#include "interop/weights.h"  /* a model's weights whole in memory (export/import) */
#include "interop/safetensors.h" /* safetensors files */
#include "interop/llmc.h"     /* llm.c model files */
#include "train/trainer.h"   /* the training loop */
#include "train/generate.h"  /* KV-cache sampling */
#endif
