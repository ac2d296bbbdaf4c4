/* The ofi protocol module: RSR frames between processes over libfabric reliable
 * datagram endpoints (shm on this host, tcp;ofi_rxm or another provider
 * elsewhere); this file holds the ops table, settings, descriptors, connect and
 * progress. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>

#include "ofi_rail.h"
#include "ofi_send.h"
#include "ofi_wake.h"
#include "nxu_opt.h"
#include "nxu_time.h"

/* How the pieces fit (docs/ofi.md has the whole story):
 *  - init opens up to two rails, one per provider: shm, for peers on this
 *    host, and the first other provider fi_getinfo offers that opens
 *    (tcp;ofi_rxm unless FI_PROVIDER says otherwise);
 *  - the descriptor lists every rail's provider name and endpoint name;
 *    connect picks shm for a peer on this host, else the other rail;
 *  - send() runs on any thread: it posts straight to the provider and
 *    queues only what the provider refuses for now (-FI_EAGAIN);
 *  - progress() reads the completion queues: receives are reordered per
 *    sender by sequence number and delivered, sends completed;
 *  - the wait fd is an epoll set of the providers' fds, a wake-up socket
 *    for shm (which has no fd) and pidfds of peers on this host. */

/* The descriptor. */

static int ofi_descriptor(void *state, struct nx_desc_buf *out) {
  struct ofi *o = state;
  out->scope_len = OFI_UUID_SIZE;
  memcpy(out->scope, o->core->host_uuid, OFI_UUID_SIZE);
  uint8_t *p = out->data;
  p[0] = OFI_DESC_VERSION;
  p[1] = (uint8_t)o->nrails;
  memcpy(p + 2, o->core->process_uuid, OFI_UUID_SIZE);
  ofi_put32(p + 18, o->pid);
  ofi_put64(p + 22, o->start_time);
  ofi_put64(p + 30, o->pidns);
  size_t off = OFI_DESC_HEAD;
  for (int i = 0; i < o->nrails; i++) {
    const struct ofi_rail *r = &o->rails[i];
    size_t nl = strlen(r->prov);
    if (off + OFI_DESC_RAIL_FIXED + nl + r->addr_len > NX_DESC_DATA_MAX)
      return NX_EMSGSIZE;
    p[off] = (uint8_t)nl;
    memcpy(p + off + 1, r->prov, nl);
    off += 1 + nl;
    ofi_put32(p + off, r->addr_format);
    ofi_put32(p + off + 4, (uint32_t)r->eager_max);
    ofi_put16(p + off + 8, (unsigned)r->addr_len);
    memcpy(p + off + 10, r->addr, r->addr_len);
    off += 10 + r->addr_len;
  }
  out->data_len = (uint16_t)off;
  return 0;
}

/* A peer's descriptor, checked byte by byte, and the rail that reaches it
 * from here. */
struct ofi_desc {
  struct ofi_target t;
  int nrails;
  struct {
    char name[OFI_PROV_NAME_MAX + 1];
    uint32_t format;
    size_t eager_max;
    const uint8_t *addr;
    size_t addr_len;
  } rail[4];
};

static int desc_decode(const struct ofi *o, const struct nx_desc *d,
                       struct ofi_desc *out) {
  if (d->scope_len != OFI_UUID_SIZE || d->scope == NULL || d->data == NULL ||
      d->data_len < OFI_DESC_HEAD)
    return NX_EUNREACH;
  const uint8_t *p = d->data;
  size_t len = d->data_len;
  if (p[0] != OFI_DESC_VERSION || p[1] == 0 || p[1] > 4)
    return NX_EUNREACH;
  memset(out, 0, sizeof(*out));
  out->nrails = p[1];
  memcpy(out->t.uuid, p + 2, OFI_UUID_SIZE);
  out->t.pid = ofi_get32(p + 18);
  out->t.start_time = ofi_get64(p + 22);
  out->t.pidns = ofi_get64(p + 30);
  out->t.same_host = memcmp(d->scope, o->core->host_uuid, OFI_UUID_SIZE) == 0;
  size_t off = OFI_DESC_HEAD;
  for (int i = 0; i < out->nrails; i++) {
    if (len - off < 1)
      return NX_EUNREACH;
    size_t nl = p[off];
    if (nl == 0 || nl > OFI_PROV_NAME_MAX ||
        len - off < OFI_DESC_RAIL_FIXED + nl)
      return NX_EUNREACH;
    for (size_t k = 0; k < nl; k++)
      if (p[off + 1 + k] < 0x21 || p[off + 1 + k] > 0x7e)
        return NX_EUNREACH;
    memcpy(out->rail[i].name, p + off + 1, nl);
    out->rail[i].name[nl] = '\0';
    off += 1 + nl;
    out->rail[i].format = ofi_get32(p + off);
    out->rail[i].eager_max = ofi_get32(p + off + 4);
    size_t al = ofi_get16(p + off + 8);
    off += 10;
    if (al == 0 || al > OFI_ADDR_MAX || len - off < al)
      return NX_EUNREACH;
    out->rail[i].addr = p + off;
    out->rail[i].addr_len = al;
    off += al;
  }
  if (off != len)
    return NX_EUNREACH;
  if (memcmp(out->t.uuid, o->core->process_uuid, OFI_UUID_SIZE) == 0)
    return NX_EUNREACH; /* this process: the local module's */
  /* shm for a peer on this host, else any rail both sides opened. */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < o->nrails; i++) {
      const struct ofi_rail *r = &o->rails[i];
      if (r->local != (pass == 0) || (r->local && !out->t.same_host))
        continue;
      for (int j = 0; j < out->nrails; j++)
        if (strcmp(out->rail[j].name, r->prov) == 0 &&
            ofi_addr_ok(r, out->rail[j].format, out->rail[j].addr,
                        out->rail[j].addr_len)) {
          out->t.rail = (struct ofi_rail *)r;
          out->t.addr = out->rail[j].addr;
          out->t.addr_len = out->rail[j].addr_len;
          out->t.eager_max = out->rail[j].eager_max < r->eager_max
                                 ? out->rail[j].eager_max
                                 : r->eager_max;
          return 0;
        }
    }
  return NX_EUNREACH;
}

static int ofi_reachable(void *state, const struct nx_desc *peer) {
  struct ofi_desc d;
  if (desc_decode(state, peer, &d) < 0)
    return NX_EUNREACH;
  return OFI_COST;
}

static int ofi_connect(void *state, const struct nx_desc *peer,
                       struct nx_endpoint **ep) {
  struct ofi *o = state;
  struct ofi_desc d;
  if (desc_decode(o, peer, &d) < 0)
    return NX_EUNREACH;
  int r = 0;
  struct ofi_peer *p = ofi_peer_get(o, &d.t, &r);
  if (p == NULL)
    return r;
  *ep = &p->base;
  return 0;
}

/* Peers stay until finalize: their sequence numbers must never restart
 * while the receiver remembers them, and a later gp to the same process
 * finds the same peer. */
static void ofi_disconnect(void *state, struct nx_endpoint *ep) {
  (void)state;
  (void)ep;
}

static int ofi_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
                    unsigned flags) {
  /* NX_EAGAIN with or without NX_RSR_NONBLOCK: the core decides whether
   * to wait. */
  return ofi_send_frame(state, ofi_peer_of(ep), frame,
                        (flags & NX_PROTOCOL_SEND_EXEMPT) != 0);
}

static int ofi_progress(void *state, nx_frame_batch_t *batch) {
  struct ofi *o = state;
  o->batch = batch; /* ofi_rail.c's deliver hands it what completes */
  o->events = 0;
  o->budget = OFI_DELIVER_MAX;
  if (atomic_load_explicit(&o->attn_any, memory_order_relaxed))
    ofi_service(o);
  for (int i = 0; i < o->nrails; i++) {
    struct ofi_rail *r = &o->rails[i];
    ofi_rail_poll(r);
    if (r->repost != NULL || r->unposted != NULL)
      ofi_rail_retry(r);
  }
  o->batch = NULL;
  return ofi_wake_progress(o, o->events);
}

/* Without a provider fd or the shm wake-up there is nothing that would
 * make the set readable for new work: the core then polls. */
static int ofi_wait_fd(void *state) {
  struct ofi *o = state;
  return o->sources > 0 ? o->epfd : NX_ENOTSUP;
}

static int ofi_arm(void *state) { return ofi_wake_arm(state); }

static const char *ofi_backend_version(void *state) {
  struct ofi *o = state;
  return o->version;
}

static int ofi_endpoint_info(void *state, struct nx_endpoint *ep, char *buf,
                             size_t len) {
  (void)state;
  if (ep == NULL || buf == NULL || len == 0)
    return NX_EINVAL;
  struct ofi_peer *p = ofi_peer_of(ep);
  snprintf(buf, len, "%s (fabric %s)%s", p->rail->prov, p->rail->fabric_name,
           p->pidfd >= 0 ? ", liveness by pidfd" : "");
  return 0;
}

/* Lifecycle. */

/* libfabric must outlive this module. The loader unloads a module whose
 * init failed, and with it libfabric, which neither frees what it set up
 * in fi_getinfo nor undoes what it may have installed (its memory
 * monitors hook the allocator). Marking it RTLD_NODELETE keeps it mapped
 * for the life of the process, as a loaded module is. */
static void pin_libfabric(void) {
  Dl_info info;
  if (dladdr((void *)fi_getinfo, &info) != 0 && info.dli_fname != NULL)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static void ofi_finalize(void *state);

static int ofi_init(const struct nx_core_api *core, void **state, char *why,
                    size_t why_len) {
  pin_libfabric();
  struct ofi *o = calloc(1, sizeof(*o));
  if (o == NULL)
    return NX_ENOMEM;
  o->core = core;
  o->send_completed = ofi_send_completed;
  o->peer_kill = ofi_peer_kill;
  o->peer_refused = ofi_peer_refused;
  o->epfd = o->wake_sock = o->send_sock = -1;
  o->id = ofi_sender_id(core->process_uuid);
  ofi_self_identity(&o->pid, &o->start_time, &o->pidns);
  pthread_mutex_init(&o->peers_lock, NULL);
  pthread_mutex_init(&o->attn_lock, NULL);
  int threading = 0;
  int r = nxu_opt_size("NX_OFI_QUEUE_MAX", &o->queue_max, why, why_len);
  if (r == 0)
    r = nxu_opt_number("NX_OFI_QUEUE_FRAMES", &o->queue_frames, why, why_len);
  if (r == 0)
    r = nxu_opt_size("NX_OFI_EAGER_MAX", &o->eager_max, why, why_len);
  if (r == 0)
    r = nxu_opt_size("NX_OFI_FRAG_MAX", &o->frag_max, why, why_len);
  if (r == 0)
    r = nxu_opt_choice("NX_OFI_THREADING", &threading, why, why_len);
  o->force_domain = threading == 1; /* "safe|domain" */
  if (r == 0)
    r = ofi_rails_open(o, why, why_len);
  if (r == 0)
    r = ofi_wake_init(o, why, why_len);
  if (r < 0) {
    ofi_finalize(o);
    return r;
  }
  uint32_t v = fi_version();
  int n = snprintf(o->version, sizeof(o->version), "libfabric %u.%u",
                   FI_MAJOR(v), FI_MINOR(v));
  for (int i = 0; i < o->nrails && n > 0 && (size_t)n < sizeof(o->version); i++)
    n += snprintf(o->version + n, sizeof(o->version) - (size_t)n, "%s%s",
                  i == 0 ? " " : ", ", o->rails[i].prov);
  *state = o;
  return 0;
}

/* Runs after the core stopped its progress engine and disconnected every
 * endpoint. Frames still queued or in flight to live peers get up to
 * OFI_LINGER_MS to leave (a last reply is often sent just before
 * nx_finalize); frames that arrive meanwhile are freed, since nobody
 * would run their handlers. Then the endpoints close, and whatever they
 * still held is failed. */
static void ofi_finalize(void *state) {
  struct ofi *o = state;
  o->closing = 1;
  uint64_t deadline = nxu_now_ns() + (uint64_t)OFI_LINGER_MS * 1000000u;
  while (o->nrails > 0 && ofi_sends_pending(o) && nxu_now_ns() < deadline) {
    if (ofi_progress(o, NULL) == 0) {
      struct pollfd pfd = {.fd = o->epfd, .events = POLLIN};
      poll(&pfd, o->epfd >= 0 ? 1 : 0, 1);
    }
  }
  ofi_rails_close(o);
  ofi_peers_free(o);
  ofi_srcs_free(o);
  ofi_wake_fini(o);
  pthread_mutex_destroy(&o->attn_lock);
  pthread_mutex_destroy(&o->peers_lock);
  free(o);
}

NX_PROTOCOL_EXPORT const struct nx_protocol_ops nx_protocol_ofi = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .name = OFI_NAME,
    .wire_version = OFI_WIRE_VERSION,
    .cost = OFI_COST,
    .init = ofi_init,
    .finalize = ofi_finalize,
    .descriptor = ofi_descriptor,
    .reachable = ofi_reachable,
    .connect = ofi_connect,
    .disconnect = ofi_disconnect,
    .send = ofi_send,
    .progress = ofi_progress,
    .wait_fd = ofi_wait_fd,
    .backend_version = ofi_backend_version,
    .endpoint_info = ofi_endpoint_info,
    .arm = ofi_arm,
    .iov_max = NX_FRAME_IOV_MAX,
};
