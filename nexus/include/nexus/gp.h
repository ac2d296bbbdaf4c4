/* Global pointers: movable references to an address in a context, with that
 * context's protocol descriptors. */
#ifndef NEXUS_GP_H
#define NEXUS_GP_H

#include "export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nxi_dlist;

/* A global pointer is a value: copy it with nx_gp_copy, drop it with
 * nx_gp_release. `protos` is the interned, reference-counted descriptor list
 * of the context it names; treat the members as private. */
typedef struct nx_gp {
  uint64_t context;
  uint64_t address;
  struct nxi_dlist *protos;
} nx_gp_t;

#define NX_GP_NULL                                                             \
  { 0, 0, 0 }

/* Makes a gp to `address` in the calling thread's current context.
 * Returns 0, NX_EINVAL or NX_ENOTINIT. */
NX_EXTERN int nx_gp_make(void *address, nx_gp_t *gp);

/* Copies `src` into `dst` (dst gets its own reference). Returns 0 or
 * NX_EINVAL. */
NX_EXTERN int nx_gp_copy(const nx_gp_t *src, nx_gp_t *dst);

/* Drops the gp's reference and sets it to NX_GP_NULL. Releasing a null gp
 * is allowed and does nothing. Returns 0 or NX_EINVAL (NULL argument). */
NX_EXTERN int nx_gp_release(nx_gp_t *gp);

/* Returns 1 if both name the same address in the same context, else 0. */
NX_EXTERN int nx_gp_equal(const nx_gp_t *a, const nx_gp_t *b);

/* Returns 1 for a null gp (names nothing). */
NX_EXTERN int nx_gp_is_null(const nx_gp_t *gp);

/* The id of the context the gp names (0 for a null gp). */
NX_EXTERN uint64_t nx_gp_context(const nx_gp_t *gp);

/* The address the gp names. Meaningful only inside its own context. */
NX_EXTERN void *nx_gp_address(const nx_gp_t *gp);

/* The name of the protocol module that would carry an RSR to this gp
 * ("local", "tcp", ...), "gw" when it goes through a gateway, or NULL if
 * none reaches it. */
NX_EXTERN const char *nx_gp_protocol(const nx_gp_t *gp);

/* What the chosen protocol module says carries RSRs to this gp underneath
 * (for example "ucx: sysv/memory, posix/memory"), as one line in `buf`;
 * through a gateway "via gw (<module to the gateway>) then <the first
 * module in the gateway's order that the destination offers>".
 * Returns 0; NX_EUNREACH (no protocol reaches it, or before nx_init);
 * NX_ENOTSUP (the module does not say: `buf` then holds just the module
 * name); NX_EINVAL; NX_ENOMEM; the code its process was lost with (as
 * nx_rsr_send); or the module's error. */
NX_EXTERN int nx_gp_protocol_info(const nx_gp_t *gp, char *buf, size_t len);

/* Gateways (docs/design.md, "Gateways"): a process that loads modules its
 * peers do not share can pass RSRs between them.
 *
 * Makes this process a gateway: it forwards, without running a handler,
 * RSRs sent through it to the processes that joined it. Gps made from now
 * on say so. NX_GATEWAY=1 calls it in nx_init. Returns 0 (also when it is
 * one already), NX_ENOTINIT, NX_ENOMEM, NX_EBUSY (this process's
 * descriptor list is full: 16 entries, modules and gateways together). */
NX_EXTERN int nx_gateway_enable(void);

/* Joins the gateway whose process `gw` names: registers this process with
 * it and waits (up to 10 s) for its answer. Gps made from now on carry the
 * gateway, so that a process that reaches none of this process's modules
 * but reaches the gateway sends through it. Call it from a program thread,
 * not a handler. Returns 0 (also when joined already); NX_ENOTSUP (its
 * process is not a gateway); NX_EINVAL (NULL, a null gp, or a gp to this
 * process); NX_EBUSY (called in a handler, or this process's descriptor
 * list is full: 16 entries, modules and gateways together); NX_EMSGSIZE
 * (the gateway's descriptor list is too long to carry in this process's);
 * NX_ETIMEDOUT; NX_ENOMEM; NX_ENOTINIT; the error sending to it; or the
 * gateway's error taking this process in. */
NX_EXTERN int nx_gateway_use(const nx_gp_t *gw);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_GP_H */
