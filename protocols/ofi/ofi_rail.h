/* What ofi_rail.c offers the rest of the ofi module: status conversion,
 * tags, the rails' lock, and opening, polling and closing the rails. */
#ifndef NX_PROTO_OFI_RAIL_H
#define NX_PROTO_OFI_RAIL_H

#include "ofi.h"

int ofi_status_to_nx(int status);
/* The tag of fragment `frag` of frame `seq` from sender `id`. */
uint64_t ofi_tag(uint64_t id, uint32_t seq, uint32_t frag);
/* Every libfabric call on a rail's domain is bracketed by these: they take
 * the rail's lock when the provider needs it (FI_THREAD_DOMAIN). */
static inline void ofi_rail_lock(struct ofi_rail *r) {
  if (r->serialize)
    nxu_lock(&r->lock);
}

static inline void ofi_rail_unlock(struct ofi_rail *r) {
  if (r->serialize)
    nxu_unlock(&r->lock);
}

/* Opens the rails fi_getinfo offers (shm and the first other provider
 * that works). Returns 0 with at least one rail, or a negative code with
 * the reason in `why`. */
int ofi_rails_open(struct ofi *o, char *why, size_t why_len);
void ofi_rails_close(struct ofi *o);
/* Reads completions and handles them; returns the events handled. */
int ofi_rail_poll(struct ofi_rail *r);
/* Posts what could not be posted before (EAGAIN). */
void ofi_rail_retry(struct ofi_rail *r);
/* Frees every frame still held for reordering (finalize). */
void ofi_srcs_free(struct ofi *o);
/* The process sending as `id` is dead: its frames whose fragments are
 * still awaited fail (the core reports a placed one). Driver only. */
void ofi_src_lost(struct ofi *o, uint64_t id);
/* Whether `a` (`len` bytes, `format`) is an address of rail `r`'s format
 * that fi_av_insert may be given. */
int ofi_addr_ok(const struct ofi_rail *r, uint32_t format, const uint8_t *a,
                size_t len);

#endif /* NX_PROTO_OFI_RAIL_H */
