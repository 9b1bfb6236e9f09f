/* Merging every rank's trace into one file on rank 0; protocol in
 * trace_merge.h. */
#include "comm/trace_merge.h"
#include "core/fileio.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>

void mt_trace_sync_origin(mt_trace *t, mt_comm *c) {
    mt_comm_barrier(c);
    t->origin_ns = mt_trace_now_ns();
}

/* Rank 0's verdict, broadcast so all members return the same thing. */
typedef struct {
    int32_t ok;
    char msg[MT_ERROR_LEN];
} verdict;

static int share_verdict(mt_comm *c, verdict *v, mt_error *err) {
    mt_comm_broadcast(c, v, sizeof *v, 0);
    v->msg[MT_ERROR_LEN - 1] = '\0';
    return v->ok ? 0 : mt_errorf(err, "%s", v->msg);
}

static int send_fragment(const mt_trace *t, mt_comm *c) {
    size_t len = mt_trace_format_events(t, NULL, 0);
    char *buf = malloc(len + 1);
    int64_t hdr[3] = {buf ? (int64_t)len : (int64_t)(len + 1), (int64_t)t->dropped, buf != NULL};
    mt_comm_send(c, hdr, sizeof hdr, 0, MT_TRACE_TAG_HEADER);
    if (!buf) return -1;
    mt_trace_format_events(t, buf, len + 1);
    for (size_t off = 0; off < len; off += MT_TRACE_MERGE_PIECE) {
        size_t n = len - off < MT_TRACE_MERGE_PIECE ? len - off : MT_TRACE_MERGE_PIECE;
        mt_comm_send(c, buf + off, n, 0, MT_TRACE_TAG_PIECE);
    }
    free(buf);
    return 0;
}

/* Rank 0: receives member r's fragment piece by piece into the document.
 * Keeps receiving after a write error so the sender is never left waiting. */
static void receive_fragment(mt_comm *c, int r, char *piece, mt_trace_doc *doc, verdict *v) {
    int64_t hdr[3];
    mt_comm_recv(c, hdr, sizeof hdr, r, MT_TRACE_TAG_HEADER);
    if (!hdr[2]) {
        if (v->ok)
            snprintf(v->msg, sizeof v->msg, "rank %d cannot allocate %lld bytes to format its trace", r,
                     (long long)hdr[0]);
        v->ok = 0;
        return;
    }
    size_t len = (size_t)hdr[0];
    doc->dropped += (uint64_t)hdr[1];
    for (size_t off = 0; off < len; off += MT_TRACE_MERGE_PIECE) {
        size_t n = len - off < MT_TRACE_MERGE_PIECE ? len - off : MT_TRACE_MERGE_PIECE;
        mt_comm_recv(c, piece, n, r, MT_TRACE_TAG_PIECE);
        if (!v->ok) continue;
        mt_error e;
        /* The first piece starts a fragment (comma before it); later pieces continue it. */
        int rc = off == 0 ? mt_trace_doc_add(doc, piece, n, 0, &e) : (fwrite(piece, 1, n, doc->f) == n ? 0 : -1);
        if (rc && off) snprintf(e.msg, sizeof e.msg, "cannot write trace file %s: %s", doc->path, strerror(errno));
        if (rc) {
            v->ok = 0;
            snprintf(v->msg, sizeof v->msg, "%s", e.msg);
        }
    }
}

int mt_trace_merge_write(const mt_trace *t, mt_comm *c, const char *path, mt_error *err) {
    int rank = mt_comm_rank(c), size = mt_comm_size(c);
    verdict v;
    memset(&v, 0, sizeof v);
    FILE *f = NULL;
    char *piece = NULL, *tmp = NULL; /* written to a temporary, renamed when whole */
    if (rank == 0) {
        v.ok = 1;
        piece = malloc(MT_TRACE_MERGE_PIECE);
        if (!piece) {
            v.ok = 0;
            snprintf(v.msg, sizeof v.msg, "rank 0 cannot allocate %u bytes to merge the trace",
                     MT_TRACE_MERGE_PIECE);
        } else {
            mt_error e;
            if (!(f = mt_fopen_temp(path, &tmp, &e))) {
                v.ok = 0;
                snprintf(v.msg, sizeof v.msg, "cannot create trace file %s: %s", path, strerror(errno));
            }
        }
    }
    if (share_verdict(c, &v, err)) {
        free(piece);
        if (f) mt_fcommit_temp(f, tmp, path, 1, &(mt_error){{0}}); /* removes it */
        return -1;
    }
    if (rank != 0) {
        send_fragment(t, c); /* a failure here is reported by rank 0's verdict */
        return share_verdict(c, &v, err);
    }
    /* Rank 0: its own fragment first, then the others in rank order. */
    mt_trace_doc doc;
    mt_error e;
    if (mt_trace_doc_begin(&doc, f, path, &e)) {
        v.ok = 0;
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    }
    size_t len = mt_trace_format_events(t, NULL, 0);
    char *own = malloc(len + 1);
    if (!own && v.ok) {
        v.ok = 0;
        snprintf(v.msg, sizeof v.msg, "rank 0 cannot allocate %zu bytes to format its trace", len + 1);
    }
    if (own && v.ok) {
        mt_trace_format_events(t, own, len + 1);
        if (mt_trace_doc_add(&doc, own, len, t->dropped, &e)) {
            v.ok = 0;
            snprintf(v.msg, sizeof v.msg, "%s", e.msg);
        }
    }
    free(own);
    for (int r = 1; r < size; r++) receive_fragment(c, r, piece, &doc, &v);
    if (v.ok && mt_trace_doc_end(&doc, &e)) {
        v.ok = 0;
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    }
    if (mt_fcommit_temp(f, tmp, path, !v.ok, &e) && v.ok) {
        v.ok = 0;
        snprintf(v.msg, sizeof v.msg, "%s", e.msg);
    }
    free(piece);
    return share_verdict(c, &v, err);
}
