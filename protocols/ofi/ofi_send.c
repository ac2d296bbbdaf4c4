/* Peers of the ofi module and the send path: any thread sends, the driver
 * completes sends and reports peers that die, once. */
#include <stdlib.h>
#include <string.h>

#include "ofi_send.h"
#include "ofi_rail.h"
#include "ofi_wake.h"
#include "nxu_time.h"

/* Threads. send() runs on any thread, concurrently with other sends and
 * with progress. A peer's `lock` guards its send side: the next sequence
 * number, the bytes in flight, the queue of frames the provider did not
 * take yet, the dead flag. A sender takes it, numbers its frame and, when
 * nothing is queued, posts the frame to the provider itself; only what the
 * provider refuses for now (-FI_EAGAIN) is queued, and the driver posts
 * the queue in order. So frames are numbered in the order their send()
 * calls took the lock, and the receiver delivers them in that order
 * (ofi_rail.c). Libfabric calls on a rail run under the rail's lock when
 * the provider wants it (FI_THREAD_DOMAIN); with FI_THREAD_SAFE (shm,
 * tcp;ofi_rxm) the provider serialises itself.
 *
 * Lock order: peers_lock, then a peer's lock, then a rail's lock; attn_lock
 * is taken alone or inside a peer's lock. Completions are read under the
 * rail's lock and handled after it is released.
 *
 * Small frames (header and payload within the provider's inject size) go
 * with FI_INJECT: the provider copies them before fi_sendmsg returns, asks
 * for no completion, and the frame goes back to the core at once. Other
 * frames become an op (struct ofi_op) that lives until every part of it
 * completed: one message, or for a large frame the announcement (RTS) and
 * one tagged message per fragment. */

static void live_add(struct ofi_peer *p, struct ofi_op *op);
static void enqueue_locked(struct ofi_peer *p, struct ofi_op *op);
static void attend(struct ofi *o, struct ofi_peer *p, int wake);

struct ofi_peer *ofi_peer_get(struct ofi *o, const struct ofi_target *t,
                              int *err) {
  pthread_mutex_lock(&o->peers_lock);
  struct nx_endpoint *found = nxu_uuid_find(&o->peers, t->uuid, NULL);
  if (found != NULL) {
    pthread_mutex_unlock(&o->peers_lock);
    return ofi_peer_of(found);
  }
  struct ofi_peer *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    pthread_mutex_unlock(&o->peers_lock);
    *err = NX_ENOMEM;
    return NULL;
  }
  nxu_lock_init(&p->lock);
  nx_endpoint_init(&p->base, t->uuid);
  p->rail = t->rail;
  p->eager_max = t->eager_max;
  p->same_host = t->same_host;
  p->pid = t->pid;
  p->start_time = t->start_time;
  p->pidns = t->pidns;
  p->pidfd = -1;
  p->inj_ctx.kind = CTX_INJECT;
  p->inj_ctx.obj = p;
  ofi_rail_lock(t->rail);
  int n = fi_av_insert(t->rail->av, t->addr, 1, &p->addr, 0, NULL);
  ofi_rail_unlock(t->rail);
  if (n != 1) {
    pthread_mutex_unlock(&o->peers_lock);
    OFI_LOG(o, 1, "%s: fi_av_insert: %s", t->rail->prov,
            n < 0 ? fi_strerror(-n) : "address refused");
    free(p);
    *err = NX_EUNREACH;
    return NULL;
  }
  ofi_wake_peer(o, p);
  nxu_uuid_insert(&o->peers, &p->base);
  p->all_next = o->all;
  o->all = p;
  /* The HELLO goes first: frames queue behind it until the driver posts
   * it (connect usually comes well before the first send). */
  /* The key, then our address on that rail (ofi.h, OFI_HELLO_ADDR). */
  struct ofi_op *hello = calloc(1, sizeof(*hello) + sizeof(struct ofi_ctx));
  struct ofi_rail *hr = t->rail;
  uint8_t *hm = malloc(OFI_HELLO_ADDR + hr->addr_len);
  if (hello == NULL || hm == NULL) {
    free(hello);
    free(hm);
    hello = NULL;
  }
  nxu_lock(&p->lock);
  if (hello != NULL) {
    hello->peer = p;
    hello->nparts = 1;
    hello->seq = p->seq++;
    ofi_put16(hm, OFI_MAGIC);
    hm[2] = OFI_HELLO;
    hm[3] = 0;
    ofi_put32(hm + 4, hello->seq);
    ofi_put64(hm + 8, o->id);
    memcpy(hm + OFI_HDR_SIZE, o->core->key, NX_KEY_SIZE);
    ofi_put16(hm + OFI_HELLO_SIZE, (unsigned)hr->addr_len);
    memcpy(hm + OFI_HELLO_ADDR, hr->addr, hr->addr_len);
    hello->bounce = hm;
    live_add(p, hello);
    enqueue_locked(p, hello);
  } else {
    p->dead = 1;
    p->why = "out of memory";
  }
  nxu_unlock(&p->lock);
  pthread_mutex_unlock(&o->peers_lock);
  if (p->gone)
    ofi_peer_kill(o, p, "its process has ended");
  else
    attend(o, p, 1);
  return p;
}

/* Asks the driver to look at the peer (ops to post, a death to report). */
static void attend(struct ofi *o, struct ofi_peer *p, int wake) {
  pthread_mutex_lock(&o->attn_lock);
  if (!p->attn) {
    p->attn = 1;
    p->attn_next = o->attn_head;
    o->attn_head = p;
    atomic_store(&o->attn_any, 1);
  }
  pthread_mutex_unlock(&o->attn_lock);
  if (wake)
    o->core->wake();
}

void ofi_peer_kill(struct ofi *o, struct ofi_peer *p, const char *why) {
  nxu_lock(&p->lock);
  int was = p->dead;
  if (!was) {
    p->dead = 1;
    p->why = why;
  }
  nxu_unlock(&p->lock);
  if (!was)
    attend(o, p, 1);
}

void ofi_peer_refused(struct ofi *o, uint64_t id) {
  struct ofi_peer *found = NULL;
  pthread_mutex_lock(&o->peers_lock);
  for (struct ofi_peer *p = o->all; p != NULL && found == NULL; p = p->all_next)
    if (ofi_sender_id(p->base.uuid) == id)
      found = p;
  pthread_mutex_unlock(&o->peers_lock);
  if (found == NULL)
    return;
  nxu_lock(&found->lock);
  if (!found->dead)
    found->status = NX_EACCES;
  nxu_unlock(&found->lock);
  ofi_peer_kill(o, found, "it refused our key (another computation's)");
}

static void report(struct ofi *o, struct ofi_peer *p) {
  if (atomic_exchange(&p->reported, 1))
    return;
  OFI_LOG(o, 1, "peer %02x%02x%02x%02x: %s", p->base.uuid[0], p->base.uuid[1],
          p->base.uuid[2], p->base.uuid[3], p->why != NULL ? p->why : "failed");
  o->core->peer_failed(&p->base, p->status != 0 ? p->status : NX_EPEERDEAD);
  /* What it was still sending here never comes. */
  ofi_src_lost(o, ofi_sender_id(p->base.uuid));
}

/* Ops. */

static void put_pre(const struct ofi *o, uint8_t *pre, int kind, uint32_t seq,
                    const nx_frame_t *f) {
  ofi_put16(pre, OFI_MAGIC);
  pre[2] = (uint8_t)kind;
  pre[3] = 0;
  ofi_put32(pre + 4, seq);
  ofi_put64(pre + 8, o->id);
  memcpy(pre + OFI_HDR_SIZE, nx_frame_iovs(f)[0].iov_base, NX_FRAME_HDR_SIZE);
}

static size_t payload_len(const nx_frame_t *f) {
  const struct iovec *v = nx_frame_iovs(f);
  size_t n = 0;
  for (int i = 1; i < f->iovcnt; i++)
    n += v[i].iov_len;
  return n;
}

/* The payload's non-empty pieces. */
static unsigned payload_pieces(const nx_frame_t *f) {
  const struct iovec *v = nx_frame_iovs(f);
  unsigned n = 0;
  for (int i = 1; i < f->iovcnt; i++)
    n += v[i].iov_len > 0;
  return n;
}

/* Writes the iovecs over payload bytes [off, off + len) into `out`, one
 * per piece they touch, and returns how many (at most NX_FRAME_IOV_MAX -
 * 1, the most pieces a frame has). */
static unsigned span(const nx_frame_t *f, size_t off, size_t len,
                     struct iovec *out) {
  const struct iovec *v = nx_frame_iovs(f);
  unsigned n = 0;
  for (int i = 1; i < f->iovcnt && len > 0; i++) {
    if (off >= v[i].iov_len) {
      off -= v[i].iov_len;
      continue;
    }
    size_t take = v[i].iov_len - off < len ? v[i].iov_len - off : len;
    out[n++] = (struct iovec){(uint8_t *)v[i].iov_base + off, take};
    len -= take;
    off = 0;
  }
  return n;
}

/* Copies `n` iovecs' bytes to `to`; returns the end. */
static uint8_t *gather_copy(uint8_t *to, const struct iovec *v, unsigned n) {
  for (unsigned i = 0; i < n; i++) {
    if (v[i].iov_len > 0)
      memcpy(to, v[i].iov_base, v[i].iov_len);
    to += v[i].iov_len;
  }
  return to;
}

/* Plans fragment `idx` of a large frame (`frag` bytes each, `plen` in
 * all) for a provider that takes `max` iovecs: when its bytes lie in more
 * pieces than that, merges runs of neighbours into copies until `max`
 * remain, each time the merge that copies the fewest new bytes, so that
 * large pieces stay where they are and the small ones between them are
 * copied. Writes the plan (g->n = 0 when none is needed) and returns the
 * bytes it copies; with `to` non-NULL, makes the copies at `*to` and moves
 * it past them. */
static size_t plan_frag(const nx_frame_t *f, size_t idx, size_t frag,
                        size_t plen, size_t max, struct ofi_gplan *g,
                        uint8_t **to) {
  struct iovec seg[NX_FRAME_IOV_MAX];
  size_t off = idx * frag;
  unsigned n = span(f, off, plen - off < frag ? plen - off : frag, seg);
  g->frag = (uint32_t)idx;
  g->n = 0;
  if (n <= max)
    return 0;
  /* Run j covers segments first[j] .. last[j]; more than one: a copy. */
  unsigned first[NX_FRAME_IOV_MAX], last[NX_FRAME_IOV_MAX];
  size_t bytes[NX_FRAME_IOV_MAX];
  for (unsigned j = 0; j < n; j++) {
    first[j] = last[j] = j;
    bytes[j] = seg[j].iov_len;
  }
  while (n > max) {
    unsigned best = 0;
    size_t best_cost = SIZE_MAX;
    for (unsigned j = 0; j + 1 < n; j++) {
      size_t cost = (first[j] == last[j] ? bytes[j] : 0) +
                    (first[j + 1] == last[j + 1] ? bytes[j + 1] : 0);
      if (cost < best_cost) {
        best_cost = cost;
        best = j;
      }
    }
    last[best] = last[best + 1];
    bytes[best] += bytes[best + 1];
    for (unsigned j = best + 1; j + 1 < n; j++) {
      first[j] = first[j + 1];
      last[j] = last[j + 1];
      bytes[j] = bytes[j + 1];
    }
    n--;
  }
  size_t copied = 0;
  g->n = n;
  for (unsigned j = 0; j < n; j++) {
    if (first[j] == last[j]) {
      g->iov[j] = seg[first[j]];
      continue;
    }
    g->iov[j] = (struct iovec){to != NULL ? *to : NULL, bytes[j]};
    if (to != NULL)
      *to = gather_copy(*to, &seg[first[j]], last[j] - first[j] + 1);
    copied += bytes[j];
  }
  return copied;
}

/* Calls plan_frag for each fragment that holds a boundary between two
 * pieces (no other spans two), into plans[] when it is not NULL; returns
 * how many need a plan (at most the frame's pieces - 1) and adds the bytes
 * they copy to *bytes. */
static unsigned plan_all(const nx_frame_t *f, size_t plen, size_t frag,
                         size_t max, struct ofi_gplan *plans, uint8_t **to,
                         size_t *bytes) {
  const struct iovec *v = nx_frame_iovs(f);
  struct ofi_gplan scratch;
  unsigned n = 0;
  size_t at = 0, seen = SIZE_MAX;
  for (int i = 1; i + 1 < f->iovcnt; i++) {
    at += v[i].iov_len;
    if (at == 0 || at >= plen || at % frag == 0 || at / frag == seen)
      continue;
    seen = at / frag;
    struct ofi_gplan *g = plans != NULL ? &plans[n] : &scratch;
    *bytes += plan_frag(f, seen, frag, plen, max, g, to);
    if (g->n > 0)
      n++;
  }
  return n;
}

/* For a large frame in more pieces than the provider takes iovecs: the
 * plans of the fragments that span too many pieces, with their copies
 * made now. NULL with *err = 0 when no fragment needs one. */
static struct ofi_gather *gather_make(const nx_frame_t *f, size_t plen,
                                      size_t frag, size_t max, int *err) {
  size_t bytes = 0;
  *err = 0;
  if (plan_all(f, plen, frag, max, NULL, NULL, &bytes) == 0)
    return NULL;
  struct ofi_gather *g = malloc(sizeof(*g) + bytes);
  if (g == NULL) {
    *err = NX_ENOMEM;
    return NULL;
  }
  uint8_t *to = g->copies;
  bytes = 0;
  g->n = plan_all(f, plen, frag, max, g->plan, &to, &bytes);
  return g;
}

static const struct ofi_gplan *gather_plan(const struct ofi_gather *g,
                                           uint32_t frag) {
  for (unsigned k = 0; g != NULL && k < g->n; k++)
    if (g->plan[k].frag == frag)
      return &g->plan[k];
  return NULL;
}

static void live_add(struct ofi_peer *p, struct ofi_op *op) {
  op->live_prev = NULL;
  op->live_next = p->live;
  if (p->live != NULL)
    p->live->live_prev = op;
  p->live = op;
}

static void live_del(struct ofi_peer *p, struct ofi_op *op) {
  if (op->live_prev != NULL)
    op->live_prev->live_next = op->live_next;
  else
    p->live = op->live_next;
  if (op->live_next != NULL)
    op->live_next->live_prev = op->live_prev;
}

static void enqueue_locked(struct ofi_peer *p, struct ofi_op *op) {
  op->next = NULL;
  if (p->qtail != NULL)
    p->qtail->next = op;
  else
    p->qhead = op;
  p->qtail = op;
}

static struct ofi_op *dequeue_locked(struct ofi_peer *p) {
  struct ofi_op *op = p->qhead;
  if (op != NULL) {
    p->qhead = op->next;
    if (p->qhead == NULL)
      p->qtail = NULL;
    op->next = NULL;
  }
  return op;
}

/* Hands part `i` of `op` to libfabric, with FI_INJECT when `inject` is
 * allowed and the message fits (then no completion comes and *injected is
 * set). Peer lock held. Returns what fi_sendmsg or fi_tsendmsg did. */
static ssize_t post_part(struct ofi *o, struct ofi_op *op, unsigned i,
                         int inject, int *injected) {
  struct ofi_peer *p = op->peer;
  struct ofi_rail *r = p->rail;
  const nx_frame_t *f = op->frame;
  size_t plen = f != NULL ? payload_len(f) : 0;
  struct ofi_ctx *c = &op->ctx[i];
  c->kind = CTX_TX;
  c->obj = op;
  *injected = 0;
  ssize_t rc;
  if (i == 0) {
    struct iovec iov[NX_FRAME_IOV_MAX];
    size_t n = 1, len;
    if (f == NULL) {
      iov[0] = (struct iovec){
          op->bounce, OFI_HELLO_ADDR + ofi_get16(op->bounce + OFI_HELLO_SIZE)};
    } else if (op->large) {
      iov[0] = op->rts != NULL
                   ? (struct iovec){op->rts, OFI_RTS_SIZE + op->lead}
                   : (struct iovec){op->pre, OFI_RTS_SIZE};
    } else if (op->bounce != NULL) {
      iov[0] = (struct iovec){op->bounce, OFI_PRE_SIZE + plen};
    } else {
      /* No more pieces than the provider takes (else: bounce). */
      iov[0] = (struct iovec){op->pre, OFI_PRE_SIZE};
      n += span(f, 0, plen, iov + 1);
    }
    len = iov[0].iov_len + (n > 1 ? plen : 0);
    inject = inject && r->can_inject && len <= r->inject_max;
    struct fi_msg msg = {.msg_iov = iov,
                         .iov_count = n,
                         .addr = p->addr,
                         .context = inject ? &p->inj_ctx : c};
    ofi_rail_lock(r);
    rc = fi_sendmsg(r->ep, &msg, inject ? FI_INJECT : FI_COMPLETION);
    ofi_rail_unlock(r);
    *injected = rc == 0 && inject;
  } else {
    /* The fragment from the pieces it lies in, or as planned when they
     * are more than the provider takes (gather_make). */
    size_t off = op->lead + (size_t)(i - 1) * op->frag; /* lead: in RTS */
    struct iovec iov[NX_FRAME_IOV_MAX];
    const struct ofi_gplan *g = gather_plan(op->gather, i - 1);
    size_t n =
        g != NULL
            ? g->n
            : span(f, off, plen - off < op->frag ? plen - off : op->frag, iov);
    struct fi_msg_tagged tm = {.msg_iov = g != NULL ? g->iov : iov,
                               .iov_count = n,
                               .addr = p->addr,
                               .tag = ofi_tag(o->id, op->seq, i - 1),
                               .context = c};
    ofi_rail_lock(r);
    rc = fi_tsendmsg(r->ep, &tm, FI_COMPLETION);
    ofi_rail_unlock(r);
  }
  return rc;
}

/* Posts the parts of `op` not posted yet, in order. Peer lock held.
 * Returns 0 when all are posted, -FI_EAGAIN when the provider has no room
 * now, or another negative code (the peer is unusable). */
static ssize_t op_post(struct ofi *o, struct ofi_op *op) {
  while (op->posted < op->nparts) {
    int injected;
    ssize_t rc = post_part(o, op, op->posted, 1, &injected);
    if (rc != 0)
      return rc;
    if (injected)
      op->done++; /* no completion will come */
    op->posted++;
  }
  return 0;
}

/* Whether `op` is over: every part posted has completed and no other part
 * will be posted. If so it leaves the peer's books. Peer lock held. */
static int op_finished_locked(struct ofi_peer *p, struct ofi_op *op) {
  if (op->done < op->posted || (op->posted < op->nparts && !op->abandoned))
    return 0;
  p->inflight -= op->bytes;
  p->nframes--;
  live_del(p, op);
  return 1;
}

static void op_complete(struct ofi *o, struct ofi_op *op, int status) {
  if (op->frame != NULL)
    o->core->send_done(op->frame, status);
  free(op->bounce);
  free(op->gather);
  free(op);
}

/* The status a finished op reports to the core. */
static int op_status(const struct ofi_op *op, int dead) {
  if (op->status == 0 && !op->abandoned)
    return 0;
  return dead || op->abandoned ? NX_EPEERDEAD : ofi_status_to_nx(-op->status);
}

int ofi_send_frame(struct ofi *o, struct ofi_peer *p, nx_frame_t *f,
                   int exempt) {
  struct ofi_rail *r = p->rail;
  if (f->iovcnt < 1 || f->iovcnt > NX_FRAME_IOV_MAX ||
      (f->iovcnt > 2 && f->iovs == NULL) ||
      nx_frame_iovs(f)[0].iov_len != NX_FRAME_HDR_SIZE)
    return NX_EINVAL;
  size_t plen = payload_len(f);
  unsigned pieces = payload_pieces(f);
  size_t bytes = NX_FRAME_HDR_SIZE + plen;
  int large = plen > p->eager_max;
  size_t frag = 0;
  unsigned nparts = 1;
  /* A lead goes in the RTS when the fragments need no copies (gather). */
  size_t lead = large ? nx_frame_lead(nx_frame_iovs(f)[0].iov_base) : 0;
  if (lead > OFI_LEAD_MAX || lead >= plen || lead + 8 > p->eager_max ||
      pieces > r->iov_max)
    lead = 0;
  if (large) {
    size_t tail = plen - lead;
    frag = r->frag_max;
    if (tail / frag >= OFI_FRAGS_MAX) {
      frag = tail / (OFI_FRAGS_MAX - 1) + 1;
      if (frag > OFI_FRAG_CAP || frag > r->msg_max)
        return NX_EMSGSIZE; /* 256 GiB and more */
    }
    nparts = 1 + (unsigned)((tail - 1) / frag + 1); /* tail > 0 here */
  }
  /* A small frame goes as one message from its pieces, after the module
   * header, if the provider takes that many iovecs; else from a copy. */
  int bounce = !large && 1 + pieces > r->iov_max;
  int inject = !large && !bounce && r->can_inject &&
               OFI_PRE_SIZE + plen <= r->inject_max;

  nxu_lock(&p->lock);
  if (p->dead) {
    nxu_unlock(&p->lock);
    return NX_EPEERDEAD;
  }
  /* Two bounds on what is in flight to the peer (docs/ofi.md,
   * "Backpressure"): NX_OFI_QUEUE_MAX bytes, which a single larger frame
   * may cross when nothing is in flight, and NX_OFI_QUEUE_FRAMES frames,
   * which a frame the core marks NX_PROTOCOL_SEND_EXEMPT may cross. */
  if (p->inflight > 0 && (p->inflight + bytes > o->queue_max ||
                          (p->nframes >= o->queue_frames && !exempt))) {
    nxu_unlock(&p->lock);
    return NX_EAGAIN;
  }
  if (inject && p->qhead == NULL) {
    /* The fast path: copied by the provider, no allocation, no
     * completion. */
    uint8_t pre[OFI_PRE_SIZE];
    put_pre(o, pre, OFI_EAGER, p->seq, f);
    struct iovec iov[NX_FRAME_IOV_MAX];
    iov[0] = (struct iovec){pre, OFI_PRE_SIZE};
    size_t n = 1 + span(f, 0, plen, iov + 1);
    struct fi_msg msg = {.msg_iov = iov,
                         .iov_count = n,
                         .addr = p->addr,
                         .context = &p->inj_ctx};
    ofi_rail_lock(r);
    ssize_t rc = fi_sendmsg(r->ep, &msg, FI_INJECT);
    ofi_rail_unlock(r);
    if (rc == 0) {
      p->seq++;
      nxu_unlock(&p->lock);
      ofi_wake_after_send(o, p);
      return NX_PROTOCOL_SENT; /* no send_done: the core takes it back */
    }
    if (rc != -FI_EAGAIN) {
      p->dead = 1;
      p->why = fi_strerror((int)-rc);
      nxu_unlock(&p->lock);
      attend(o, p, 1);
      return NX_EPEERDEAD;
    }
    /* No room in the provider now: queue it like any other. */
  }
  /* An RTS with a lead lives after the parts' contexts, in the op. */
  size_t rts_at = sizeof(struct ofi_op) + nparts * sizeof(struct ofi_ctx);
  struct ofi_op *op = calloc(1, rts_at + (lead != 0 ? OFI_RTS_SIZE + lead : 0));
  int err = op != NULL ? 0 : NX_ENOMEM;
  if (err == 0 && bounce) {
    op->bounce = malloc(OFI_PRE_SIZE + plen);
    if (op->bounce == NULL)
      err = NX_ENOMEM;
  }
  if (err == 0 && large && pieces > r->iov_max)
    op->gather = gather_make(f, plen, frag, r->iov_max, &err);
  if (err < 0) {
    nxu_unlock(&p->lock);
    if (op != NULL)
      free(op->bounce);
    free(op);
    return err;
  }
  if (lead != 0)
    op->rts = (uint8_t *)op + rts_at;
  op->peer = p;
  op->frame = f;
  op->bytes = bytes;
  op->large = large;
  op->frag = frag;
  op->nparts = nparts;
  op->seq = p->seq++;
  put_pre(o, op->pre, large ? OFI_RTS : OFI_EAGER, op->seq, f);
  if (large)
    ofi_put64(op->pre + OFI_PRE_SIZE, frag);
  if (op->rts != NULL) {
    struct iovec lv[NX_FRAME_IOV_MAX];
    memcpy(op->rts, op->pre, OFI_RTS_SIZE);
    gather_copy(op->rts + OFI_RTS_SIZE, lv, span(f, 0, lead, lv));
    op->lead = lead;
  }
  if (bounce) {
    /* The pieces of a frame put by reference are gathered here too. */
    memcpy(op->bounce, op->pre, OFI_PRE_SIZE);
    gather_copy(op->bounce + OFI_PRE_SIZE, nx_frame_iovs(f) + 1,
                (unsigned)f->iovcnt - 1);
  }
  p->inflight += bytes;
  p->nframes++;
  live_add(p, op);
  int posted = 0, queued = 0, finished = 0;
  if (p->qhead == NULL) {
    ssize_t rc = op_post(o, op);
    posted = op->posted > 0;
    if (rc == -FI_EAGAIN) {
      enqueue_locked(p, op);
      queued = 1;
    } else if (rc < 0) {
      /* The provider refused the peer: it counts as dead. */
      p->dead = 1;
      p->why = fi_strerror((int)-rc);
      op->abandoned = 1;
      if (op->posted == 0) {
        p->inflight -= bytes;
        p->nframes--;
        live_del(p, op);
        nxu_unlock(&p->lock);
        attend(o, p, 1);
        free(op->bounce);
        free(op->gather);
        free(op);
        return NX_EPEERDEAD; /* the core keeps the frame */
      }
      queued = 1; /* for the driver's attention */
      finished = op_finished_locked(p, op);
    } else {
      finished = op_finished_locked(p, op);
    }
  } else {
    enqueue_locked(p, op);
    queued = 1;
  }
  int dead = p->dead;
  nxu_unlock(&p->lock);
  if (posted)
    ofi_wake_after_send(o, p);
  if (queued)
    attend(o, p, 1);
  if (finished)
    op_complete(o, op, op_status(op, dead));
  return 0;
}

/* Resending. When one of ofi_rxm's connections closes, the provider fails
 * the sends it held on it: with a connection error (FI_ENOTCONN, the tcp
 * provider's word for a socket that was shut; FI_ECONNRESET,
 * FI_ECONNREFUSED, FI_ECONNABORTED) or, for those still queued behind it,
 * FI_ECANCELED; the next send to that address opens a new connection. A
 * connection is not its process: a peer whose process still runs, as its
 * pidfd says, is not failed for that. The failed part goes again, the same
 * bytes under the same sequence number (a fragment: the same tag), posted
 * by the driver OFI_RESEND_NS << (n - 1) after its n-th failure, at most
 * OFI_RESEND_MAX times. After that, once the process has ended, for a peer
 * whose process this one cannot watch (another host or pid namespace), and
 * for the HELLO (a receiver bans a sender whose HELLO comes twice), an
 * error fails the peer as before.
 *
 * Handled once: a provider fails a send it did not deliver whole (the
 * tcp provider fails the message whose bytes it could not hand to the
 * socket, and cancels those behind it; the receiving ofi_rxm drops a
 * message cut short with its connection), so the receiver sees the part
 * once. Should a copy have arrived all the same, the receiver still
 * delivers the frame once: it takes each sender's sequence number once
 * (ofi_rail.c: a message with one already delivered or pending is dropped
 * and counted), and it posts one receive per fragment tag, so no fragment
 * is written into a frame twice. */

static int transient(int err) {
  switch (err) {
  case FI_ENOTCONN:
  case FI_ECONNRESET:
  case FI_ECONNREFUSED:
  case FI_ECONNABORTED:
  case FI_ECANCELED: return 1;
  default: return 0;
  }
}

static void redo_push_locked(struct ofi_peer *p, struct ofi_ctx *c,
                             uint64_t at) {
  c->redo_next = p->redo;
  p->redo = c;
  if (p->redo_at < at)
    p->redo_at = at;
}

static struct ofi_ctx *redo_pop_locked(struct ofi_peer *p) {
  struct ofi_ctx *c = p->redo;
  if (c != NULL)
    p->redo = c->redo_next;
  return c;
}

void ofi_send_completed(struct ofi *o, struct ofi_ctx *c, int err) {
  struct ofi_op *op = c->obj;
  struct ofi_peer *p = op->peer;
  /* Whether the process lives costs a system call: asked only when the
   * error is one a resend may cure, and not under the lock. */
  int alive =
      err != 0 && transient(err) && op->frame != NULL && ofi_wake_peer_alive(p);
  nxu_lock(&p->lock);
  if (alive && !p->dead && c->tries < OFI_RESEND_MAX) {
    int first = p->redo == NULL;
    c->tries++;
    redo_push_locked(p, c, nxu_now_ns() + (OFI_RESEND_NS << (c->tries - 1)));
    nxu_unlock(&p->lock);
    if (first)
      OFI_LOG(o, 1,
              "peer %02x%02x%02x%02x: a send failed (%s), its process "
              "runs: sent again",
              p->base.uuid[0], p->base.uuid[1], p->base.uuid[2],
              p->base.uuid[3], fi_strerror(err));
    attend(o, p, 0);
    return;
  }
  op->done++;
  if (err != 0 && op->status == 0)
    op->status = err;
  int kill = err != 0 && err != FI_ECANCELED && !p->dead;
  if (kill) {
    p->dead = 1;
    p->why = fi_strerror(err);
  }
  int finished = op_finished_locked(p, op);
  int dead = p->dead;
  nxu_unlock(&p->lock);
  if (kill)
    attend(o, p, 0);
  if (finished)
    op_complete(o, op, op_status(op, dead));
}

/* Posts again the parts on the peer's redo list, once they are due.
 * Peer lock held. Returns 0 when the list is empty, -FI_EAGAIN when a part
 * must wait (not due, or no room in the provider), or another negative
 * code (the peer is unusable: the part stays listed, for the caller to
 * fail with the rest). Sets *posted when it posted one. */
static ssize_t redo_post_locked(struct ofi *o, struct ofi_peer *p,
                                int *posted) {
  if (p->redo == NULL)
    return 0;
  if (nxu_now_ns() < p->redo_at)
    return -FI_EAGAIN;
  struct ofi_ctx *c;
  while ((c = p->redo) != NULL) {
    struct ofi_op *op = c->obj;
    int injected;
    /* Not injected: a resent part must complete, to be sent again or
     * counted. */
    ssize_t rc = post_part(o, op, (unsigned)(c - op->ctx), 0, &injected);
    if (rc < 0)
      return rc;
    redo_pop_locked(p);
    *posted = 1;
  }
  return 0;
}

/* The driver's look at one peer: post its queue, or fail it. */
static void service_peer(struct ofi *o, struct ofi_peer *p) {
  struct ofi_op *ok = NULL, *failed = NULL;
  int posted = 0, again = 0;
  nxu_lock(&p->lock);
  if (!p->dead) {
    ssize_t rc = redo_post_locked(o, p, &posted);
    if (rc == -FI_EAGAIN) {
      again = 1;
    } else if (rc < 0) {
      p->dead = 1;
      p->why = fi_strerror((int)-rc);
    }
  }
  while (!p->dead && p->qhead != NULL) {
    struct ofi_op *op = p->qhead;
    unsigned before = op->posted;
    ssize_t rc = op_post(o, op);
    posted |= op->posted > before;
    if (rc == -FI_EAGAIN) {
      again = 1;
      break;
    }
    dequeue_locked(p);
    if (rc < 0) {
      p->dead = 1;
      p->why = fi_strerror((int)-rc);
      op->abandoned = 1;
    }
    if (op_finished_locked(p, op)) {
      op->next = rc < 0 ? failed : ok;
      *(rc < 0 ? &failed : &ok) = op;
    }
  }
  if (p->dead) {
    /* Nothing more is posted; ops with parts in flight finish when those
     * complete (on a dead shm peer: at finalize). */
    struct ofi_op *op;
    while ((op = dequeue_locked(p)) != NULL) {
      op->abandoned = 1;
      if (op_finished_locked(p, op)) {
        op->next = failed;
        failed = op;
      }
    }
    /* Parts waiting to be sent again never will be; their op (queued
     * or not) is finished here once its other parts are. */
    struct ofi_ctx *c;
    while ((c = redo_pop_locked(p)) != NULL) {
      op = c->obj;
      op->done++;
      op->abandoned = 1;
      if (op_finished_locked(p, op)) {
        op->next = failed;
        failed = op;
      }
    }
  }
  int dead = p->dead;
  nxu_unlock(&p->lock);
  if (posted) {
    ofi_wake_after_send(o, p);
    o->events++;
  }
  /* The peer first, then its RSRs: whoever hears of a lost RSR can find
   * its destination failed already. */
  if (dead)
    report(o, p);
  while (ok != NULL) {
    struct ofi_op *next = ok->next;
    op_complete(o, ok, 0);
    o->events++;
    ok = next;
  }
  while (failed != NULL) {
    struct ofi_op *next = failed->next;
    op_complete(o, failed, NX_EPEERDEAD);
    o->events++;
    failed = next;
  }
  if (again)
    attend(o, p, 0); /* the next progress call tries again */
}

void ofi_service(struct ofi *o) {
  /* Senders may put a peer back on the attention list while the driver
   * serves it: the driver's walk uses a link of its own. */
  struct ofi_peer *list = NULL;
  pthread_mutex_lock(&o->attn_lock);
  for (struct ofi_peer *q = o->attn_head; q != NULL; q = q->attn_next) {
    q->attn = 0;
    q->serve_next = list;
    list = q;
  }
  o->attn_head = NULL;
  atomic_store(&o->attn_any, 0);
  pthread_mutex_unlock(&o->attn_lock);
  while (list != NULL) {
    struct ofi_peer *next = list->serve_next;
    service_peer(o, list);
    list = next;
  }
}

int ofi_sends_pending(struct ofi *o) {
  int pending = 0;
  pthread_mutex_lock(&o->peers_lock);
  for (struct ofi_peer *p = o->all; p != NULL && !pending; p = p->all_next) {
    nxu_lock(&p->lock);
    pending = !p->dead && p->live != NULL;
    nxu_unlock(&p->lock);
  }
  pthread_mutex_unlock(&o->peers_lock);
  return pending;
}

/* After the rails closed, libfabric holds none of our ops: every frame
 * still here goes back to the core, failed. */
void ofi_peers_free(struct ofi *o) {
  struct ofi_peer *p = o->all;
  int lost = 0;
  while (p != NULL) {
    struct ofi_peer *next = p->all_next;
    struct ofi_op *op = p->live;
    while (op != NULL) {
      struct ofi_op *n = op->live_next;
      lost += op->frame != NULL;
      op_complete(o, op, p->dead ? NX_EPEERDEAD : NX_EFINALIZED);
      op = n;
    }
    ofi_wake_peer_fini(p);
    free(p);
    p = next;
  }
  if (lost > 0)
    OFI_LOG(o, 1, "finalize: %d frame(s) could not be sent", lost);
  o->all = NULL;
  memset(&o->peers, 0, sizeof(o->peers));
  o->attn_head = NULL;
}
