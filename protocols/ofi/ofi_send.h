/* What ofi_send.c offers ofi.c: peers, the send path and send completion
 * (ofi.c installs the last and ofi_peer_kill as the hooks in struct ofi). */
#ifndef NX_PROTO_OFI_SEND_H
#define NX_PROTO_OFI_SEND_H

#include "ofi.h"

/* Finds the peer with the target's uuid or adds one (address vector,
 * liveness, wake-up); NULL with the code in `*err`. */
struct ofi_peer *ofi_peer_get(struct ofi *o, const struct ofi_target *t,
                              int *err);
int ofi_send_frame(struct ofi *o, struct ofi_peer *p, nx_frame_t *frame,
                   int exempt);
/* A completion (or its error) for a part of a send (a CTX_TX context). */
void ofi_send_completed(struct ofi *o, struct ofi_ctx *part, int err);
/* Driver only: posts queued ops and reports dead peers. */
void ofi_service(struct ofi *o);
/* Marks a peer dead; the driver reports it and fails its frames. */
void ofi_peer_kill(struct ofi *o, struct ofi_peer *p, const char *why);
/* The process whose sender id is `id` refused our key: its peer is
 * reported failed with NX_EACCES. */
void ofi_peer_refused(struct ofi *o, uint64_t id);
/* Whether any live peer still has frames queued or in flight. */
int ofi_sends_pending(struct ofi *o);
/* Finalize: fails every frame still held and frees the peers. */
void ofi_peers_free(struct ofi *o);

#endif /* NX_PROTO_OFI_SEND_H */
