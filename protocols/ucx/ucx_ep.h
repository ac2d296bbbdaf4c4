/* What ucx_ep.c offers the rest of the ucx module: the lock and the
 * hand-over to the core, status conversion, and the peers. */
#ifndef NX_PROTO_UCX_EP_H
#define NX_PROTO_UCX_EP_H

#include "ucx.h"

int ucx_status_to_nx(ucs_status_t status);

static inline void ucx_lock(struct ucx *u) { nxu_lock(&u->lock); }

/* Lock held, with records to hand over: takes them, unlocks, and hands
 * them to the core (ucx_unlock). */
void ucx_handover(struct ucx *u, int deliver);

/* Takes what the callbacks recorded (the deliveries only when `deliver`:
 * only progress and finalize deliver, so frames reach the core in order),
 * unlocks, and hands it to the core. Inline, because after most locked
 * sections (every empty poll, every send UCX completed at once) there is
 * nothing: then it is the unlock alone. */
static inline void ucx_unlock(struct ucx *u, int deliver) {
  uintptr_t any = (uintptr_t)u->done | (uintptr_t)u->dropped |
                  (uintptr_t)u->reports |
                  (deliver ? (uintptr_t)u->ready : (uintptr_t)0);
  if (__builtin_expect(any != 0, 0)) {
    ucx_handover(u, deliver);
    return;
  }
  if (deliver)
    u->batch = NULL; /* rule 3 of ucx.h: NULL already outside progress */
  nxu_unlock(&u->lock);
}

int ucx_connect(void *state, const struct nx_desc *peer,
                struct nx_endpoint **ep);
void ucx_disconnect(void *state, struct nx_endpoint *ep);
int ucx_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
             unsigned flags);
int ucx_endpoint_info(void *state, struct nx_endpoint *ep, char *buf,
                      size_t len);
/* Parses a descriptor's data; returns 0 and points *addr into it, or
 * NX_EUNREACH. */
int ucx_desc_parse(const struct ucx *u, const struct nx_desc *d,
                   const uint8_t **uuid, const uint8_t **addr,
                   size_t *addr_len);
uint64_t ucx_hash(const uint8_t *p, size_t n);
/* Lock held: marks peers the error handler pushed dead and closes their
 * endpoints. */
void ucx_peers_service(struct ucx *u);
/* Lock held: starts closing every endpoint (finalize); `force` cancels
 * what they still send instead of letting it finish. */
void ucx_peers_close_all(struct ucx *u, int force);
/* Lock held: lets go of the closes that did not complete (finalize, just
 * before the worker goes: UCX requires every request released then). */
void ucx_peers_release_closes(struct ucx *u);
/* Lock held: takes every send still in flight from UCX (which will not
 * call back for it) and fails it with `status` (finalize). */
void ucx_peers_detach_all(struct ucx *u, int status);
/* Lock held: sends not yet completed, over all peers. */
unsigned ucx_peers_pending(struct ucx *u);
/* Frees every peer (finalize, after the worker is gone). */
void ucx_peers_free_all(struct ucx *u);
/* After unlocking: reports the failed peers to the core. */
void ucx_peers_report(struct ucx *u, struct ucx_peer *list);

#endif /* NX_PROTO_UCX_EP_H */
