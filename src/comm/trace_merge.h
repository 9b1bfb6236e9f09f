/* The collective side of tracing (core/trace.h records one process; this
 * file lives in comm/ because core must not depend on comm).
 *
 * mt_trace_merge_write gathers the trace of every member of c into ONE
 * Chrome trace file written by member 0. Protocol, per member r > 0, in rank
 * order: a header of three int64 {fragment bytes, dropped events, ok} on tag
 * MT_TRACE_TAG_HEADER, then the fragment in pieces of at most
 * MT_TRACE_MERGE_PIECE bytes on tag MT_TRACE_TAG_PIECE (so member 0 holds one
 * piece at a time and no single message exceeds an MPI int). Member 0 first
 * creates the file and broadcasts whether it could, and at the end
 * broadcasts the outcome, so every member returns the same status and
 * message and no member is left waiting when the file cannot be written.
 * A member that cannot format its fragment (out of memory) sends ok = 0 and
 * the merge fails on every member with that rank named.
 * Call it on every member of c at the same point, with no other
 * point-to-point messages in flight on c on those tags. */
#ifndef MT_COMM_TRACE_MERGE_H
#define MT_COMM_TRACE_MERGE_H
#include "comm/comm.h"
#include "core/trace.h"

#define MT_TRACE_TAG_HEADER 32700
#define MT_TRACE_TAG_PIECE 32701
#define MT_TRACE_MERGE_PIECE (1u << 20)

/* Collective over c. Returns 0, or -1 with err (the same on every member). */
int mt_trace_merge_write(const mt_trace *t, mt_comm *c, const char *path, mt_error *err);

/* Collective over c: a barrier, then origin = now on every member, so the
 * ranks' timelines line up (to within the barrier's exit skew). Call it
 * before recording. */
void mt_trace_sync_origin(mt_trace *t, mt_comm *c);

#endif
