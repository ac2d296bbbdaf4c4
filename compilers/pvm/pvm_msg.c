/* PVM messages as RSRs: each send is one RSR to the destination task's
 * "nxpvm.msg" handler, which queues the decoded message; receives match
 * the queue by sender and tag (-1: any) in arrival order, so the order
 * between two tasks is the order of their RSRs. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

/* ---- Receive placement ----
 *
 * pvm_psend of an array of NX_PLACE_MIN bytes or more to another task
 * sends a direct message (pvm_buf.c): the array is the RSR's last value,
 * put by reference, so nexus marks it for placement. A pvm_precv waiting
 * for a message from one task (not -1), with no matching message queued,
 * no message handler (pvm_addmhf) and no matcher (pvm_recvf) set, posts
 * its buffer here. When a direct message's leading values arrive, nexus
 * asks nxpvmi_place (the callback of "nxpvm.msg"), which claims the posted
 * receive when the message is the one pvm_recv would take next: from that
 * task, tag and context matching, of the receive's element kind, not
 * longer than its buffer, no matching message queued since it was posted
 * (enqueue_locked marks that), and every message that task sent this one
 * before it already handled here (its `seq`, the sender's count, equals
 * the count of its messages handled here, which on_msg reports). Messages
 * between two tasks keep their order (NX_RSR_ORDERED), but the callback
 * may run before the handlers of messages that arrived before it: the
 * counts say whether any is still in flight, and then it declines.
 *
 * The values land in the receive's buffer; on_msg reads them there (no
 * copy; the byte order converted in place) and tells the receive, which
 * returns. If the frame is lost instead (its sender died midway), nexus
 * reports NX_EPEERDEAD for "nxpvm.msg" in this task's context, and the
 * receive fails as one from a dead task does: PvmSysErr. The receive never
 * returns while its claim is outstanding.
 *
 * The state is guarded by place_m, a plain pthread mutex (the callback may
 * run inside a module's receive path), which no thread holds while it
 * calls into nexus or takes another lock; nxpvm.m may be held while it is
 * taken. `armed` (under nxpvm.m) says a receive is posted, for the hot
 * paths that look. */
enum { P_NONE, P_POSTED, P_CLAIMED, P_DONE, P_LOST };

static pthread_mutex_t place_m = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int state;
  int tid, tag, ctx, kind;
  void *buf;
  size_t cap;    /* bytes at buf */
  uint32_t seen; /* messages of tid's handled here */
  int queued;    /* a matching message was queued: pvm_recv takes it */
  int rtag;      /* P_DONE: the message's tag and length */
  size_t rbytes;
} posted;
static int armed;

static int posted_matches(const struct pvmbuf *b) {
  return b->src == posted.tid && (posted.tag == -1 || b->tag == posted.tag) &&
         b->ctx == posted.ctx;
}

/* nexus's placement callback for "nxpvm.msg" (above). Reads the lead: the
 * header, if any, must be the plain one (a first message's carries a gp,
 * not read here); then the direct message's values before its array. */
int nxpvmi_place(nx_context_t *ctx, void *addr, nx_buffer_t *lead,
                 size_t tail_bytes, nx_place_t *where) {
  (void)ctx;
  (void)addr;
  uint16_t form;
  uint32_t h, seq;
  int32_t tag, mctx;
  uint8_t kind;
  uint64_t count;
  int r = nx_get_uint16(lead, &form);
  if (r == NX_ETYPE && nx_get_uint32(lead, &h) == 0 && h == 0)
    r = nx_get_uint16(lead, &form);
  if (r < 0 || form != NXPVM_DIRECT || nx_get_uint32(lead, &seq) < 0 ||
      nx_get_int32(lead, &tag) < 0 || nx_get_int32(lead, &mctx) < 0 ||
      nx_get_uint8(lead, &kind) < 0 || nx_get_uint64(lead, &count) < 0)
    return 0;
  int tid = nxpvmi_tid_of_context(nx_buffer_source(lead));
  int rc = 0;
  pthread_mutex_lock(&place_m);
  if (posted.state == P_POSTED && !posted.queued && tid == posted.tid &&
      seq == posted.seen && (posted.tag == -1 || tag == posted.tag) &&
      mctx == posted.ctx && kind == posted.kind && tail_bytes <= posted.cap &&
      count * nxpvmi_kind_size(kind) == tail_bytes) {
    posted.state = P_CLAIMED;
    where->addr = posted.buf;
    where->len = posted.cap;
    rc = 1;
  }
  pthread_mutex_unlock(&place_m);
  return rc;
}

/* on_msg: where the claimed receive's values are (called for a placed
 * message, so one is claimed). */
void *nxpvmi_place_target(void) {
  pthread_mutex_lock(&place_m);
  void *at = posted.state == P_CLAIMED ? posted.buf : NULL;
  pthread_mutex_unlock(&place_m);
  return at;
}

/* on_msg, with nxpvm.m held: `tid`'s messages handled here are now
 * `msgs_in`. */
void nxpvmi_place_arrived(int tid, uint32_t msgs_in) {
  if (!armed)
    return;
  pthread_mutex_lock(&place_m);
  if (posted.tid == tid)
    posted.seen = msgs_in;
  pthread_mutex_unlock(&place_m);
}

/* on_msg, with nxpvm.m held: the placed message's handler ran (`ok` 0: it
 * was malformed, or the task is closing). */
void nxpvmi_place_done(int ok, int tag, size_t bytes) {
  pthread_mutex_lock(&place_m);
  if (posted.state == P_CLAIMED) {
    posted.state = ok ? P_DONE : P_LOST;
    posted.rtag = tag;
    posted.rbytes = bytes;
  }
  pthread_mutex_unlock(&place_m);
  nx_cond_broadcast(&nxpvm.c);
}

/* The error callback, with nxpvm.m held: the placed message was lost. */
void nxpvmi_place_lost(void) {
  pthread_mutex_lock(&place_m);
  if (posted.state == P_CLAIMED)
    posted.state = P_LOST;
  pthread_mutex_unlock(&place_m);
  nx_cond_broadcast(&nxpvm.c);
}

/* Queues a received message and wakes the receivers. Called with nxpvm.m
 * held or not (it takes the mutex only when free): see the callers. */
static void enqueue_locked(struct pvmbuf *b) {
  if (armed && b->src == posted.tid) {
    pthread_mutex_lock(&place_m);
    if (posted_matches(b))
      posted.queued = 1;
    pthread_mutex_unlock(&place_m);
  }
  b->queued = 1;
  b->next = NULL;
  b->dst = nxpvm.mytid;
  /* pvm_getfds's descriptor is readable while the queue holds a message. */
  if (nxpvm.has_fds && nxpvm.qhead == NULL) {
    char one = 1;
    if (write(nxpvm.fds[1], &one, 1) < 0 && errno != EAGAIN)
      nxpvm.has_fds = 0;
  }
  if (nxpvm.qtail != NULL)
    nxpvm.qtail->next = b;
  else
    nxpvm.qhead = b;
  nxpvm.qtail = b;
  nx_cond_broadcast(&nxpvm.c);
}

/* With nxpvm.m held. */
void nxpvmi_deliver(struct pvmbuf *b) { enqueue_locked(b); }

/* Starts a message's RSR to `tid` (`*gp` to release after the send): the
 * fast path, else the general one (it may ask the root) and its errors.
 * `*seq` (may be NULL): the count of messages sent to `tid` before. */
static int msg_rsr(int tid, size_t hint, nx_buffer_t **o, nx_gp_t *gp,
                   uint32_t *seq) {
  uint32_t n;
  int rc = nxpvmi_rsr_msg(tid, hint, o, &n);
  if (rc == 1) {
    /* Not known here yet, or ended. */
    rc = nxpvmi_resolve(tid, gp);
    if (rc < 0)
      return rc;
    rc = nxpvmi_rsr(tid, gp, H_MSG, hint, o);
    if (rc == 0)
      n = nxpvmi_msg_seq(tid);
  }
  if (rc == 0 && seq != NULL)
    *seq = n;
  return rc;
}

/* Sends buffer `b` to `tid` as coming from `src`. A message to this task
 * itself is queued here at once (in order with every other delivery). */
int nxpvmi_send_as(int src, int tid, int tag, const struct pvmbuf *b) {
  if (tid == nxpvm.mytid) {
    struct pvmbuf *c = nxpvmi_buf_clone(b);
    if (c == NULL)
      return PvmNoMem;
    c->src = src;
    c->tag = tag;
    nx_mutex_lock(&nxpvm.m);
    enqueue_locked(c);
    nx_mutex_unlock(&nxpvm.m);
    return PvmOk;
  }
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *o;
  size_t hint = b->bytes + 6 * (size_t)b->nseg + 32;
  int rc = msg_rsr(tid, hint, &o, &gp, NULL);
  if (rc == 0) {
    int r = nxpvmi_encode_msg(o, b, src, tag);
    if (r < 0) {
      nx_buffer_release(o);
    } else {
      r = nxpvmi_send(o);
    }
    rc = r == 0 ? PvmOk : nxpvmi_nx_to_pvm(r);
  }
  nx_gp_release(&gp);
  return rc;
}

int nxpvmi_send_buf(int tid, int tag, struct pvmbuf *b) {
  return nxpvmi_send_as(nxpvm.mytid, tid, tag, b);
}

int pvm_send(int tid, int msgtag) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_send", PvmSysErr);
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.sbuf);
  if (b == NULL)
    return nxpvmi_err("pvm_send", PvmNoBuf);
  if (tid <= 0 || msgtag < 0)
    return nxpvmi_err("pvm_send", PvmBadParam);
  b->ctx = nxpvm.ctx; /* a message travels in the sender's context */
  int rc = nxpvmi_send_buf(tid, msgtag, b);
  /* As PVM's pvmd, which drops a message to a task that does not exist:
   * no error (pvm_notify tells of an exit). */
  if (rc == PvmNoTask)
    return PvmOk;
  return rc < 0 ? nxpvmi_err("pvm_send", rc) : PvmOk;
}

int pvm_mcast(int *tids, int ntask, int msgtag) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_mcast", PvmSysErr);
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.sbuf);
  if (b == NULL)
    return nxpvmi_err("pvm_mcast", PvmNoBuf);
  if (ntask < 0 || msgtag < 0 || (ntask > 0 && tids == NULL))
    return nxpvmi_err("pvm_mcast", PvmBadParam);
  b->ctx = nxpvm.ctx;
  int rc = PvmOk;
  for (int i = 0; i < ntask; i++) {
    int r = nxpvmi_send_buf(tids[i], msgtag, b);
    if (r < 0 && r != PvmNoTask && rc == PvmOk) /* no task: as pvm_send */
      rc = r;
  }
  return rc < 0 ? nxpvmi_err("pvm_mcast", rc) : PvmOk;
}

/* PVM's matcher: source and tag (-1: any), in the receiver's context. */
static int matches(const struct pvmbuf *b, int tid, int tag) {
  return (tid == -1 || b->src == tid) && (tag == -1 || b->tag == tag) &&
         b->ctx == nxpvm.ctx;
}

/* Takes `b` out of the receive queue. Called with nxpvm.m held. */
static void unqueue(struct pvmbuf *b) {
  struct pvmbuf *prev = NULL;
  for (struct pvmbuf *q = nxpvm.qhead; q != NULL; prev = q, q = q->next) {
    if (q != b)
      continue;
    if (prev != NULL)
      prev->next = b->next;
    else
      nxpvm.qhead = b->next;
    if (nxpvm.qtail == b)
      nxpvm.qtail = prev;
    break;
  }
  b->queued = 0;
  b->next = NULL;
  if (nxpvm.has_fds && nxpvm.qhead == NULL) {
    char drain[64];
    while (read(nxpvm.fds[0], drain, sizeof(drain)) > 0)
      ;
  }
}

static int mhf_matches(const struct mhf *h, const struct pvmbuf *b) {
  return (h->src == -1 || h->src == b->src) &&
         (h->tag == -1 || h->tag == b->tag) &&
         (h->ctx == -1 || h->ctx == b->ctx);
}

/* Runs the message handlers (pvm_addmhf) on every queued message one
 * matches, as libpvm does when it takes messages in: the message becomes
 * the receive buffer while its handler runs, the active buffers are put
 * back after, and the message is freed unless the handler freed it. Not
 * from inside a handler. */
static void run_handlers(void) {
  if (nxpvm.in_mhf || nxpvm.nmhfs == 0)
    return;
  for (;;) {
    nx_mutex_lock(&nxpvm.m);
    struct pvmbuf *got = NULL;
    int (*fn)(int) = NULL;
    for (struct pvmbuf *b = nxpvm.qhead; b != NULL && got == NULL; b = b->next)
      for (int i = 0; i < nxpvm.nmhfs; i++)
        if (mhf_matches(&nxpvm.mhfs[i], b)) {
          got = b;
          fn = nxpvm.mhfs[i].fn;
          break;
        }
    if (got != NULL)
      unqueue(got);
    nx_mutex_unlock(&nxpvm.m);
    if (got == NULL)
      return;
    int id = got->id > 0 ? got->id : nxpvmi_buf_register(got);
    if (id < 0) {
      nxpvmi_buf_free(got);
      continue;
    }
    int sbuf = nxpvm.sbuf, rbuf = nxpvm.rbuf;
    nxpvm.rbuf = id;
    nxpvm.in_mhf = 1;
    fn(id);
    nxpvm.in_mhf = 0;
    if (nxpvmi_buf_get(id) == got)
      pvm_freebuf(id);
    nxpvm.sbuf = nxpvmi_buf_get(sbuf) != NULL ? sbuf : 0;
    nxpvm.rbuf = nxpvmi_buf_get(rbuf) != NULL ? rbuf : 0;
  }
}

/* With a matcher set by pvm_recvf: asks it about each queued message in
 * order (outside the lock: it may call PVM), and picks the first it
 * answers 1, else the highest it ranks above 1. Returns the message (still
 * queued), NULL, or sets *err for a negative answer. */
static struct pvmbuf *user_match(int tid, int tag, int *err) {
  nx_mutex_lock(&nxpvm.m);
  int n = 0;
  for (struct pvmbuf *b = nxpvm.qhead; b != NULL; b = b->next)
    n++;
  struct pvmbuf **v = malloc((size_t)n * sizeof(*v) + 1);
  n = 0;
  for (struct pvmbuf *b = nxpvm.qhead; v != NULL && b != NULL; b = b->next)
    v[n++] = b;
  nx_mutex_unlock(&nxpvm.m);
  if (v == NULL) {
    *err = PvmNoMem;
    return NULL;
  }
  /* Only this thread takes messages out of the queue: these stay. */
  struct pvmbuf *best = NULL;
  int best_rank = 1;
  for (int i = 0; i < n; i++) {
    if (v[i]->id == 0 && nxpvmi_buf_register(v[i]) < 0)
      continue;
    int r = nxpvm.recvf(v[i]->id, tid, tag);
    if (r < 0) {
      *err = r;
      best = NULL;
      break;
    }
    if (r == 1) {
      best = v[i];
      break;
    }
    if (r > best_rank) {
      best = v[i];
      best_rank = r;
    }
  }
  free(v);
  return best;
}

/* The receive every variant shares. `wait`: 0 returns at once, 1 waits
 * until `deadline` (NULL: forever). `take`: 0 only probes. Returns the
 * buffer id, 0 when nothing matched in time, or an error. */
static int receive(const char *fn, int tid, int tag, int wait,
                   const struct timespec *deadline, int take) {
  if (!nxpvmi_started())
    return nxpvmi_err(fn, PvmSysErr);
  if (tid == 0 || tid < -1 || tag < -1)
    return nxpvmi_err(fn, PvmBadParam);
  struct pvmbuf *got = NULL;
  int rc = 0;
  /* The sender is looked up only when a task has died since the last look
   * (nxpvm.deaths counts mark_dead's, the only way a task becomes dead;
   * read under the lock): not at all while no task has died. */
  unsigned deaths = 0;
  int polled = 0; /* a receive that does not wait polls once */
  for (;;) {
    run_handlers();
    if (nxpvm.recvf != NULL) {
      got = user_match(tid, tag, &rc);
      if (rc < 0)
        return nxpvmi_err(fn, rc);
    }
    nx_mutex_lock(&nxpvm.m);
    /* Woken, look again without letting go of the lock, unless message
     * handlers or a matcher must run first (outside it). */
    int again;
    do {
      again = 0;
      if (nxpvm.ngone > 0) {
        /* Children ended: tell the root (see pvm_task.c's on_error). */
        nx_mutex_unlock(&nxpvm.m);
        nxpvmi_flush_gone();
        nx_mutex_lock(&nxpvm.m);
      }
      for (struct pvmbuf *b = nxpvm.qhead; nxpvm.recvf == NULL && b != NULL;
           b = b->next)
        if (matches(b, tid, tag)) {
          got = b;
          break;
        }
      if (got != NULL && take)
        unqueue(got);
      if (got != NULL)
        goto out;
      if (!wait) {
        /* Nothing yet: drive the network once and look again, so that a
         * program polling with pvm_nrecv or pvm_probe finds a message
         * as soon as it is there, not when this process's progress
         * thread next gets the CPU from the poller (milliseconds, with
         * as many busy processes as cores). */
        if (polled)
          goto out;
        polled = 1;
        nx_mutex_unlock(&nxpvm.m);
        nx_poll();
        nx_mutex_lock(&nxpvm.m);
        again = nxpvm.recvf == NULL && (nxpvm.in_mhf || nxpvm.nmhfs == 0);
        continue;
      }
      /* A receive from one task that has ended fails instead of waiting
       * for ever (its earlier messages were matched above). */
      if (tid != -1 && deaths != nxpvm.deaths) {
        deaths = nxpvm.deaths;
        struct peer *p = nxpvmi_peer(tid, 0);
        if (p != NULL && p->dead) {
          rc = PvmSysErr;
          goto out;
        }
      }
      if (nxpvmi_wait(deadline) == NX_ETIMEDOUT && deadline != NULL) {
        /* One last look, then report the timeout as PVM does: 0. */
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if (now.tv_sec > deadline->tv_sec || (now.tv_sec == deadline->tv_sec &&
                                              now.tv_nsec >= deadline->tv_nsec))
          wait = 0;
      }
      again = nxpvm.recvf == NULL && (nxpvm.in_mhf || nxpvm.nmhfs == 0);
    } while (again);
    nx_mutex_unlock(&nxpvm.m);
  }
out:
  nx_mutex_unlock(&nxpvm.m);
  if (rc < 0)
    return nxpvmi_err(fn, rc);
  if (got == NULL)
    return 0;
  if (got->id == 0 && (rc = nxpvmi_buf_register(got)) < 0) {
    nxpvmi_buf_free(got);
    return nxpvmi_err(fn, rc);
  }
  if (!take)
    return got->id;
  /* The new message replaces (and frees) the active receive buffer. */
  int old = nxpvm.rbuf;
  nxpvm.rbuf = got->id;
  if (old > 0 && old != got->id)
    pvm_freebuf(old);
  got->rseg = 0;
  got->relem = 0;
  return got->id;
}

int pvm_recv(int tid, int msgtag) {
  return receive("pvm_recv", tid, msgtag, 1, NULL, 1);
}

int pvm_nrecv(int tid, int msgtag) {
  return receive("pvm_nrecv", tid, msgtag, 0, NULL, 1);
}

int pvm_probe(int tid, int msgtag) {
  return receive("pvm_probe", tid, msgtag, 0, NULL, 0);
}

int pvm_trecv(int tid, int msgtag, struct timeval *tmout) {
  if (tmout == NULL)
    return receive("pvm_trecv", tid, msgtag, 1, NULL, 1);
  if (tmout->tv_sec < 0 || tmout->tv_usec < 0)
    return nxpvmi_err("pvm_trecv", PvmBadParam);
  struct timespec d;
  clock_gettime(CLOCK_REALTIME, &d);
  d.tv_sec += tmout->tv_sec + tmout->tv_usec / 1000000;
  d.tv_nsec += (tmout->tv_usec % 1000000) * 1000;
  if (d.tv_nsec >= 1000000000) {
    d.tv_sec++;
    d.tv_nsec -= 1000000000;
  }
  return receive("pvm_trecv", tid, msgtag, 1, &d, 1);
}

/* A direct message's array, until nexus no longer reads it. */
struct ref_wait {
  nx_mutex_t m;
  nx_cond_t c;
  int done;
};

static void ref_released(void *arg, const void *v, int status) {
  struct ref_wait *w = arg;
  (void)v;
  (void)status; /* a failed RSR is reported as for any RSR */
  nx_mutex_lock(&w->m);
  w->done = 1;
  nx_cond_signal(&w->c);
  nx_mutex_unlock(&w->m);
}

/* pvm_psend's direct message (see "Receive placement" above): `count`
 * elements of `kind` at `p`, put by reference; returns once nexus no
 * longer reads them, as PVM's psend returns with the buffer free to
 * change. */
static int psend_direct(int tid, int tag, int kind, const void *p,
                        size_t count) {
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *o;
  uint32_t seq = 0;
  int rc = msg_rsr(tid, 64, &o, &gp, &seq);
  if (rc < 0)
    return rc;
  struct ref_wait w;
  nx_mutex_init(&w.m);
  nx_cond_init(&w.c);
  w.done = 0;
  int r = nxpvmi_encode_direct(o, seq, tag, nxpvm.ctx, kind, p, count,
                               ref_released, &w);
  if (r < 0) {
    nx_buffer_release(o); /* calls ref_released if the array was put */
    w.done = 1;
  } else {
    r = nxpvmi_send(o);
  }
  nx_mutex_lock(&w.m);
  while (!w.done)
    nx_cond_wait(&w.c, &w.m);
  nx_mutex_unlock(&w.m);
  nx_cond_destroy(&w.c);
  nx_mutex_destroy(&w.m);
  nx_gp_release(&gp);
  return r == 0 ? PvmOk : nxpvmi_nx_to_pvm(r);
}

/* psend and precv use a buffer of their own and leave the active ones as
 * they were; an array of NX_PLACE_MIN bytes or more to another task goes
 * as a direct message. */
int pvm_psend(int tid, int msgtag, void *buf, int len, int datatype) {
  if (len < 0 || (buf == NULL && len > 0) || nxpvmi_type_size(datatype) == 0)
    return nxpvmi_err("pvm_psend", PvmBadParam);
  size_t bytes = (size_t)len * (size_t)nxpvmi_type_size(datatype);
  if (bytes >= NX_PLACE_MIN && tid > 0 && msgtag >= 0 && nxpvmi_started() &&
      tid != nxpvm.mytid) {
    int kind = nxpvmi_kind_of_type(datatype);
    size_t ks = (size_t)nxpvmi_type_size(datatype) /
                (datatype == PVM_CPLX || datatype == PVM_DCPLX ? 2 : 1);
    int rc = psend_direct(tid, msgtag, kind, buf, bytes / ks);
    if (rc == PvmNoTask) /* as pvm_send */
      return PvmOk;
    return rc < 0 ? nxpvmi_err("pvm_psend", rc) : PvmOk;
  }
  int id = pvm_mkbuf(PvmDataDefault);
  if (id < 0)
    return id;
  int old = pvm_setsbuf(id);
  int rc = nxpvmi_pack_type(datatype, buf, len);
  if (rc == 0)
    rc = pvm_send(tid, msgtag);
  pvm_setsbuf(old);
  pvm_freebuf(id);
  return rc < 0 ? nxpvmi_err("pvm_psend", rc) : PvmOk;
}

/* pvm_precv's placed receive (see "Receive placement" above): 1 when a
 * message was placed into `buf` (its tag and length in *rtag, *rbytes), 0
 * when pvm_recv must take the message (one that matches is queued, the
 * task died, or the receive cannot be posted), PvmSysErr when the placed
 * message was lost. */
static int precv_placed(int tid, int tag, int kind, void *buf, size_t cap,
                        int *rtag, size_t *rbytes) {
  if (tid <= 0 || tag < -1 || cap < NX_PLACE_MIN || nxpvm.recvf != NULL ||
      !nxpvmi_started())
    return 0;
  nx_mutex_lock(&nxpvm.m);
  int rc = 0;
  for (struct pvmbuf *b = nxpvm.qhead; b != NULL; b = b->next)
    if (matches(b, tid, tag))
      goto out;
  struct peer *p = nxpvmi_peer(tid, 0);
  if (nxpvm.nmhfs > 0 || armed || (p != NULL && p->dead))
    goto out;
  pthread_mutex_lock(&place_m);
  posted.state = P_POSTED;
  posted.tid = tid;
  posted.tag = tag;
  posted.ctx = nxpvm.ctx;
  posted.kind = kind;
  posted.buf = buf;
  posted.cap = cap;
  posted.seen = p != NULL ? p->msgs_in : 0;
  posted.queued = 0;
  pthread_mutex_unlock(&place_m);
  armed = 1;
  unsigned deaths = nxpvm.deaths;
  for (;;) {
    if (nxpvm.ngone > 0) {
      /* Children ended: tell the root, as receive() does. */
      nx_mutex_unlock(&nxpvm.m);
      nxpvmi_flush_gone();
      nx_mutex_lock(&nxpvm.m);
    }
    int dead = 0;
    if (deaths != nxpvm.deaths) {
      deaths = nxpvm.deaths;
      p = nxpvmi_peer(tid, 0);
      dead = p != NULL && p->dead;
    }
    pthread_mutex_lock(&place_m);
    int st = posted.state;
    /* Resolved, or never claimed and now never to be: let go. */
    int end = st == P_DONE || st == P_LOST ||
              (st == P_POSTED && (posted.queued || dead));
    if (st == P_DONE) {
      *rtag = posted.rtag;
      *rbytes = posted.rbytes;
    }
    if (end) {
      posted.state = P_NONE;
      rc = st == P_DONE ? 1 : st == P_LOST ? PvmSysErr : 0;
    }
    pthread_mutex_unlock(&place_m);
    if (end)
      break;
    nxpvmi_wait(NULL);
  }
  armed = 0;
out:
  nx_mutex_unlock(&nxpvm.m);
  return rc;
}

int pvm_precv(int tid, int msgtag, void *buf, int len, int datatype, int *rtid,
              int *rtag, int *rlen) {
  int size = nxpvmi_type_size(datatype);
  if (len < 0 || (buf == NULL && len > 0) || size == 0)
    return nxpvmi_err("pvm_precv", PvmBadParam);
  int ptag;
  size_t pbytes;
  int placed = precv_placed(tid, msgtag, nxpvmi_kind_of_type(datatype), buf,
                            (size_t)len * (size_t)size, &ptag, &pbytes);
  if (placed < 0)
    return nxpvmi_err("pvm_precv", placed);
  if (placed) {
    if (rtid != NULL)
      *rtid = tid;
    if (rtag != NULL)
      *rtag = ptag;
    if (rlen != NULL)
      *rlen = (int)pbytes;
    return PvmOk;
  }
  int old = nxpvm.rbuf;
  nxpvm.rbuf = 0; /* keep the active buffer out of the receive's way */
  int id = pvm_recv(tid, msgtag);
  if (id <= 0) {
    nxpvm.rbuf = old;
    return id;
  }
  int bytes, tag, src;
  pvm_bufinfo(id, &bytes, &tag, &src);
  int items = bytes / size;
  int n = items < len ? items : len;
  int rc = nxpvmi_unpack_type(datatype, buf, n);
  pvm_freebuf(id);
  nxpvm.rbuf = old;
  if (rc < 0)
    return nxpvmi_err("pvm_precv", rc);
  if (rtid != NULL)
    *rtid = src;
  if (rtag != NULL)
    *rtag = tag;
  if (rlen != NULL)
    *rlen = bytes; /* PVM 3.4.6's "actual message length": bytes */
  return PvmOk;
}

int (*pvm_recvf(int (*match)(int bufid, int tid, int tag)))(int, int, int) {
  int (*old)(int, int, int) = nxpvm.recvf;
  nxpvm.recvf = match;
  return old;
}

/* Message handler ids are what libpvm gives, since programs print them
 * and pvmdisplaymhfinfo shows the tables: ids count from 0, a deleted id
 * goes on a free list that the next pvm_addmhf takes first (last freed,
 * first given again), and the handlers stay packed at the front of mhfs
 * (a deletion moves the last one into the gap). A handler that could
 * match a message another one matches is refused (PvmExists), so at most
 * one runs per message. */

static int mhf_overlaps(const struct mhf *h, int src, int tag, int ctx) {
  return (h->tag == -1 || h->tag == tag || tag == -1) &&
         (h->ctx == -1 || h->ctx == ctx || ctx == -1) &&
         (h->src == -1 || h->src == src || src == -1);
}

int pvm_addmhf(int src, int tag, int ctx, int (*func)(int bufid)) {
  if (func == NULL)
    return nxpvmi_err("pvm_addmhf", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_addmhf", PvmSysErr);
  nx_mutex_lock(&nxpvm.m);
  for (int i = 0; i < nxpvm.nmhfs; i++)
    if (mhf_overlaps(&nxpvm.mhfs[i], src, tag, ctx)) {
      nx_mutex_unlock(&nxpvm.m);
      return nxpvmi_err("pvm_addmhf", PvmExists);
    }
  int id = nxpvm.mhf_free - 1;
  if (id < 0) {
    /* No free id: a new one, and room for its handler. */
    int n = nxpvm.nmhf_ids + 1;
    struct mhf_id *ids = realloc(nxpvm.mhf_ids, (size_t)n * sizeof(*ids));
    if (ids != NULL)
      nxpvm.mhf_ids = ids;
    struct mhf *m = ids == NULL || n <= nxpvm.mhfcap
                        ? nxpvm.mhfs
                        : realloc(nxpvm.mhfs, (size_t)n * sizeof(*m));
    if (ids == NULL || m == NULL) {
      nx_mutex_unlock(&nxpvm.m);
      return nxpvmi_err("pvm_addmhf", PvmNoMem);
    }
    if (n > nxpvm.mhfcap) {
      nxpvm.mhfs = m;
      nxpvm.mhfcap = n;
    }
    id = nxpvm.nmhf_ids++;
  } else {
    nxpvm.mhf_free = nxpvm.mhf_ids[id].link + 1;
  }
  nxpvm.mhf_ids[id] = (struct mhf_id){.link = id, .at = nxpvm.nmhfs};
  nxpvm.mhfs[nxpvm.nmhfs++] = (struct mhf){id, src, tag, ctx, func};
  nx_mutex_unlock(&nxpvm.m);
  return id;
}

int pvm_delmhf(int mhid) {
  if (mhid < 0)
    return nxpvmi_err("pvm_delmhf", PvmBadParam);
  nx_mutex_lock(&nxpvm.m);
  if (mhid >= nxpvm.nmhf_ids) {
    nx_mutex_unlock(&nxpvm.m);
    return nxpvmi_err("(mhid >= ndhandles) pvm_delmhf", PvmNotFound);
  }
  int at = nxpvm.mhf_ids[mhid].at;
  if (at >= nxpvm.nmhfs) { /* free already */
    nx_mutex_unlock(&nxpvm.m);
    return nxpvmi_err("pvm_delmhf", PvmNotFound);
  }
  int last = --nxpvm.nmhfs;
  if (at != last) {
    nxpvm.mhfs[at] = nxpvm.mhfs[last];
    nxpvm.mhf_ids[nxpvm.mhfs[at].id].at = at;
    nxpvm.mhf_ids[mhid].at = last;
  }
  nxpvm.mhf_ids[mhid].link = nxpvm.mhf_free - 1;
  nxpvm.mhf_free = mhid + 1;
  nx_mutex_unlock(&nxpvm.m);
  return PvmOk;
}

/* libpvm's dump of its message handler tables, on stdout, which programs
 * call to show what they installed; the same lines from the same tables
 * (above). */
void pvmdisplaymhfinfo(char *who, char *msg, int tid) {
  int locked = nxpvmi_started(); /* else there are no handlers */
  if (locked)
    nx_mutex_lock(&nxpvm.m);
  printf("\n%s t%x: Display Message Handler Information: ", who, tid);
  printf("ndhandles = %d\tnhandles = %d\tfl_dhandles = %d", nxpvm.nmhf_ids,
         nxpvm.nmhfs, nxpvm.mhf_free - 1);
  printf("\npvmdisplaymhfinfo: free list.  head <-");
  for (int id = nxpvm.mhf_free - 1; id != -1; id = nxpvm.mhf_ids[id].link)
    printf(" %d", id);
  printf(" -< tail");
  printf("\n%s t%x: %s\n", who, tid, msg);
  for (int i = 0; i < nxpvm.nmhf_ids; i++) {
    const struct mhf *h = &nxpvm.mhfs[i];
    printf("%s t%x: dhandles[%2d].mhid = %2d  .handle = %2d     ", who, tid, i,
           nxpvm.mhf_ids[i].link, nxpvm.mhf_ids[i].at);
    printf("handles[%2d].mhid = %2d  .header.src = t%-8x  ", i, h->id,
           (unsigned)h->src);
    printf(".header.ctx = %8d  .header.tag= %8d\n", h->ctx, h->tag);
  }
  printf("\n\n");
  fflush(stdout);
  if (locked)
    nx_mutex_unlock(&nxpvm.m);
}

/* One descriptor, readable while a message waits in the receive queue (a
 * pipe this library keeps): what select() on PVM's socket gives. */
int pvm_getfds(int **fds) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_getfds", PvmSysErr);
  nx_mutex_lock(&nxpvm.m);
  if (!nxpvm.has_fds) {
    if (pipe(nxpvm.fds) < 0) {
      nx_mutex_unlock(&nxpvm.m);
      return nxpvmi_err("pvm_getfds", PvmSysErr);
    }
    fcntl(nxpvm.fds[0], F_SETFL, O_NONBLOCK);
    fcntl(nxpvm.fds[1], F_SETFL, O_NONBLOCK);
    fcntl(nxpvm.fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(nxpvm.fds[1], F_SETFD, FD_CLOEXEC);
    nxpvm.has_fds = 1;
    char one = 1;
    if (nxpvm.qhead != NULL) {
      ssize_t w = write(nxpvm.fds[1], &one, 1);
      (void)w; /* a new, empty pipe takes one byte */
    }
  }
  nx_mutex_unlock(&nxpvm.m);
  if (fds != NULL)
    *fds = &nxpvm.fds[0];
  return 1;
}

/* ---- message contexts ---- */

int pvm_getcontext(void) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_getcontext", PvmSysErr);
  return nxpvm.ctx;
}

int pvm_setcontext(int ctx) {
  if (ctx < 0)
    return nxpvmi_err("pvm_setcontext", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_setcontext", PvmSysErr);
  int old = nxpvm.ctx;
  nxpvm.ctx = ctx;
  return old;
}
