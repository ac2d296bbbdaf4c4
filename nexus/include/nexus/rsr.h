/* Remote service requests: one-way, asynchronous invocation of a handler in the
 * context a gp names. */
#ifndef NEXUS_RSR_H
#define NEXUS_RSR_H

#include "export.h"

#include <stddef.h>

#include "buffer.h"
#include "context.h"
#include "gp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags for nx_rsr_send_flags. */
enum nx_rsr_flags {
  /* Fail with NX_EAGAIN instead of blocking when the protocol's send queue
   * to the destination is full. */
  NX_RSR_NONBLOCK = 1u << 0,
  /* Ordered delivery: the RSRs one context sends with this flag to one
   * context run there one at a time, in the order of their sends, over
   * any modules, gateways and fallbacks between them (docs/design.md
   * section 7, "Ordered delivery"). */
  NX_RSR_ORDERED = 1u << 1
};

/* Step 1 of an RSR: starts a buffer for handler `handler` at `gp`.
 * `size_hint` is the payload size expected (buffers grow as needed).
 * `*buf` is written only on success. Returns 0, NX_EINVAL (NULL, a null gp,
 * or handler id 0), NX_ENOMEM or NX_ENOTINIT. */
NX_EXTERN int nx_rsr_init(nx_buffer_t **buf, const nx_gp_t *gp,
                          nx_handler_id_t handler, size_t size_hint);

/* The same, naming the handler (its id is nx_handler_id(name)). */
NX_EXTERN int nx_rsr_init_name(nx_buffer_t **buf, const nx_gp_t *gp,
                               const char *handler, size_t size_hint);

/* Step 3: sends the RSR. Never waits for the handler; the buffer belongs to
 * the runtime afterwards, whatever the result (except for NX_EINVAL: a
 * buffer that is not an unsent RSR buffer is not taken), and may be freed
 * before this returns: drop the pointer. Sending it again, or releasing it
 * (nx_buffer_release), returns NX_EINVAL without reading it. Returns 0;
 * NX_EINVAL; NX_ENOTINIT; NX_ENOMEM; NX_EUNREACH when no loaded protocol
 * reaches the destination; the code its process was lost with, once it is
 * known lost (NX_EPEERDEAD, NX_ENOCONTEXT for a process context this
 * process destroyed, or the error of its last route); or an error of the
 * protocol module (NX_EAGAIN with NX_RSR_NONBLOCK when its send queue is
 * full, NX_EMSGSIZE for a frame too large for it, ...). A destination
 * context or handler that turns out not to exist is otherwise reported at
 * the destination (dropped, counted, error callback), not here. The gp
 * given to nx_rsr_init must stay valid until this call. */
NX_EXTERN int nx_rsr_send(nx_buffer_t *buf);
NX_EXTERN int nx_rsr_send_flags(nx_buffer_t *buf, unsigned flags);

/* Waits until every RSR this process's nx_rsr_send accepted for a context
 * of another process is settled: its handler ran there (or the
 * destination dropped it and reported that there), or it was reported to
 * this process's error callback as lost (its process died: NX_EPEERDEAD,
 * or the error of the route that failed). Waiting drives progress.
 * `timeout_ms` bounds the wait (-1: none); RSRs still unsettled then are
 * not reported, they may yet arrive (nx_finalize reports them). Not from a
 * handler. Returns 0, NX_ETIMEDOUT, NX_EINVAL (timeout_ms < -1),
 * NX_EBUSY (called from a handler) or NX_ENOTINIT. docs/design.md section
 * 9 tells how the runtime learns that an RSR ran. */
NX_EXTERN int nx_flush(int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_RSR_H */
