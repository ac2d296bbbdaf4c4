/* Peers of the ucx module: one UCP endpoint per remote process, created by the
 * first connect and shared; the send path any thread may take; peer failure;
 * endpoint_info; and the module's lock, whose unlock hands what callbacks
 * recorded (sends done, frames, failed peers) to the core. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_ep.h"

int ucx_status_to_nx(ucs_status_t status) {
  if (status >= UCS_ERR_LAST_ENDPOINT_FAILURE &&
      status <= UCS_ERR_FIRST_LINK_FAILURE)
    return NX_EPEERDEAD; /* link and endpoint failures: the peer is gone */
  switch (status) {
  case UCS_OK: return 0;
  case UCS_INPROGRESS:
  case UCS_ERR_NO_RESOURCE: return NX_EAGAIN;
  case UCS_ERR_BUSY: return NX_EBUSY;
  case UCS_ERR_NO_MEMORY:
  case UCS_ERR_EXCEEDS_LIMIT: return NX_ENOMEM;
  case UCS_ERR_INVALID_PARAM:
  case UCS_ERR_INVALID_ADDR: return NX_EINVAL;
  case UCS_ERR_UNREACHABLE:
  case UCS_ERR_NO_DEVICE:
  case UCS_ERR_UNSUPPORTED:
  case UCS_ERR_NOT_IMPLEMENTED: return NX_EUNREACH;
  case UCS_ERR_CONNECTION_RESET:
  case UCS_ERR_NOT_CONNECTED:
  case UCS_ERR_REJECTED:
  case UCS_ERR_CANCELED: return NX_EPEERDEAD;
  case UCS_ERR_TIMED_OUT: return NX_ETIMEDOUT;
  case UCS_ERR_MESSAGE_TRUNCATED: return NX_EMSGSIZE;
  default: return NX_EIO;
  }
}

/* The lock and the hand-over to the core. */

void ucx_handover(struct ucx *u, int deliver) {
  struct ucx_batch b = {NULL, NULL, NULL, NULL};
  b.done = u->done;
  b.dropped = u->dropped;
  b.reports = u->reports;
  u->done = u->done_tail = NULL;
  u->dropped = NULL;
  u->reports = NULL;
  if (deliver) {
    b.ready = u->ready;
    u->ready = u->ready_tail = NULL;
  }
  int finalizing = u->finalizing;
  nx_frame_batch_t *batch = u->batch; /* set by progress only */
  u->batch = NULL;
  nxu_unlock(&u->lock);
  /* The peer first, then its RSRs: whoever hears of a lost RSR can find
   * its destination failed already. */
  if (b.reports != NULL)
    ucx_peers_report(u, b.reports);
  while (b.done != NULL) {
    nx_frame_t *f = b.done;
    b.done = f->module_data[0];
    u->core->send_done(f, (int)(intptr_t)f->module_data[1]);
  }
  while (b.dropped != NULL) {
    nx_frame_t *f = b.dropped;
    b.dropped = f->module_data[0];
    u->core->frame_free(f);
  }
  while (b.ready != NULL) {
    nx_frame_t *f = b.ready;
    b.ready = f->module_data[0];
    /* The engine has stopped once finalize runs: nobody would dispatch. */
    if (finalizing)
      u->core->frame_free(f);
    else
      nx_frame_batch_add(u->core, batch, f);
  }
}

/* Lifetime. A peer is created by the first connect() for its process and
 * freed only by finalize: its endpoint stays open when the last gp to the
 * process is released, because closing it would look to the peer exactly
 * like our death (UCX tells the remote endpoint, which fails). A peer found
 * dead stays in the table, dead, so that later connects and sends say so
 * at once. */

uint64_t ucx_hash(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int ucx_desc_parse(const struct ucx *u, const struct nx_desc *d,
                   const uint8_t **uuid, const uint8_t **addr,
                   size_t *addr_len) {
  if (d->scope_len != UCX_UUID_SIZE || d->scope == NULL || d->data == NULL ||
      d->data_len <= UCX_DESC_HEAD || d->data_len > NX_DESC_DATA_MAX ||
      d->data[0] != UCX_DESC_VERSION)
    return NX_EUNREACH;
  const uint8_t *id = d->data + 1;
  if (memcmp(id, u->core->process_uuid, UCX_UUID_SIZE) == 0)
    return NX_EUNREACH; /* this process: the local module's */
  uint64_t hash = 0;
  for (int i = 0; i < 8; i++)
    hash |= (uint64_t)d->data[1 + UCX_UUID_SIZE + i] << (8 * i);
  size_t len = (size_t)d->data_len - UCX_DESC_HEAD;
  if (ucx_hash(d->data + UCX_DESC_HEAD, len) != hash)
    return NX_EUNREACH;
  /* A process on this host whose shared-memory FIFO settings differ:
   * UCX's sender indexes the receiver's FIFO with its own element size,
   * so shared memory between the two would corrupt frames. */
  uint32_t print = 0;
  for (int i = 0; i < 4; i++)
    print |= (uint32_t)d->data[1 + UCX_UUID_SIZE + 8 + i] << (8 * i);
  if (print != u->fifo_print &&
      memcmp(d->scope, u->core->host_uuid, UCX_UUID_SIZE) == 0)
    return NX_EUNREACH;
  *uuid = id;
  *addr = d->data + UCX_DESC_HEAD;
  *addr_len = len;
  return 0;
}

/* The endpoint is a peer's first member. */
static struct ucx_peer *peer_of(struct nx_endpoint *l) {
  return (struct ucx_peer *)(void *)l;
}

static struct ucx_peer *find_locked(struct ucx *u, const uint8_t *uuid) {
  struct nx_endpoint *l = nxu_uuid_find(&u->peers, uuid, NULL);
  return l != NULL ? peer_of(l) : NULL;
}

/* Failure. */

/* UCX's endpoint error handler. It may run on a UCX thread, outside our
 * lock: it only pushes the peer for the driver, which marks it dead and
 * closes its endpoint (ucx_peers_service). */
static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  struct ucx_peer *p = arg;
  struct ucx *u = p->u;
  atomic_store(&p->error, (int)status);
  if (atomic_exchange(&p->failing, 1))
    return;
  struct ucx_peer *head = atomic_load(&u->failed);
  do
    p->fail_next = head;
  while (!atomic_compare_exchange_weak(&u->failed, &head, p));
  u->core->wake();
}

static void on_closed(void *req, ucs_status_t status, void *user_data) {
  (void)status;
  struct ucx_peer *p = user_data;
  struct ucx *u = p->u;
  p->close_req = NULL;
  u->closing--;
  ucp_request_free(req);
}

/* Lock held. A forced close completes the endpoint's requests at once
 * (UCS_ERR_CANCELED); a flushing one lets them finish and tells the peer. */
static void close_locked(struct ucx *u, struct ucx_peer *p, int force) {
  if (p->ep == NULL)
    return;
  ucp_request_param_t param = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                      UCP_OP_ATTR_FIELD_USER_DATA,
      .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
      .cb.send = on_closed,
      .user_data = p,
  };
  ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &param);
  p->ep = NULL;
  if (r != NULL && !UCS_PTR_IS_ERR(r)) {
    p->close_req = r;
    u->closing++;
  }
}

static void done_append(struct ucx *u, nx_frame_t *f, int status) {
  f->module_data[0] = NULL;
  f->module_data[1] = (void *)(intptr_t)status;
  if (u->done_tail != NULL)
    u->done_tail->module_data[0] = f;
  else
    u->done = f;
  u->done_tail = f;
}

/* A frame's payload pieces are handed to UCX as its iov datatype as they
 * are: the two layouts are the same. */
_Static_assert(sizeof(ucp_dt_iov_t) == sizeof(struct iovec) &&
                   offsetof(ucp_dt_iov_t, buffer) ==
                       offsetof(struct iovec, iov_base) &&
                   offsetof(ucp_dt_iov_t, length) ==
                       offsetof(struct iovec, iov_len),
               "ucp_dt_iov_t is laid out as struct iovec");

static size_t frame_bytes(const nx_frame_t *f) {
  const struct iovec *iov = nx_frame_iovs(f);
  size_t n = 0;
  for (int i = 0; i < f->iovcnt; i++)
    n += iov[i].iov_len;
  return n;
}

static void req_unlink(struct ucx_req *q) {
  struct ucx_peer *p = q->peer;
  if (q->prev != NULL)
    q->prev->next = q->next;
  else
    p->reqs = q->next;
  if (q->next != NULL)
    q->next->prev = q->prev;
  p->inflight -= frame_bytes(q->frame);
  p->nreq--;
  free(q->lead_hdr);
  q->lead_hdr = NULL;
}

/* A frame with a lead (nx_frame_lead) small enough: the header and the
 * lead in one block, to go as the active message's header, and the tail
 * (always one piece: one array's elements, copied into the payload or put
 * by reference) as its data. Returns the block, or NULL to send the frame
 * as any other (no lead, too long a lead, no memory). */
static uint8_t *lead_split(const struct ucx *u, const nx_frame_t *frame,
                           const void **tail, size_t *tail_len) {
  const struct iovec *iov = nx_frame_iovs(frame);
  size_t lead = nx_frame_lead(iov[0].iov_base);
  if (lead == 0 || lead > u->lead_max)
    return NULL;
  size_t at = 0; /* payload offset of piece i */
  int i = 1;
  while (i < frame->iovcnt && at + iov[i].iov_len <= lead)
    at += iov[i++].iov_len;
  if (i != frame->iovcnt - 1)
    return NULL; /* the tail is not the last piece's end: not ours */
  uint8_t *h = malloc(NX_FRAME_HDR_SIZE + lead);
  if (h == NULL)
    return NULL;
  memcpy(h, iov[0].iov_base, NX_FRAME_HDR_SIZE);
  size_t off = 0;
  for (int k = 1; k < i; k++) {
    memcpy(h + NX_FRAME_HDR_SIZE + off, iov[k].iov_base, iov[k].iov_len);
    off += iov[k].iov_len;
  }
  memcpy(h + NX_FRAME_HDR_SIZE + off, iov[i].iov_base, lead - off);
  *tail = (const uint8_t *)iov[i].iov_base + (lead - off);
  *tail_len = iov[i].iov_len - (lead - off);
  return h;
}

/* Lock held: fails the peer's sends that UCX still holds. Freeing a
 * request that has not completed tells UCX never to call back for it; the
 * endpoint is closed (or the worker about to go), so nothing reads the
 * frames any more. */
static void detach_locked(struct ucx *u, struct ucx_peer *p, int status) {
  while (p->reqs != NULL) {
    struct ucx_req *q = p->reqs;
    nx_frame_t *f = q->frame;
    req_unlink(q);
    ucp_request_free(q);
    done_append(u, f, status);
  }
}

void ucx_peers_detach_all(struct ucx *u, int status) {
  for (struct nx_endpoint *l = nxu_uuid_first(&u->peers); l != NULL;
       l = nxu_uuid_next(&u->peers, l)) {
    struct ucx_peer *p = peer_of(l);
    detach_locked(u, p, status);
  }
}

static void fail_locked(struct ucx *u, struct ucx_peer *p, ucs_status_t why) {
  if (p->dead)
    return;
  p->dead = 1;
  UCX_LOG(u, 1, "peer %02x%02x%02x%02x: %s", p->base.uuid[0], p->base.uuid[1],
          p->base.uuid[2], p->base.uuid[3], ucs_status_string(why));
  close_locked(u, p, 1);
  detach_locked(u, p, u->finalizing ? NX_EFINALIZED : NX_EPEERDEAD);
  if (!u->finalizing) {
    p->report_next = u->reports;
    u->reports = p;
  }
}

void ucx_peers_service(struct ucx *u) {
  struct ucx_peer *p = atomic_exchange(&u->failed, NULL);
  while (p != NULL) {
    struct ucx_peer *next = p->fail_next;
    fail_locked(u, p, (ucs_status_t)atomic_load(&p->error));
    p = next;
  }
}

void ucx_peers_report(struct ucx *u, struct ucx_peer *list) {
  while (list != NULL) {
    struct ucx_peer *next = list->report_next;
    u->core->peer_failed(&list->base, NX_EPEERDEAD);
    list = next;
  }
}

void ucx_peers_close_all(struct ucx *u, int force) {
  for (struct nx_endpoint *l = nxu_uuid_first(&u->peers); l != NULL;
       l = nxu_uuid_next(&u->peers, l)) {
    struct ucx_peer *p = peer_of(l);
    close_locked(u, p, force || p->dead);
    p->dead = 1;
  }
}

void ucx_peers_release_closes(struct ucx *u) {
  for (struct nx_endpoint *l = nxu_uuid_first(&u->peers); l != NULL;
       l = nxu_uuid_next(&u->peers, l)) {
    struct ucx_peer *p = peer_of(l);
    if (p->close_req != NULL) {
      /* Released before it completes: UCX never calls back for it. */
      ucp_request_free(p->close_req);
      p->close_req = NULL;
      u->closing--;
    }
  }
}

unsigned ucx_peers_pending(struct ucx *u) {
  unsigned n = 0;
  for (struct nx_endpoint *l = nxu_uuid_first(&u->peers); l != NULL;
       l = nxu_uuid_next(&u->peers, l)) {
    struct ucx_peer *p = peer_of(l);
    n += p->dead ? 0 : p->nreq;
  }
  return n;
}

void ucx_peers_free_all(struct ucx *u) {
  struct nx_endpoint *l;
  while ((l = nxu_uuid_first(&u->peers)) != NULL) {
    nxu_uuid_remove(&u->peers, l);
    free(peer_of(l));
  }
}

/* Connections. */

int ucx_connect(void *state, const struct nx_desc *peer,
                struct nx_endpoint **ep) {
  struct ucx *u = state;
  const uint8_t *uuid, *addr;
  size_t addr_len;
  if (ucx_desc_parse(u, peer, &uuid, &addr, &addr_len) < 0)
    return NX_EUNREACH;
  ucx_lock(u);
  struct ucx_peer *p = find_locked(u, uuid);
  if (p != NULL) {
    int r = p->dead ? NX_EPEERDEAD : 0;
    if (r == 0)
      p->refs++;
    ucx_unlock(u, 0);
    if (r == 0)
      *ep = &p->base;
    return r;
  }
  p = calloc(1, sizeof(*p));
  /* UCP reads the address without knowing its length: hand it an aligned
   * copy followed by zeros. */
  uint8_t *copy = calloc(1, addr_len + 64);
  if (p == NULL || copy == NULL) {
    ucx_unlock(u, 0);
    free(p);
    free(copy);
    return NX_ENOMEM;
  }
  memcpy(copy, addr, addr_len);
  p->u = u;
  nx_endpoint_init(&p->base, uuid);
  atomic_init(&p->failing, 0);
  atomic_init(&p->error, UCS_OK);
  /* Created now, so that an address no transport of ours reaches fails
   * here (the core then tries the next module); the wireup itself
   * completes later, in progress. */
  ucp_ep_params_t params = {
      .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .address = (const ucp_address_t *)copy,
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_ep_error, .arg = p},
  };
  ucs_status_t st = ucp_ep_create(u->worker, &params, &p->ep);
  free(copy);
  if (st != UCS_OK) {
    ucx_unlock(u, 0);
    UCX_LOG(u, 1, "ucp_ep_create: %s", ucs_status_string(st));
    free(p);
    int r = ucx_status_to_nx(st);
    return r == NX_EINVAL ? NX_EUNREACH : r;
  }
  p->refs = 1;
  nxu_uuid_insert(&u->peers, &p->base);
  ucx_unlock(u, 0);
  *ep = &p->base;
  return 0;
}

void ucx_disconnect(void *state, struct nx_endpoint *ep) {
  struct ucx *u = state;
  struct ucx_peer *p = peer_of(ep);
  ucx_lock(u);
  p->refs--;
  ucx_unlock(u, 0);
}

/* Sending. */

static void on_sent(void *request, ucs_status_t status, void *user_data) {
  (void)user_data;
  struct ucx_req *q = request;
  struct ucx_peer *p = q->peer;
  struct ucx *u = p->u;
  nx_frame_t *f = q->frame;
  req_unlink(q);
  int rc = 0;
  if (status != UCS_OK)
    rc = u->finalizing                           ? NX_EFINALIZED
         : p->dead || status == UCS_ERR_CANCELED ? NX_EPEERDEAD
                                                 : ucx_status_to_nx(status);
  done_append(u, f, rc);
  ucp_request_free(request);
}

/* The request parameters of every send: the same for all, so made once
 * (ucp_am_send_nbx only reads them). Contiguous data, or the frame's
 * payload pieces as UCX's iov datatype. */
static const ucp_request_param_t send_contig = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
    .cb.send = on_sent,
};
static const ucp_request_param_t send_iov = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE,
    .cb.send = on_sent,
    .datatype = ucp_dt_make_iov(),
};

/* Lock held: what ucp_am_send_nbx returned when it did not complete the
 * send at once. A request: the frame is tracked on the peer's list until
 * on_sent (0); an error: NX_* (the frame stays the core's). Unlocks. */
static __attribute__((noinline)) int
send_started(struct ucx *u, struct ucx_peer *p, nx_frame_t *frame,
             ucs_status_ptr_t r, uint8_t *lead_hdr, size_t total) {
  if (UCS_PTR_IS_ERR(r)) {
    free(lead_hdr);
    ucs_status_t st = UCS_PTR_STATUS(r);
    int rc = ucx_status_to_nx(st);
    ucx_unlock(u, 0);
    if (rc == NX_EPEERDEAD)
      on_ep_error(p, NULL, st); /* in case UCX has not said so itself */
    else
      UCX_LOG(u, 1, "ucp_am_send_nbx: %s", ucs_status_string(st));
    return rc;
  }
  /* UCX calls back only from calls made under the lock: filling our part
   * of the request now, before unlocking, is in time. */
  struct ucx_req *q = r;
  q->frame = frame;
  q->lead_hdr = lead_hdr;
  q->peer = p;
  q->prev = NULL;
  q->next = p->reqs;
  if (p->reqs != NULL)
    p->reqs->prev = q;
  p->reqs = q;
  p->inflight += total;
  p->nreq++;
  ucx_unlock(u, 0);
  /* Its completion may need a round of progress that no event announces
   * (a send UCX queued for lack of room, or behind the wireup): make sure
   * a sleeping driver comes round. */
  u->core->wake();
  return 0;
}

/* Lock held: any frame to any peer (ucx_send's fast path takes the common
 * case). Unlocks. Two bounds on what is in flight to the peer (sends UCX
 * could not complete at once): NX_UCX_QUEUE_MAX bytes, which a single
 * larger frame may cross when nothing is in flight, and
 * NX_UCX_QUEUE_FRAMES frames, which a frame the core marks
 * NX_PROTOCOL_SEND_EXEMPT may cross (the runtime's own messages, what a
 * handler sends: protocol.h). The frames' bound is what keeps a stream of
 * small RSRs fast: once UCX's shared-memory FIFO to the peer is
 * full, every send it takes is a request that waits in its pending queue,
 * with the frame's buffer held, and that queue only grows (a 2-rank
 * all-to-all of 8 B RSRs: 2 million a second with the bytes' bound alone,
 * 4 million with 32 frames; docs/ucx.md). */
static __attribute__((noinline)) int send_locked(struct ucx *u,
                                                 struct ucx_peer *p,
                                                 nx_frame_t *frame,
                                                 unsigned flags) {
  const struct iovec *iov = nx_frame_iovs(frame);
  size_t total = frame_bytes(frame);
  if (p->dead || p->ep == NULL) {
    ucx_unlock(u, 0);
    return NX_EPEERDEAD;
  }
  if (p->inflight > 0 &&
      (p->inflight + total > u->queue_max ||
       (p->nreq >= u->queue_frames && !(flags & NX_PROTOCOL_SEND_EXEMPT)))) {
    ucx_unlock(u, 0);
    return NX_EAGAIN;
  }
  const ucp_request_param_t *param = &send_contig;
  const void *data = frame->iovcnt > 1 ? iov[1].iov_base : NULL;
  size_t count = frame->iovcnt > 1 ? iov[1].iov_len : 0;
  const void *hdr = iov[0].iov_base;
  size_t hdr_len = NX_FRAME_HDR_SIZE;
  /* UCX reads the header until the send completes: the block is freed
   * with the request (req_unlink), or at once if the send was. */
  uint8_t *lead_hdr = NULL;
  if (nx_frame_lead(hdr) != 0 &&
      (lead_hdr = lead_split(u, frame, &data, &count)) != NULL) {
    hdr = lead_hdr;
    hdr_len = NX_FRAME_HDR_SIZE + nx_frame_lead(lead_hdr);
  } else if (frame->iovcnt > 2) {
    /* Values put by reference: UCX gathers the pieces (reading them until
     * the send completes, which the frame guarantees). */
    param = &send_iov;
    data = iov + 1;
    count = (size_t)frame->iovcnt - 1;
  }
  ucs_status_ptr_t r =
      ucp_am_send_nbx(p->ep, UCX_AM_ID, hdr, hdr_len, data, count, param);
  if (r != NULL)
    return send_started(u, p, frame, r, lead_hdr, total);
  free(lead_hdr);
  ucx_unlock(u, 0);
  return NX_PROTOCOL_SENT;
}

/* The frame header (iov[0]) is the active message's header and the payload
 * (iov[1]) its data, both sent from where they are: UCX copies small
 * messages, and fetches large ones (rendezvous) from the payload itself.
 * UCX 1.13 reads the header until the send completes, which the frame
 * guarantees: it is ours until send_done. No UCP_AM_SEND_FLAG_REPLY: the
 * receiver tells senders apart by the frame header's source (ucx_rx.c),
 * and the flag cost a third of an 8 B round trip.
 * The fast path is the common case: a header and one payload piece, no
 * lead to send apart, a live peer with nothing in flight (so no bound to
 * check), and UCX sending it at once (its short or bcopy protocol, which
 * copies the frame out before returning NULL): the lock, one
 * ucp_am_send_nbx with the prebuilt parameters, the unlock, and the core
 * takes the frame back (NX_PROTOCOL_SENT, no send_done). Everything else
 * takes send_locked, as it always did. */
int ucx_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
             unsigned flags) {
  /* NX_EAGAIN with or without NX_RSR_NONBLOCK: the core decides whether
   * to wait. */
  struct ucx *u = state;
  struct ucx_peer *p = peer_of(ep);
  const struct iovec *iov = nx_frame_iovs(frame);
  if (frame->iovcnt < 1 || frame->iovcnt > NX_FRAME_IOV_MAX ||
      iov[0].iov_len != NX_FRAME_HDR_SIZE)
    return NX_EINVAL;
  ucx_lock(u);
  /* A dead peer has no endpoint (ucx.h, the lock's rule 4). */
  if (__builtin_expect(frame->iovcnt != 2 || p->ep == NULL ||
                           p->inflight != 0 ||
                           nx_frame_lead(iov[0].iov_base) != 0,
                       0))
    return send_locked(u, p, frame, flags);
  ucs_status_ptr_t r =
      ucp_am_send_nbx(p->ep, UCX_AM_ID, iov[0].iov_base, NX_FRAME_HDR_SIZE,
                      iov[1].iov_base, iov[1].iov_len, &send_contig);
  if (__builtin_expect(r != NULL, 0))
    return send_started(u, p, frame, r, NULL, frame_bytes(frame));
  /* Sent already (copied out). Whatever else UCX completed inside the
   * call, the unlock hands over as after any other UCP call. */
  ucx_unlock(u, 0);
  return NX_PROTOCOL_SENT; /* no send_done: the core takes it back */
}

/* Information. */

/* Appends `name` to `out` unless it is there already. */
static void add_name(char *out, size_t len, const char *name) {
  size_t n = strlen(out);
  const char *s = out;
  size_t nl = strlen(name);
  while ((s = strstr(s, name)) != NULL) {
    if ((s == out || s[-1] == ' ') && (s[nl] == ',' || s[nl] == '\0'))
      return;
    s += nl;
  }
  snprintf(out + n, len - n, "%s%s", n > 0 ? ", " : "", name);
}

/* ucp_ep_print_info (1.13 has no ucp_ep_query for transports) prints one
 * line per lane, "lane[0]:  3:sysv/memory.0 md[2] -> ...": we keep the
 * transport/device names, in lane order, without the ".0" path index. */
static void lane_names(const char *text, char *out, size_t len) {
  out[0] = '\0';
  for (const char *line = text; line != NULL && *line != '\0';) {
    const char *eol = strchr(line, '\n');
    const char *lane = strstr(line, "lane[");
    if (lane != NULL && (eol == NULL || lane < eol)) {
      const char *s = strchr(lane, ':');
      if (s != NULL && (eol == NULL || s < eol)) {
        s++;
        while (*s == ' ')
          s++;
        while (*s >= '0' && *s <= '9')
          s++;
        if (*s == ':')
          s++;
        char name[64];
        size_t n = 0;
        while (s[n] != '\0' && s[n] != ' ' && s[n] != '\n' &&
               n + 1 < sizeof(name)) {
          name[n] = s[n];
          n++;
        }
        name[n] = '\0';
        char *dot = strrchr(name, '.');
        if (dot != NULL && strchr(name, '/') != NULL && dot > strchr(name, '/'))
          *dot = '\0';
        if (name[0] != '\0')
          add_name(out, len, name);
      }
    }
    line = eol != NULL ? eol + 1 : NULL;
  }
}

int ucx_endpoint_info(void *state, struct nx_endpoint *ep, char *buf,
                      size_t len) {
  struct ucx *u = state;
  struct ucx_peer *p = peer_of(ep);
  if (buf == NULL || len == 0)
    return NX_EINVAL;
  char *text = NULL;
  size_t text_len = 0;
  FILE *f = open_memstream(&text, &text_len);
  if (f == NULL)
    return NX_ENOMEM;
  ucx_lock(u);
  int dead = p->dead || p->ep == NULL;
  if (!dead)
    ucp_ep_print_info(p->ep, f);
  ucx_unlock(u, 0);
  fclose(f);
  char names[256];
  lane_names(text != NULL ? text : "", names, sizeof(names));
  free(text);
  if (dead)
    snprintf(buf, len, "ucx: peer failed");
  else
    snprintf(buf, len, "ucx: %s", names[0] != '\0' ? names : "connecting");
  return 0;
}
