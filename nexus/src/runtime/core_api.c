/* The core services for modules (nexus/protocol.h, struct nx_core_api):
 * receiving and sending frames, and a module's reports of failed or misbehaving
 * peers. */
#include "rsr/dispatch.h"
#include "runtime/core_api.h"

#include "contexts/context.h"

#include "modules/dlist.h"
#include "engine/engine.h"
#include "buffers/frame.h"
#include "rsr/send.h"
#include "services/ledger.h"

static void core_log(int level, const char *module, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nxi_vlog(level, module, fmt, ap);
  va_end(ap);
}

/* A received frame's buffer: the header's fields and the iovecs. The
 * header lives on in the fields only: b->hdr is written again from them
 * (nxi_buffer_seal) should a gateway pass the frame on. */
static void recv_init(struct nx_buffer *b, const struct nxi_frame_hdr *f) {
  b->kind = NXI_BUF_RECV;
  b->fmt = f->fmt;
  b->handler = f->handler;
  b->context = f->context;
  b->address = f->address;
  b->source = f->source;
  b->order = f->order;
  b->hflags = f->flags;
  b->len = (size_t)f->len;
  b->tail_at = f->lead;
  b->tail_end = f->len;
  b->frame.iov[0].iov_base = b->hdr;
  b->frame.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  b->frame.iov[1].iov_base = b->data;
  b->frame.iov[1].iov_len = (size_t)f->len;
  b->frame.iovcnt = 2;
  b->frame.iovs = b->frame.iov;
  b->frame.len = NX_FRAME_HDR_SIZE + (size_t)f->len;
}

/* A buffer for the frame `hdr` announces, with room for its whole
 * payload, or (`lead_only`, receive placement: protocol.h, docs/design.md)
 * for its lead only when it has one. */
static int frame_alloc(const void *hdr, nx_frame_t **frame, int lead_only) {
  struct nxi_frame_hdr f;
  if (nxi_frame_hdr_decode(hdr, &f) < 0) {
    atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
    return NX_EPROTO;
  }
  size_t room = lead_only && f.lead != 0 ? f.lead : (size_t)f.len;
  struct nx_buffer *b = nxi_buffer_alloc(room);
  if (b == NULL)
    return NX_ENOMEM;
  recv_init(b, &f);
  b->len = room;
  b->frame.iov[1].iov_len = room;
  *frame = &b->frame;
  return 0;
}

static int core_frame_alloc(const void *hdr, nx_frame_t **frame) {
  return frame_alloc(hdr, frame, 0);
}

static int core_frame_alloc_lead(const void *hdr, nx_frame_t **frame) {
  return frame_alloc(hdr, frame, 1);
}

/* Asks the handler's placement callback where the tail of `b` (its lead
 * in) goes: the memory, or NULL (place_status says why). */
static void *place_ask(struct nx_buffer *b, size_t tail) {
  struct nx_context *ctx = nxi_context_get(b->context);
  if (ctx == NULL)
    return NULL; /* another process's (a gateway's frame), or none */
  const struct nxi_handler *h = nxi_handler_find(ctx, b->handler);
  nx_place_fn fn = h != NULL ? h->place : NULL;
  void *where = NULL;
  if (fn != NULL) {
    nx_place_t w = {NULL, 0};
    b->pos = 0;
    nx_context_t *old = nxi_context_swap(ctx);
    int r = fn(ctx, (void *)(uintptr_t)b->address, b, tail, &w);
    nxi_context_swap(old);
    b->pos = 0;
    if (r > 0 && w.addr != NULL && w.len >= tail) {
      where = w.addr;
      b->place_status = 1;
      /* Large frames only (NX_PLACE_MIN): a shared counter costs nothing
       * here. */
      atomic_fetch_add_explicit(&nxi_rt.rsr_placed, 1, memory_order_relaxed);
    } else {
      b->place_status = r > 0 ? NX_EMSGSIZE : r < 0 ? r : 0;
    }
  }
  nxi_context_put(ctx);
  return where;
}

static int core_frame_place(nx_frame_t *frame) {
  struct nx_buffer *b = NXI_CONTAINER_OF(frame, struct nx_buffer, frame);
  size_t tail = (size_t)(b->tail_end - b->tail_at);
  void *where = place_ask(b, tail);
  if (where != NULL) {
    b->place = where;
    b->frame.iov[1].iov_base = where;
  } else {
    /* Declined: the tail follows the lead in the core's memory. */
    if (nxi_buffer_reserve(b, tail) < 0)
      return NX_ENOMEM;
    b->frame.iov[1].iov_base = b->data + b->len;
    b->len += tail;
  }
  b->frame.iov[1].iov_len = tail;
  return 0;
}

/* The payload stays where the module received it (protocol.h). */
static int core_frame_wrap(const void *hdr, void *data, size_t len,
                           void (*release)(void *arg, void *data), void *arg,
                           nx_frame_t **frame) {
  if (release == NULL || ((uintptr_t)data & 7) != 0)
    return NX_EINVAL;
  struct nxi_frame_hdr f;
  if (nxi_frame_hdr_decode(hdr, &f) < 0 || f.len != len) {
    atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
    return NX_EPROTO;
  }
  struct nx_buffer *b = nxi_buffer_alloc(0);
  if (b == NULL)
    return NX_ENOMEM;
  nxi_buffer_own(b, data, len, release, arg);
  recv_init(b, &f);
  *frame = &b->frame;
  return 0;
}

static void core_frame_deliver(nx_frame_t *frame) {
  nxi_deliver(NXI_CONTAINER_OF(frame, struct nx_buffer, frame));
}

static void core_frame_free(nx_frame_t *frame) {
  struct nx_buffer *b = NXI_CONTAINER_OF(frame, struct nx_buffer, frame);
  /* A program that named memory for it hears that it will not come; not
   * from here, where the module may hold its lock. */
  if (b->place != NULL)
    nxi_drop_later(NX_EPEERDEAD, b->context, b->handler);
  nxi_buffer_free(b);
}

/* A frame the module could not deliver (its peer died with it queued) is
 * an RSR that failed after nx_rsr_send returned: report it, unless the
 * ledger did already (the process was found lost first), or send it again
 * when it is ordered. */
static void core_send_done(nx_frame_t *frame, int status) {
  nxi_send_done(NXI_CONTAINER_OF(frame, struct nx_buffer, frame), status);
}

/* The sent buffer becomes the received one: same bytes, same format tag,
 * now read-only and held by the runtime for its handler. */
static void core_handover(nx_frame_t *frame) {
  struct nx_buffer *b = NXI_CONTAINER_OF(frame, struct nx_buffer, frame);
  /* The handler reads one payload: values put by reference join it. */
  int r = b->xr != NULL ? nxi_buffer_flatten(b) : 0; /* no call per RSR */
  if (r < 0) {
    nxi_buffer_refs_status(b, r);
    nxi_drop(r, b->context, b->handler);
    nxi_buffer_free(b);
    return;
  }
  b->kind = NXI_BUF_RECV;
  b->pos = 0;
  nxi_deliver(b);
}

static void core_peer_failed(struct nx_endpoint *ep, int status) {
  if (ep == NULL)
    return;
  nxi_dlist_peer_failed(ep, status < 0 ? status : NX_EPEERDEAD);
  /* The driver falls back on the routes through it (dlist.c). */
  atomic_store_explicit(&nxi_eng.poll_all, 1, memory_order_relaxed);
  nxi_progress_wake();
}

static void core_bad_peer(const char *module, const char *why) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(0, module, "bad input from a peer: %s", why);
}

/* A module thread made work ready: poll every module at once. */
static void core_wake(void) {
  atomic_store_explicit(&nxi_eng.poll_all, 1, memory_order_relaxed);
  nxi_progress_wake();
}

const struct nx_core_api nxi_core_api = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .process_uuid = nxi_rt.process_uuid,
    .host_uuid = nxi_rt.host_uuid,
    .frame_alloc = core_frame_alloc,
    .frame_deliver = core_frame_deliver,
    .frame_free = core_frame_free,
    .send_done = core_send_done,
    .handover = core_handover,
    .peer_failed = core_peer_failed,
    .bad_peer = core_bad_peer,
    .wake = core_wake,
    .log = core_log,
    .key = nxi_rt.key,
    .frame_wrap = core_frame_wrap,
    .frame_alloc_lead = core_frame_alloc_lead,
    .frame_place = core_frame_place,
};
