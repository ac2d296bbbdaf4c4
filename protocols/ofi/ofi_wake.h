/* What ofi_wake.c offers ofi.c and ofi_send.c: the module's wait fd, the
 * wake-up channel and same-host peer liveness. */
#ifndef NX_PROTO_OFI_WAKE_H
#define NX_PROTO_OFI_WAKE_H

#include "ofi.h"

int ofi_wake_init(struct ofi *o, char *why, size_t why_len);
void ofi_wake_fini(struct ofi *o);
/* Connect: liveness (same host) and the wake-up channel (shm). */
void ofi_wake_peer(struct ofi *o, struct ofi_peer *p);
void ofi_wake_peer_fini(struct ofi_peer *p);
/* 1 if the peer's process is known to be running now (its pidfd), 0 if it
 * has ended or this process cannot tell (another host, another pid
 * namespace). */
int ofi_wake_peer_alive(const struct ofi_peer *p);
/* After a message to `p` is posted: wakes it if it sleeps. */
void ofi_wake_after_send(struct ofi *o, struct ofi_peer *p);
/* progress(): `events` were handled in this call; returns more events
 * (peer deaths found, work seen while arming). */
int ofi_wake_progress(struct ofi *o, int events);
/* The core is about to sleep (the `arm` slot): arms every wake-up source now;
 * returns the events found meanwhile (then the core polls again). */
int ofi_wake_arm(struct ofi *o);
/* Reads /proc for this process's identity (pid, start time, pid ns). */
void ofi_self_identity(uint32_t *pid, uint64_t *start, uint64_t *pidns);

#endif /* NX_PROTO_OFI_WAKE_H */
