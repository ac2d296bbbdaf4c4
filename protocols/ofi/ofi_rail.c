/* Rails of the ofi module: opening providers, the posted receive buffers,
 * reading completion queues, and the receive path that reorders each sender's
 * frames; driver only. */
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <string.h>

#include "ofi_rail.h"
#include "nxu_key.h"

int ofi_status_to_nx(int status) {
  switch (status) {
  case 0: return 0;
  case -FI_EAGAIN: return NX_EAGAIN;
  case -FI_ENOMEM:
  case -FI_ENOBUFS:
  case -FI_ENOSPC: return NX_ENOMEM;
  case -FI_EINVAL:
  case -FI_EBADFLAGS: return NX_EINVAL;
  case -FI_EACCES:
  case -FI_EPERM:
  case -FI_EKEYREJECTED: return NX_EACCES;
  case -FI_EBUSY:
  case -FI_EADDRINUSE: return NX_EBUSY;
  case -FI_ENODATA:
  case -FI_ENODEV:
  case -FI_ENOENT:
  case -FI_EADDRNOTAVAIL:
  case -FI_ENETDOWN:
  case -FI_ENETUNREACH:
  case -FI_EHOSTUNREACH:
  case -FI_EHOSTDOWN: return NX_EUNREACH;
  case -FI_ENOSYS:
  case -FI_EOPNOTSUPP:
  case -FI_ENOPROTOOPT: return NX_ENOTSUP;
  case -FI_ETIMEDOUT: return NX_ETIMEDOUT;
  case -FI_ECONNRESET: return NX_ECONNRESET;
  case -FI_ECONNREFUSED:
  case -FI_ECONNABORTED:
  case -FI_ENOTCONN:
  case -FI_ESHUTDOWN:
  case -FI_EREMOTEIO: return NX_EPEERDEAD;
  case -FI_EMSGSIZE:
  case -FI_ETOOSMALL:
  case -FI_ETRUNC: return NX_EMSGSIZE;
  case -FI_ECANCELED: return NX_EFINALIZED;
  default: return NX_EIO;
  }
}

/* splitmix64's finaliser over the sender id and the frame's (sequence,
 * fragment) pair: for one sender, distinct pairs give distinct tags (every
 * step is a bijection); across senders, tags look random, so two frames
 * being received at once share a tag with probability about 2^-64. */
uint64_t ofi_tag(uint64_t id, uint32_t seq, uint32_t frag) {
  uint64_t x = ((uint64_t)seq << 24 | (frag & (OFI_FRAGS_MAX - 1))) *
               0x9e3779b97f4a7c15ull;
  uint64_t z = id ^ x;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Receiving. Every rail keeps OFI_RX_BUFS eager buffers posted with
 * fi_recvmsg, each large enough for the module header, the frame header
 * and `eager_max` payload bytes. A completed buffer holds either a whole
 * frame (EAGER: copied into the frame frame_alloc returns, then the
 * buffer is posted again) or the announcement of a large one (RTS): then
 * the frame is allocated at once and one fi_trecvmsg per fragment is
 * posted straight into its payload, with the tags the sender uses, so the
 * payload is written where it belongs, by the provider, once. If the
 * fragments arrived first, the provider holds them as unexpected messages
 * until the receives are posted (shm and ofi_rxm handle that themselves:
 * CMA or their rendezvous), so the sender never waits for a clear-to-send.
 *
 * Order. Providers need not complete receives in the order they were sent
 * (ofi_rxm's rendezvous may complete a large message after a small one
 * sent later), and a large frame completes when its last fragment does. So
 * every message carries a sequence number per pair of processes, and frames
 * from one sender are delivered strictly in that order: a frame that is
 * complete early waits in its sender's pending list (struct ofi_src) until the
 * frames before it are delivered. A frame that is dropped (a header the
 * core refused, a fragment that failed) still takes its turn, as nothing.
 * The common case, the next frame in sequence with nothing pending, is
 * delivered straight from the completion.
 *
 * Trust. Anyone who can address the endpoint can send to it. A sender's
 * first message must be its HELLO with the computation's key (sequence
 * number 0); a sender whose first message is anything else, or whose key
 * is wrong, is dropped for good and counted (bad_peer). Every length,
 * count and sequence number is checked before use, and nothing is ever
 * received truncated (see OFI_FRAG_CAP). */

/* Opening. */

static struct fi_info *make_hints(enum fi_threading threading) {
  struct fi_info *h = fi_allocinfo();
  if (h == NULL)
    return NULL;
  h->caps = FI_MSG | FI_TAGGED;
  /* We can give every operation its own context, and register no memory
   * (providers that need FI_MR_LOCAL, like verbs, are left out). */
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->threading = threading;
  h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  return h;
}

static void rail_close(struct ofi_rail *r) {
  if (r->ep != NULL)
    fi_close(&r->ep->fid);
  if (r->cq != NULL)
    fi_close(&r->cq->fid);
  if (r->av != NULL)
    fi_close(&r->av->fid);
  if (r->domain != NULL)
    fi_close(&r->domain->fid);
  if (r->fabric != NULL)
    fi_close(&r->fabric->fid);
  r->ep = NULL;
  r->cq = NULL;
  r->av = NULL;
  r->domain = NULL;
  r->fabric = NULL;
  for (int i = 0; i < r->nrxbufs; i++)
    free(r->rxbufs[i]);
  free(r->scratch);
  r->scratch = NULL;
  r->nrxbufs = 0;
  r->repost = NULL;
}

static void post_rxbuf(struct ofi_rail *r, struct ofi_rxbuf *b) {
  struct iovec iov = {.iov_base = b->data, .iov_len = b->size};
  struct fi_msg msg = {.msg_iov = &iov,
                       .iov_count = 1,
                       .addr = FI_ADDR_UNSPEC,
                       .context = &b->ctx};
  ofi_rail_lock(r);
  ssize_t rc = fi_recvmsg(r->ep, &msg, FI_COMPLETION);
  ofi_rail_unlock(r);
  if (rc == 0)
    return;
  /* shm says FI_ENOMEM when its receive queue is full. */
  if (rc != -FI_EAGAIN && rc != -FI_ENOMEM)
    OFI_LOG(r->o, 0, "%s: cannot post a receive buffer: %s", r->prov,
            fi_strerror((int)-rc));
  /* Try again at the next progress call. */
  b->next = r->repost;
  r->repost = b;
}

/* Opens one rail from a fi_getinfo entry; on failure writes why into
 * `err` and leaves nothing open. */
static int rail_open(struct ofi *o, struct ofi_rail *r, struct fi_info *info,
                     char *err, size_t err_len) {
  memset(r, 0, sizeof(*r));
  r->o = o;
  r->index = o->nrails;
  r->wait_fd = -1;
  nxu_lock_init(&r->lock);
  snprintf(r->prov, sizeof(r->prov), "%s", info->fabric_attr->prov_name);
  snprintf(r->fabric_name, sizeof(r->fabric_name), "%s",
           info->fabric_attr->name != NULL ? info->fabric_attr->name : "?");
  r->local = strcmp(r->prov, "shm") == 0;
  r->serialize = info->domain_attr->threading != FI_THREAD_SAFE;
  r->addr_format = info->addr_format;
  r->inject_max = info->tx_attr->inject_size;
  r->iov_max = info->tx_attr->iov_limit > 0 ? info->tx_attr->iov_limit : 1;
  r->msg_max = info->ep_attr->max_msg_size;
  r->can_inject = !(info->mode & (FI_CONTEXT | FI_CONTEXT2)) &&
                  r->inject_max >= OFI_PRE_SIZE;
  const char *step = "max_msg_size";
  int rc = 0;
  if (r->msg_max < OFI_RTS_SIZE + 4096) {
    rc = -FI_EMSGSIZE;
    goto err;
  }
  r->eager_max = o->eager_max;
  if (r->eager_max > r->msg_max - OFI_PRE_SIZE)
    r->eager_max = r->msg_max - OFI_PRE_SIZE;
  r->frag_max = o->frag_max < r->msg_max ? o->frag_max : r->msg_max;

  step = "fi_fabric";
  rc = fi_fabric(info->fabric_attr, &r->fabric, NULL);
  if (rc != 0)
    goto err;
  step = "fi_domain";
  rc = fi_domain(r->fabric, info, &r->domain, NULL);
  if (rc != 0)
    goto err;
  step = "fi_av_open";
  struct fi_av_attr av = {.type = info->domain_attr->av_type != FI_AV_UNSPEC
                                      ? info->domain_attr->av_type
                                      : FI_AV_TABLE,
                          .count = 64};
  rc = fi_av_open(r->domain, &av, &r->av, NULL);
  if (rc != 0)
    goto err;
  /* A wait fd where the provider has one; shm has none (FI_ENOSYS). */
  step = "fi_cq_open";
  struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
  rc = fi_cq_open(r->domain, &cq, &r->cq, NULL);
  if (rc != 0) {
    cq.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(r->domain, &cq, &r->cq, NULL);
  } else if (fi_control(&r->cq->fid, FI_GETWAIT, &r->wait_fd) != 0) {
    r->wait_fd = -1;
  }
  if (rc != 0)
    goto err;
  step = "fi_endpoint";
  rc = fi_endpoint(r->domain, info, &r->ep, NULL);
  if (rc != 0)
    goto err;
  step = "fi_ep_bind";
  rc = fi_ep_bind(r->ep, &r->av->fid, 0);
  if (rc == 0)
    rc = fi_ep_bind(r->ep, &r->cq->fid,
                    FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
  if (rc != 0)
    goto err;
  step = "fi_enable";
  rc = fi_enable(r->ep);
  if (rc != 0)
    goto err;
  step = "fi_getname";
  r->addr_len = sizeof(r->addr);
  rc = fi_getname(&r->ep->fid, r->addr, &r->addr_len);
  if (rc == 0 && (r->addr_len == 0 || r->addr_len > sizeof(r->addr)))
    rc = -FI_ETOOSMALL;
  if (rc != 0)
    goto err;
  step = "receive buffers";
  for (int i = 0; i < OFI_RX_BUFS; i++) {
    size_t size = OFI_PRE_SIZE + r->eager_max;
    struct ofi_rxbuf *b = malloc(sizeof(*b) + size);
    if (b == NULL) {
      rc = -FI_ENOMEM;
      goto err;
    }
    memset(b, 0, sizeof(*b));
    b->ctx.kind = CTX_RXBUF;
    b->ctx.obj = b;
    b->rail = r;
    b->size = size;
    r->rxbufs[r->nrxbufs++] = b;
    post_rxbuf(r, b);
  }
  return 0;
err:
  snprintf(err, err_len, "%s (%s): %s: %s", r->prov, r->fabric_name, step,
           fi_strerror(rc < 0 ? -rc : rc));
  rail_close(r);
  return ofi_status_to_nx(rc < 0 ? rc : -rc);
}

int ofi_rails_open(struct ofi *o, char *why, size_t why_len) {
  enum fi_threading threading =
      o->force_domain ? FI_THREAD_DOMAIN : FI_THREAD_SAFE;
  struct fi_info *hints = make_hints(threading), *list = NULL;
  if (hints == NULL)
    return NX_ENOMEM;
  int rc = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
  if (rc == -FI_ENODATA && threading == FI_THREAD_SAFE) {
    /* No provider serialises itself: serialise for it. */
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    rc = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
  }
  fi_freeinfo(hints);
  if (rc != 0) {
    const char *env = getenv("FI_PROVIDER");
    snprintf(why, why_len, "fi_getinfo: %s%s%s%s", fi_strerror(-rc),
             env != NULL ? " (FI_PROVIDER=" : "", env != NULL ? env : "",
             env != NULL ? ")" : "");
    return rc == -FI_ENODATA ? NX_EUNREACH : ofi_status_to_nx(rc);
  }
  /* The first shm entry, and the first other entry that opens: fi_getinfo
   * lists the better providers first, and hardware it cannot find never
   * shows up; one that shows up but fails to open is skipped, loudly. */
  int have_local = 0, have_net = 0, tries = 0;
  char first_err[160] = "";
  for (struct fi_info *i = list; i != NULL && o->nrails < OFI_MAX_RAILS;
       i = i->next) {
    int local = strcmp(i->fabric_attr->prov_name, "shm") == 0;
    if ((local && have_local) || (!local && have_net) || tries >= 8)
      continue;
    tries++;
    char err[160];
    if (rail_open(o, &o->rails[o->nrails], i, err, sizeof(err)) < 0) {
      OFI_LOG(o, 1, "skipping %s", err);
      if (first_err[0] == '\0')
        snprintf(first_err, sizeof(first_err), "%s", err);
      continue;
    }
    OFI_LOG(o, 2, "opened %s (fabric %s)%s", o->rails[o->nrails].prov,
            o->rails[o->nrails].fabric_name,
            o->rails[o->nrails].wait_fd >= 0 ? " with a wait fd" : "");
    o->nrails++;
    if (local)
      have_local = 1;
    else
      have_net = 1;
  }
  fi_freeinfo(list);
  if (o->nrails == 0) {
    snprintf(why, why_len, "no usable provider: %s",
             first_err[0] ? first_err : "fi_getinfo offered none");
    return NX_EUNREACH;
  }
  return 0;
}

void ofi_rails_close(struct ofi *o) {
  for (int i = 0; i < o->nrails; i++)
    rail_close(&o->rails[i]);
  o->nrails = 0;
}

/* Senders. */

static unsigned src_bucket(uint64_t id) {
  return (unsigned)((id ^ id >> 29) % OFI_SRC_BUCKETS);
}

static struct ofi_src *src_get(struct ofi *o, uint64_t id) {
  struct ofi_src **head = &o->srcs[src_bucket(id)];
  for (struct ofi_src *s = *head; s != NULL; s = s->next)
    if (s->id == id)
      return s;
  struct ofi_src *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return NULL;
  s->id = id;
  s->next = *head;
  *head = s;
  return s;
}

void ofi_srcs_free(struct ofi *o) {
  for (int i = 0; i < OFI_SRC_BUCKETS; i++)
    while (o->srcs[i] != NULL) {
      struct ofi_src *s = o->srcs[i];
      o->srcs[i] = s->next;
      while (s->pending != NULL) {
        struct ofi_rx *rx = s->pending;
        s->pending = rx->next;
        if (rx->frame != NULL)
          o->core->frame_free(rx->frame);
        free(rx);
      }
      free(s);
    }
}

static void deliver(struct ofi *o, nx_frame_t *f) {
  if (o->closing)
    o->core->frame_free(f);
  else
    nx_frame_batch_add(o->core, o->batch, f);
  o->budget--;
  o->events++;
}

static int rx_complete(const struct ofi_rx *rx) {
  return rx->posted == rx->nparts && rx->done == rx->nparts;
}

/* Delivers the sender's frames that are next in sequence and complete. */
static void flush(struct ofi *o, struct ofi_src *s) {
  struct ofi_rx *rx;
  while ((rx = s->pending) != NULL && rx->seq == s->next_seq &&
         rx_complete(rx)) {
    s->pending = rx->next;
    if (s->pending == NULL)
      s->tail = NULL;
    s->next_seq++;
    if (rx->frame != NULL)
      deliver(o, rx->frame);
    free(rx);
  }
}

/* Whether `seq` can be this sender's next frames: not delivered yet, and
 * not absurdly far ahead. */
static int seq_ok(const struct ofi_src *s, uint32_t seq) {
  int32_t ahead = (int32_t)(seq - s->next_seq);
  return ahead >= 0 && ahead <= (1 << 24);
}

/* Puts `rx` in its sender's pending list, in sequence order; frames
 * usually come in order, so usually at the tail. Returns -1 if that
 * sequence number is pending already (a duplicate). */
static int pend(struct ofi_src *s, struct ofi_rx *rx) {
  rx->next = NULL;
  if (s->tail == NULL || (int32_t)(rx->seq - s->tail->seq) > 0) {
    if (s->tail != NULL)
      s->tail->next = rx;
    else
      s->pending = rx;
    s->tail = rx;
    return 0;
  }
  struct ofi_rx **pp = &s->pending;
  while ((int32_t)((*pp)->seq - rx->seq) < 0)
    pp = &(*pp)->next; /* stops at the tail at the latest */
  if ((*pp)->seq == rx->seq)
    return -1;
  rx->next = *pp;
  *pp = rx;
  return 0;
}

/* A frame (or NULL: dropped) is complete: deliver it now, or when its turn
 * comes. */
static void arrived(struct ofi *o, struct ofi_src *s, uint32_t seq,
                    nx_frame_t *f) {
  if (seq == s->next_seq && s->pending == NULL) {
    s->next_seq++;
    if (f != NULL)
      deliver(o, f);
    else
      o->events++;
    return;
  }
  struct ofi_rx *rx = calloc(1, sizeof(*rx));
  if (rx == NULL) {
    /* Nowhere to keep it: lose this frame rather than the order. */
    OFI_LOG(o, 0, "out of memory: a frame is lost");
    if (f != NULL)
      o->core->frame_free(f);
    f = NULL;
    /* A placeholder is still needed; try once more with nothing in it. */
    rx = calloc(1, sizeof(*rx));
    if (rx == NULL)
      return; /* the sender's later frames wait until finalize */
  }
  rx->src = s;
  rx->seq = seq;
  rx->frame = f;
  if (pend(s, rx) < 0) {
    o->core->bad_peer(OFI_NAME, "a message sent twice");
    if (f != NULL)
      o->core->frame_free(f);
    free(rx);
    return;
  }
  flush(o, s);
}

/* Large frames: posting the fragments' receives. */

/* Posts the fragments' receives, at most OFI_FRAG_RECVS_MAX on the rail at
 * a time (the provider's receive queue is shared with the eager buffers);
 * the rest wait on rail.unposted for completions to make room. */
static void post_frags(struct ofi_rail *r, struct ofi_rx *rx) {
  uint8_t *base = rx->frame != NULL ? rx->frame->iov[1].iov_base : NULL;
  if (rx->frame == NULL && r->scratch == NULL &&
      (r->scratch = malloc(OFI_FRAG_CAP)) == NULL) {
    OFI_LOG(r->o, 0, "%s: no memory to discard a dropped frame", r->prov);
    rx->done += rx->nparts - rx->posted;
    rx->posted = rx->nparts;
    return; /* its fragments are never matched */
  }
  while (rx->posted < rx->nparts) {
    if (r->frag_recvs >= OFI_FRAG_RECVS_MAX) {
      rx->unposted_next = r->unposted;
      r->unposted = rx;
      return;
    }
    unsigned i = rx->posted;
    size_t off = (size_t)i * rx->frag;
    /* A dropped frame's fragments are received whole into scratch. */
    struct iovec iov = {.iov_base = rx->frame != NULL ? base + off : r->scratch,
                        .iov_len = rx->total - off < rx->frag ? rx->total - off
                                                              : rx->frag};
    rx->ctx[i].kind = CTX_RXFRAG;
    rx->ctx[i].obj = rx;
    struct fi_msg_tagged tm = {.msg_iov = &iov,
                               .iov_count = 1,
                               .addr = FI_ADDR_UNSPEC,
                               .tag = ofi_tag(rx->id, rx->seq, i),
                               .ignore = 0,
                               .context = &rx->ctx[i]};
    ofi_rail_lock(r);
    ssize_t rc = fi_trecvmsg(r->ep, &tm, FI_COMPLETION);
    ofi_rail_unlock(r);
    if (rc == -FI_EAGAIN || rc == -FI_ENOMEM) {
      rx->unposted_next = r->unposted;
      r->unposted = rx;
      return;
    }
    if (rc < 0) {
      OFI_LOG(r->o, 0, "%s: cannot post a receive for a large frame: %s",
              r->prov, fi_strerror((int)-rc));
      rx->failed = 1;
      rx->done += rx->nparts - rx->posted;
      rx->posted = rx->nparts;
      return;
    }
    rx->posted++;
    r->frag_recvs++;
  }
}

/* Once every fragment's receive is over: a frame that lost one is
 * dropped; then whatever is next in sequence goes. Frees `rx` if it is
 * delivered. */
/* A frame whose fragments are all over and one failed is freed (the
 * core reports a placed one); its turn still comes, empty. */
static void rx_drop_failed(struct ofi *o, struct ofi_rx *rx) {
  if (rx_complete(rx) && rx->failed && rx->frame != NULL) {
    o->core->frame_free(rx->frame);
    rx->frame = NULL;
  }
}

static void rx_settle(struct ofi *o, struct ofi_rx *rx) {
  if (!rx_complete(rx))
    return;
  rx_drop_failed(o, rx);
  o->events++;
  flush(o, rx->src);
}

/* A fragment's receive completed, or failed. */
static void frag_done(struct ofi *o, struct ofi_rx *rx, int err) {
  rx->rail->frag_recvs--;
  if (err != 0) {
    if (err != FI_ECANCELED)
      OFI_LOG(o, 1, "a fragment of a large frame failed: %s", fi_strerror(err));
    rx->failed = 1;
  }
  rx->done++;
  rx_settle(o, rx);
}

/* The process that sends as `id` is dead: the fragments of its frames
 * still awaited never come. The receives posted for them are cancelled
 * (each completes with FI_ECANCELED, or has completed already: frag_done
 * then fails its frame, which the core reports to the receiving program
 * if it was placed), and those not posted yet count as failed. Driver
 * only, as every receive. */
void ofi_src_lost(struct ofi *o, uint64_t id) {
  struct ofi_src *s = o->srcs[src_bucket(id)];
  while (s != NULL && s->id != id)
    s = s->next;
  if (s == NULL)
    return;
  for (struct ofi_rx *rx = s->pending; rx != NULL; rx = rx->next) {
    if (rx_complete(rx))
      continue;
    struct ofi_rail *r = rx->rail;
    rx->failed = 1;
    if (rx->posted < rx->nparts) {
      for (struct ofi_rx **pp = &r->unposted; *pp != NULL;
           pp = &(*pp)->unposted_next)
        if (*pp == rx) {
          *pp = rx->unposted_next;
          break;
        }
      rx->done += rx->nparts - rx->posted;
      rx->posted = rx->nparts;
    }
    ofi_rail_lock(r);
    for (unsigned i = 0; i < rx->nparts; i++)
      fi_cancel(&r->ep->fid, &rx->ctx[i]); /* -FI_ENOENT: completed */
    ofi_rail_unlock(r);
  }
  /* Those whose every fragment is over now go, in their order. */
  for (struct ofi_rx *rx = s->pending; rx != NULL; rx = rx->next)
    rx_drop_failed(o, rx);
  flush(o, s);
}

/* Addresses go to fi_av_insert, which trusts them: only formats whose
 * shape can be checked here are accepted. */
int ofi_addr_ok(const struct ofi_rail *r, uint32_t format, const uint8_t *a,
                size_t len) {
  if (format != r->addr_format || len == 0)
    return 0;
  sa_family_t family = 0; /* native byte order, as fi_getname wrote it */
  if (len >= sizeof(family))
    memcpy(&family, a, sizeof(family));
  switch (format) {
  case FI_ADDR_STR:
    /* One NUL, at the end. */
    return len <= 256 && memchr(a, '\0', len) == a + len - 1;
  case FI_SOCKADDR_IN:
    return len == sizeof(struct sockaddr_in) && family == AF_INET;
  case FI_SOCKADDR_IN6:
    return len == sizeof(struct sockaddr_in6) && family == AF_INET6;
  case FI_SOCKADDR:
    return (len == sizeof(struct sockaddr_in) && family == AF_INET) ||
           (len == sizeof(struct sockaddr_in6) && family == AF_INET6);
  default:
    /* A provider's own binary format: the same length as ours. */
    return len == r->addr_len;
  }
}

/* Whether the HELLO `m` of `len` bytes has the right shape: the key, and
 * the sender's address or (a raw sender) none. */
static int hello_shape(const uint8_t *m, size_t len) {
  return len == OFI_HELLO_SIZE ||
         (len >= OFI_HELLO_ADDR &&
          len == OFI_HELLO_ADDR + ofi_get16(m + OFI_HELLO_SIZE));
}

/* A sender presented the wrong key in its HELLO `m`: it is told (a
 * REFUSE, injected to the address its HELLO gave), so that its RSRs are
 * reported lost at once (NX_EACCES) rather than never confirmed. At most
 * OFI_REFUSALS_MAX per process: each takes a place in the AV. */
static void refuse(struct ofi_rail *r, const uint8_t *m, size_t len) {
  struct ofi *o = r->o;
  size_t alen = len > OFI_HELLO_ADDR ? len - OFI_HELLO_ADDR : 0;
  const uint8_t *a = m + OFI_HELLO_ADDR;
  if (alen == 0 || !r->can_inject || OFI_REFUSE_SIZE > r->inject_max ||
      o->refusals >= OFI_REFUSALS_MAX ||
      !ofi_addr_ok(r, r->addr_format, a, alen))
    return;
  o->refusals++;
  fi_addr_t to;
  uint8_t msg[OFI_REFUSE_SIZE];
  ofi_put16(msg, OFI_MAGIC);
  msg[2] = OFI_REFUSE;
  msg[3] = 0;
  ofi_put32(msg + 4, 0);
  ofi_put64(msg + 8, o->id);
  memcpy(msg + OFI_HDR_SIZE, m + 8, 8); /* the refused sender's id */
  r->refuse_ctx.kind = CTX_REFUSE;
  ofi_rail_lock(r);
  if (fi_av_insert(r->av, a, 1, &to, 0, NULL) == 1) {
    struct iovec iov = {msg, sizeof(msg)};
    struct fi_msg fm = {
        .msg_iov = &iov, .iov_count = 1, .addr = to, .context = &r->refuse_ctx};
    ssize_t rc = fi_sendmsg(r->ep, &fm, FI_INJECT);
    if (rc != 0)
      OFI_LOG(o, 1, "%s: cannot tell a sender its key is wrong: %s", r->prov,
              fi_strerror((int)-rc));
  }
  ofi_rail_unlock(r);
}

/* An eager buffer completed: one message from some sender. */
static void on_message(struct ofi_rail *r, struct ofi_rxbuf *b, size_t len) {
  struct ofi *o = r->o;
  const uint8_t *m = b->data;
  if (len >= OFI_REFUSE_SIZE && len <= b->size && ofi_get16(m) == OFI_MAGIC &&
      m[2] == OFI_REFUSE) {
    /* A peer refused our key: a REFUSE naming us. */
    if (len == OFI_REFUSE_SIZE && m[3] == 0 &&
        ofi_get64(m + OFI_HDR_SIZE) == o->id)
      o->peer_refused(o, ofi_get64(m + 8));
    else
      o->core->bad_peer(OFI_NAME, "a malformed refusal");
    post_rxbuf(r, b);
    return;
  }
  if (len < OFI_HELLO_SIZE || len > b->size || ofi_get16(m) != OFI_MAGIC ||
      m[2] < OFI_EAGER || m[2] > OFI_HELLO || m[3] != 0 ||
      (m[2] != OFI_HELLO && len < OFI_PRE_SIZE)) {
    o->core->bad_peer(OFI_NAME, "a malformed message");
    post_rxbuf(r, b);
    return;
  }
  uint32_t seq = ofi_get32(m + 4);
  uint64_t id = ofi_get64(m + 8);
  struct ofi_src *s = src_get(o, id);
  if (s == NULL) {
    OFI_LOG(o, 0, "out of memory: a frame is lost");
    post_rxbuf(r, b);
    return;
  }
  if (m[2] == OFI_HELLO || !s->authed) {
    /* Only the HELLO with our key, first, opens the door. */
    int hello = m[2] == OFI_HELLO && seq == 0 && hello_shape(m, len);
    int ok = hello && !s->authed && !s->banned &&
             nxu_key_equal(m + OFI_HDR_SIZE, o->core->key, NX_KEY_SIZE);
    if (hello && !ok && !s->authed && !s->banned)
      refuse(r, m, len);
    post_rxbuf(r, b);
    if (ok) {
      s->authed = 1;
      arrived(o, s, seq, NULL);
    } else if (!s->banned) {
      s->banned = 1;
      o->core->bad_peer(OFI_NAME,
                        m[2] == OFI_HELLO && seq == 0
                            ? "a sender presented the wrong key"
                            : "a sender did not present the key first");
    }
    return;
  }
  if (!seq_ok(s, seq)) {
    o->core->bad_peer(OFI_NAME, "a message out of sequence");
    post_rxbuf(r, b);
    return;
  }
  const uint8_t *hdr = m + OFI_HDR_SIZE;
  nx_frame_t *f = NULL;
  /* An RTS with the payload's lead after its fragment size (receive
   * placement): the lead goes into the frame, and the fragments, the
   * tail, to where the receiving program says (frame_place). */
  size_t lead = m[2] == OFI_RTS ? nx_frame_lead(hdr) : 0;
  int with_lead = lead != 0 && len == OFI_RTS_SIZE + lead &&
                  lead < nx_frame_payload_len(hdr);
  int rc = with_lead ? o->core->frame_alloc_lead(hdr, &f)
                     : o->core->frame_alloc(hdr, &f);
  if (rc == 0 && with_lead)
    rc = nx_frame_place_lead(o->core, f, m + OFI_RTS_SIZE);
  if (rc < 0) {
    /* NX_EPROTO is counted by the core already. */
    if (rc != NX_EPROTO)
      OFI_LOG(o, 0, "no memory for a frame of %llu bytes: dropped",
              (unsigned long long)nx_frame_payload_len(hdr));
    f = NULL;
  }
  if (m[2] == OFI_EAGER) {
    size_t plen = len - OFI_PRE_SIZE;
    if (f != NULL && f->iov[1].iov_len != plen) {
      o->core->frame_free(f);
      f = NULL;
      o->core->bad_peer(OFI_NAME, "a frame shorter or longer than its header");
    }
    if (f != NULL && plen > 0)
      memcpy(f->iov[1].iov_base, m + OFI_PRE_SIZE, plen);
    post_rxbuf(r, b);
    arrived(o, s, seq, f);
    return;
  }
  /* RTS: the payload comes in fragments of `frag` bytes. */
  uint64_t total = nx_frame_payload_len(hdr) - (with_lead ? lead : 0);
  uint64_t frag =
      len == OFI_RTS_SIZE || with_lead ? ofi_get64(m + OFI_PRE_SIZE) : 0;
  uint64_t nparts = frag > 0 && total > 0 ? (total - 1) / frag + 1 : 0;
  post_rxbuf(r, b);
  if (frag < 4096 || frag > OFI_FRAG_CAP || nparts > OFI_FRAGS_MAX ||
      (f != NULL && f->iov[1].iov_len != total)) {
    o->core->bad_peer(OFI_NAME, "a malformed announcement of a large frame");
    if (f != NULL)
      o->core->frame_free(f);
    arrived(o, s, seq, NULL); /* its fragments, if any, are never matched */
    return;
  }
  struct ofi_rx *rx =
      calloc(1, sizeof(*rx) + (size_t)nparts * sizeof(struct ofi_ctx));
  if (rx == NULL) {
    OFI_LOG(o, 0, "out of memory: a large frame is lost");
    if (f != NULL)
      o->core->frame_free(f);
    arrived(o, s, seq, NULL);
    return;
  }
  rx->src = s;
  rx->rail = r;
  rx->seq = seq;
  rx->frame = f; /* NULL: the fragments are received and discarded */
  rx->id = id;
  rx->total = (size_t)total;
  rx->frag = (size_t)frag;
  rx->nparts = (unsigned)nparts;
  if (pend(s, rx) < 0) {
    o->core->bad_peer(OFI_NAME, "a message sent twice");
    if (f != NULL)
      o->core->frame_free(f);
    free(rx);
    return; /* its fragments are never matched */
  }
  post_frags(r, rx);
  rx_settle(o, rx); /* an empty payload, or posting failed */
}

/* Completions. */

static void handle(struct ofi_rail *r, void *context, size_t len, int err) {
  struct ofi *o = r->o;
  struct ofi_ctx *c = context;
  if (c == NULL)
    return; /* an operation we asked no completion of */
  switch (c->kind) {
  case CTX_RXBUF: {
    struct ofi_rxbuf *b = c->obj;
    if (err == 0) {
      on_message(r, b, len);
      return;
    }
    if (err == FI_ECANCELED)
      return; /* the endpoint is closing */
    if (err == FI_ETRUNC)
      o->core->bad_peer(OFI_NAME, "a message larger than the receive buffers");
    else
      OFI_LOG(o, 1, "%s: a receive failed: %s", r->prov, fi_strerror(err));
    post_rxbuf(r, b);
    return;
  }
  case CTX_TX: o->send_completed(o, c, err); return;
  case CTX_INJECT:
    if (err != 0 && err != FI_ECANCELED)
      o->peer_kill(o, c->obj, fi_strerror(err));
    return;
  case CTX_RXFRAG: frag_done(o, c->obj, err); return;
  default: return;
  }
}

int ofi_rail_poll(struct ofi_rail *r) {
  struct ofi *o = r->o;
  struct fi_cq_msg_entry ce[OFI_CQ_BATCH];
  int total = 0;
  for (int round = 0; round < 8 && o->budget > 0; round++) {
    struct fi_cq_err_entry err;
    int have_err = 0;
    ofi_rail_lock(r);
    ssize_t n = fi_cq_read(r->cq, ce, OFI_CQ_BATCH);
    if (n == -FI_EAVAIL) {
      memset(&err, 0, sizeof(err));
      have_err = fi_cq_readerr(r->cq, &err, 0) == 1;
    }
    ofi_rail_unlock(r);
    if (have_err) {
      handle(r, err.op_context, err.len, err.err != 0 ? err.err : FI_EOTHER);
      total++;
      continue;
    }
    if (n <= 0) {
      if (n < 0 && n != -FI_EAGAIN && n != -FI_EAVAIL)
        OFI_LOG(o, 1, "%s: fi_cq_read: %s", r->prov, fi_strerror((int)-n));
      break;
    }
    for (ssize_t i = 0; i < n; i++)
      handle(r, ce[i].op_context, ce[i].len, 0);
    total += (int)n;
    if (n < OFI_CQ_BATCH)
      break;
  }
  o->events += total;
  return total;
}

void ofi_rail_retry(struct ofi_rail *r) {
  struct ofi_rxbuf *b = r->repost;
  r->repost = NULL;
  while (b != NULL) {
    struct ofi_rxbuf *next = b->next;
    post_rxbuf(r, b);
    b = next;
  }
  struct ofi_rx *rx = r->unposted;
  r->unposted = NULL;
  while (rx != NULL) {
    struct ofi_rx *next = rx->unposted_next;
    post_frags(r, rx);
    rx_settle(r->o, rx); /* posting the rest failed */
    rx = next;
  }
}
