/* Receiving in the ucx module: the active-message handler, rendezvous fetches
 * straight into the frame, and delivery in each sender's order. */
#include <stdlib.h>
#include <string.h>

#include "nxu_copy.h"
#include "nxu_wire.h"
#include "ucx_rx.h"

/* Order. UCX runs the handler for one endpoint's messages in the order they
 * were sent, but a large message (rendezvous) is complete only when its
 * fetch is, and a later small one may be complete at once. So frames of a
 * sender that has a fetch in progress wait in that sender's queue and leave
 * it in arrival order; senders are told apart by the sending process the
 * frame header names (its source's high 32 bits, 0 when not known: such
 * frames share one queue). Not by UCX's reply endpoint: asking for it
 * (UCP_AM_SEND_FLAG_REPLY) made every 8 B round trip a third slower. A
 * queue exists only while its sender has a fetch in progress, so the usual
 * case (nothing pending) costs one test of an empty list. Everything here
 * runs inside ucp_worker_progress, under ucx.lock. */

static void ready_append(struct ucx *u, nx_frame_t *f) {
  f->module_data[0] = NULL;
  if (u->ready_tail != NULL)
    u->ready_tail->module_data[0] = f;
  else
    u->ready = f;
  u->ready_tail = f;
}

/* A frame complete in its turn (nothing of its sender's waiting before it):
 * inside progress (ucx.h, the lock's rule 3), and with nothing on `ready`
 * before it, straight into the core's batch, which the core dispatches
 * once progress returned; else on `ready`, which ucx_unlock hands over
 * after the frames already in the batch, so the order holds either way.
 * The batch is never delivered from here when full (that would call the
 * core under the lock): its 65th frame waits on `ready`. */
static void frame_done(struct ucx *u, nx_frame_t *f) {
  nx_frame_batch_t *b = u->batch;
  if (b != NULL && u->ready == NULL && b->count < NX_FRAME_BATCH_MAX)
    b->frames[b->count++] = f;
  else
    ready_append(u, f);
}

static void dropped_push(struct ucx *u, nx_frame_t *f) {
  f->module_data[0] = u->dropped;
  u->dropped = f;
}

static struct ucx_rxq *rxq_find(struct ucx *u, uint64_t from) {
  for (struct ucx_rxq *q = u->rxqs; q != NULL; q = q->next)
    if (q->from == from)
      return q;
  return NULL;
}

static void rxq_append(struct ucx_rxq *q, nx_frame_t *f, struct ucx_rx *rx) {
  f->module_data[0] = NULL;
  f->module_data[1] = rx;
  if (q->tail != NULL)
    q->tail->module_data[0] = f;
  else
    q->head = f;
  q->tail = f;
}

/* Moves the frames at the head of `q` that are complete to the ready (or
 * dropped) list; frees the queue once it is empty. */
static void rxq_drain(struct ucx *u, struct ucx_rxq *q) {
  while (q->head != NULL) {
    nx_frame_t *f = q->head;
    struct ucx_rx *rx = f->module_data[1];
    if (rx != NULL && rx->state == RX_PENDING)
      return;
    q->head = f->module_data[0];
    if (q->head == NULL)
      q->tail = NULL;
    if (rx != NULL && rx->state == RX_FAILED)
      dropped_push(u, f);
    else
      ready_append(u, f);
    free(rx);
  }
  struct ucx_rxq **pp = &u->rxqs;
  while (*pp != q)
    pp = &(*pp)->next;
  *pp = q->next;
  free(q);
}

static void on_fetched(void *req, ucs_status_t status, size_t length,
                       void *user_data) {
  (void)length;
  struct ucx_rx *rx = user_data;
  struct ucx *u = rx->u;
  rx->state = status == UCS_OK ? RX_DONE : RX_FAILED;
  rx->req = NULL;
  if (status != UCS_OK)
    UCX_LOG(u, 1, "a rendezvous fetch failed: %s", ucs_status_string(status));
  ucp_request_free(req);
  if (!rx->starting)
    rxq_drain(u, rx->q);
}

/* Refuses a message. For a rendezvous one the status goes back to the
 * sender, whose send completes with it (so its RSR counts as failed). */
static ucs_status_t refuse(int rndv, ucs_status_t status) {
  return rndv ? status : UCS_OK;
}

static void queue_frame(struct ucx *u, struct ucx_rxq *q, nx_frame_t *f) {
  if (q == NULL)
    frame_done(u, f);
  else
    rxq_append(q, f, NULL);
}

/* The core is done with an eager payload it took without a copy
 * (frame_wrap). It calls this from any thread, and inside frame_free and
 * frame_deliver too, which this module calls for such frames only after
 * unlocking (ucx_unlock, and finalize through it); so taking the lock here
 * is how the release reaches the worker (all UCP calls are made under it). A
 * bare unlock: the release runs no callback, and whatever another call left for
 * the core goes with its next unlock. */
void ucx_data_release(void *arg, void *data) {
  struct ucx *u = arg;
  nxu_lock(&u->lock);
  ucp_am_data_release(u->worker, data);
  u->held--;
  nxu_unlock(&u->lock);
}

/* Eager data UCX lets us keep (UCP_AM_RECV_ATTR_FLAG_DATA): the frame's
 * payload is UCX's memory itself, given back by ucx_data_release. Only
 * from UCX_WRAP_MIN bytes (ucx.h says why), and only where the data starts
 * 8-aligned, as the core promises a handler's payload (UCX's does: 8
 * bytes past a 64-aligned descriptor, after its own header, on shared
 * memory; never 16-aligned). Returns UCS_INPROGRESS (kept), UCS_OK
 * (refused, counted by the core), or UCS_ERR_LAST when the message is to
 * be copied instead. */
static ucs_status_t try_wrap(struct ucx *u, const void *header, void *data,
                             size_t length, struct ucx_rxq *q) {
  if (((uintptr_t)data & 7) != 0) {
    u->unaligned++;
    return UCS_ERR_LAST;
  }
  nx_frame_t *f;
  int r = u->core->frame_wrap(header, data, length, ucx_data_release, u, &f);
  if (r == NX_EPROTO)
    return UCS_OK; /* counted by the core */
  if (r < 0)
    return UCS_ERR_LAST;
  u->held++;
  u->wrapped++;
  queue_frame(u, q, f);
  return UCS_INPROGRESS;
}

/* A frame whose lead came in the header (ucx_send): the lead into the
 * frame, then the receiving program's placement (frame_place), which sets
 * iov[1] to where the `length` bytes of data (the tail) go. Returns 0,
 * NX_EPROTO (counted) or NX_ENOMEM. */
static int recv_lead(struct ucx *u, const void *header, size_t lead,
                     size_t length, nx_frame_t **out) {
  nx_frame_t *f;
  int r = u->core->frame_alloc_lead(header, &f);
  if (r < 0) {
    if (r != NX_EPROTO)
      UCX_LOG(u, 0, "dropped a frame of %zu bytes: no memory", length);
    return r;
  }
  if (f->iovcnt < 2 || f->iov[1].iov_len != lead ||
      f->len != NX_FRAME_HDR_SIZE + lead + length) {
    u->core->frame_free(f);
    u->core->bad_peer(UCX_NAME, "a payload whose length differs from its "
                                "frame header");
    return NX_EPROTO;
  }
  if (nx_frame_place_lead(u->core, f,
                          (const uint8_t *)header + NX_FRAME_HDR_SIZE) < 0) {
    UCX_LOG(u, 0, "dropped a frame of %zu bytes: no memory", length);
    return NX_ENOMEM;
  }
  *out = f;
  return 0;
}

/* frame_alloc refused a header: NX_EPROTO is counted by the core
 * already. The status for UCX (refuse). */
static ucs_status_t alloc_failed(struct ucx *u, int r, size_t length,
                                 int rndv) {
  if (r != NX_EPROTO)
    UCX_LOG(u, 0, "dropped a frame of %zu bytes: no memory", length);
  return refuse(rndv,
                r == NX_ENOMEM ? UCS_ERR_NO_MEMORY : UCS_ERR_INVALID_PARAM);
}

/* The frame frame_alloc made has no room for exactly `length` bytes: the
 * header announced another length. */
static ucs_status_t length_differs(struct ucx *u, nx_frame_t *f, int rndv) {
  u->core->frame_free(f);
  u->core->bad_peer(UCX_NAME, "a payload whose length differs from its "
                              "frame header");
  return refuse(rndv, UCS_ERR_INVALID_PARAM);
}

/* Every message but the common one (ucx_am_recv): rendezvous, a lead in the
 * header, data to keep (try_wrap), a sender with a fetch in progress, bad
 * input. */
static __attribute__((noinline)) ucs_status_t
recv_general(struct ucx *u, const void *header, size_t header_length,
             void *data, size_t length, const ucp_am_recv_param_t *param) {
  int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  /* The frame header, and after it the payload's lead when the sender
   * sent it apart (ucx_send): the lead the header announces, exactly. */
  size_t lead = header != NULL && header_length >= NX_FRAME_HDR_SIZE
                    ? nx_frame_lead(header)
                    : 0;
  if (header == NULL || (header_length != NX_FRAME_HDR_SIZE &&
                         header_length != NX_FRAME_HDR_SIZE + lead)) {
    u->core->bad_peer(UCX_NAME, "an active message without a frame header");
    return refuse(rndv, UCS_ERR_INVALID_PARAM);
  }
  /* The sender, for order only (frame_alloc checks the rest). */
  uint64_t from = nxu_rd64((const uint8_t *)header + 40) >> 32;
  struct ucx_rxq *q = rxq_find(u, from);
  nx_frame_t *f;
  int r;
  if (header_length > NX_FRAME_HDR_SIZE) {
    r = recv_lead(u, header, lead, length, &f);
    if (r < 0)
      return refuse(rndv,
                    r == NX_ENOMEM ? UCS_ERR_NO_MEMORY : UCS_ERR_INVALID_PARAM);
  } else {
    if (!rndv && length >= UCX_WRAP_MIN &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA)) {
      ucs_status_t st = try_wrap(u, header, data, length, q);
      if (st != UCS_ERR_LAST)
        return st;
    }
    r = u->core->frame_alloc(header, &f);
    if (r < 0)
      return alloc_failed(u, r, length, rndv);
    if (f->iovcnt < 2 || f->iov[1].iov_len != length)
      return length_differs(u, f, rndv);
  }
  if (!rndv) {
    /* Copied into the frame: UCX takes the data back when we return. */
    if (length > 0)
      memcpy(f->iov[1].iov_base, data, length);
    queue_frame(u, q, f);
    return UCS_OK;
  }
  struct ucx_rx *rx = malloc(sizeof(*rx));
  if (rx != NULL && q == NULL) {
    q = calloc(1, sizeof(*q));
    if (q != NULL) {
      q->from = from;
      q->next = u->rxqs;
      u->rxqs = q;
    }
  }
  if (rx == NULL || q == NULL) {
    free(rx);
    u->core->frame_free(f);
    UCX_LOG(u, 0, "dropped a frame of %zu bytes: no memory", length);
    return UCS_ERR_NO_MEMORY;
  }
  rx->u = u;
  rx->frame = f;
  rx->q = q;
  rx->req = NULL;
  rx->state = RX_PENDING;
  rx->starting = 1;
  rxq_append(q, f, rx);
  /* Straight into the frame's payload: no copy on our side. */
  ucp_request_param_t rparam = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                      UCP_OP_ATTR_FIELD_DATATYPE,
      .cb.recv_am = on_fetched,
      .user_data = rx,
      .datatype = ucp_dt_make_contig(1),
  };
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(
      u->worker, data, f->iov[1].iov_base, length, &rparam);
  rx->starting = 0;
  if (req == NULL) {
    rx->state = RX_DONE;
  } else if (UCS_PTR_IS_ERR(req)) {
    UCX_LOG(u, 1, "ucp_am_recv_data_nbx: %s",
            ucs_status_string(UCS_PTR_STATUS(req)));
    rx->state = RX_FAILED;
  } else if (rx->state == RX_PENDING) {
    rx->req = req;
  }
  if (rx->state != RX_PENDING)
    rxq_drain(u, q);
  return UCS_OK; /* the descriptor is UCP's again after recv_data */
}

/* UCX's handler for our active messages (UCP_AM_FLAG_WHOLE_MSG), inside
 * ucp_worker_progress under the lock. The common message takes the first
 * branch: a frame header alone as the message's header, eager data too
 * small to keep (UCX_WRAP_MIN), and no sender with a fetch in progress,
 * so no order to keep but arrival's: frame_alloc, the copy, and into the
 * core's batch (frame_done). */
ucs_status_t ucx_am_recv(void *arg, const void *header, size_t header_length,
                         void *data, size_t length,
                         const ucp_am_recv_param_t *param) {
  struct ucx *u = arg;
  u->received++;
  if (__builtin_expect(header_length == NX_FRAME_HDR_SIZE && header != NULL &&
                           length < UCX_WRAP_MIN && u->rxqs == NULL &&
                           !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV),
                       1)) {
    nx_frame_t *f;
    int r = u->core->frame_alloc(header, &f);
    if (r < 0)
      return alloc_failed(u, r, length, 0);
    if (f->iovcnt < 2 || f->iov[1].iov_len != length)
      return length_differs(u, f, 0);
    /* UCX takes the data back when we return. */
    nxu_copy_small(f->iov[1].iov_base, data, length);
    frame_done(u, f);
    return UCS_OK;
  }
  return recv_general(u, header, header_length, data, length, param);
}

unsigned ucx_rx_pending(struct ucx *u) {
  unsigned n = 0;
  for (struct ucx_rxq *q = u->rxqs; q != NULL; q = q->next)
    for (nx_frame_t *f = q->head; f != NULL; f = f->module_data[0]) {
      struct ucx_rx *rx = f->module_data[1];
      n += rx != NULL && rx->state == RX_PENDING && rx->req != NULL;
    }
  return n;
}

/* Freeing a request that has not completed tells UCX never to call back
 * for it. The fetch stays pending here, its frame in its queue: UCX may
 * write into the frame until the worker is destroyed, after which
 * ucx_rx_free_all frees it. The frames that arrived whole leave their
 * queues for `dropped` now: the payload of one may be UCX's (try_wrap),
 * which must go back before the worker does. */
void ucx_rx_cancel_all(struct ucx *u) {
  for (struct ucx_rxq *q = u->rxqs; q != NULL; q = q->next) {
    nx_frame_t *f = q->head;
    q->head = q->tail = NULL;
    while (f != NULL) {
      nx_frame_t *next = f->module_data[0];
      struct ucx_rx *rx = f->module_data[1];
      if (rx == NULL) {
        dropped_push(u, f);
        f = next;
        continue;
      }
      if (rx->state == RX_PENDING && rx->req != NULL) {
        ucp_request_free(rx->req);
        rx->req = NULL;
      }
      rxq_append(q, f, rx);
      f = next;
    }
  }
}

void ucx_rx_free_all(struct ucx *u) {
  while (u->rxqs != NULL) {
    struct ucx_rxq *q = u->rxqs;
    u->rxqs = q->next;
    while (q->head != NULL) {
      nx_frame_t *f = q->head;
      q->head = f->module_data[0];
      free(f->module_data[1]);
      u->core->frame_free(f);
    }
    free(q);
  }
}
