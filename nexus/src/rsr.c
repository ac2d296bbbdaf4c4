/* Remote service requests: start a buffer for a handler at a gp, then hand the
 * sealed frame to the chosen protocol. */
#include "buf.h"
#include "dlist.h"
#include "engine.h"

int nx_rsr_init(nx_buffer_t **buf, const nx_gp_t *gp, nx_handler_id_t handler,
                size_t size_hint) {
  if (buf == NULL || gp == NULL || gp->context == 0 || gp->protos == NULL ||
      handler == 0)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  struct nx_buffer *b = nxi_buffer_alloc(size_hint);
  if (b == NULL)
    return NX_ENOMEM;
  b->kind = NXI_BUF_SEND;
  atomic_init(&b->urefs, 1);
  b->handler = handler;
  b->context = gp->context;
  b->address = gp->address;
  b->dl = gp->protos;
  if (nxi_buffer_live_add(b, NXI_LIVE_RSR) < 0) {
    nxi_buffer_free(b);
    return NX_ENOMEM;
  }
  *buf = b;
  return 0;
}
int nx_rsr_init_name(nx_buffer_t **buf, const nx_gp_t *gp, const char *handler,
                     size_t size_hint) {
  if (handler == NULL || handler[0] == '\0')
    return NX_EINVAL;
  return nx_rsr_init(buf, gp, nx_handler_id(handler), size_hint);
}

int nx_rsr_send_flags(nx_buffer_t *b, unsigned flags) {
  /* A buffer already sent (or released) may be freed or queued in a
   * module by now: refuse it by address, before reading it. */
  if (b == NULL || !nxi_buffer_live_take(b))
    return NX_EINVAL;
  /* From here on the buffer is the runtime's. */
  atomic_store_explicit(&b->urefs, 0, memory_order_relaxed);
  atomic_store_explicit(&b->refs, 1, memory_order_relaxed);
  if (!nxi_ready()) {
    nxi_buffer_refs_status(b, NX_ENOTINIT);
    nxi_buffer_free(b);
    return NX_ENOTINIT;
  }
  struct nxi_route *rt;
  int r = nxi_dlist_route(b->dl, &rt);
  if (r == 0)
    r = atomic_load_explicit(&rt->failed, memory_order_relaxed);
  if (r == 0) {
    nxi_buffer_seal(b);
    /* Values put by reference: sent from where they are by a module that
     * takes that many iovecs, copied into the data once for any other. */
    if (b->frame.iovcnt > 2 &&
        (uint32_t)b->frame.iovcnt > rt->mod->ops->iov_max)
      if ((r = nxi_buffer_flatten(b)) == 0)
        nxi_buffer_seal(b);
  }
  if (r < 0) {
    nxi_buffer_refs_status(b, r);
    nxi_buffer_free(b);
    return r;
  }
  nxi_buffer_refs_status(b, 0);
  atomic_fetch_add_explicit(&nxi_rt.rsr_sent, 1, memory_order_relaxed);
  /* A full queue to the peer: help the transfers along, then try again
   * (memory stays bounded; the module says when it has room). */
  while ((r = rt->mod->ops->send(rt->mod->state, rt->ep, &b->frame, flags)) ==
             NX_EAGAIN &&
         !(flags & NX_RSR_NONBLOCK))
    nxi_progress_help();
  if (r < 0) {
    atomic_fetch_sub_explicit(&nxi_rt.rsr_sent, 1, memory_order_relaxed);
    nxi_buffer_refs_status(b, r);
    nxi_buffer_free(b);
  } else if (!atomic_load_explicit(&rt->mod->sent, memory_order_relaxed)) {
    /* The module has a transfer to progress: poll it every round again
     * (dispatch.c). Written only when it changes: senders on several
     * threads would otherwise bounce the line. */
    atomic_store_explicit(&rt->mod->sent, 1, memory_order_relaxed);
  }
  return r;
}

int nx_rsr_send(nx_buffer_t *b) { return nx_rsr_send_flags(b, 0); }
