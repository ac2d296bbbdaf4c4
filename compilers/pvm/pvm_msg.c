/* PVM messages as RSRs: each send is one RSR to the destination task's
 * "nxpvm.msg" handler, which queues the decoded message; receives match
 * the queue by sender and tag (-1: any) in arrival order, so the order
 * between two tasks is the order of their RSRs. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pvm_internal.h"

/* Queues a received message and wakes the receivers. Called with nxpvm.m
 * held or not (it takes the mutex only when free): see the callers. */
static void enqueue_locked(struct pvmbuf *b) {
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
  int rc = nxpvmi_rsr_msg(tid, hint, &o);
  if (rc == 1) {
    /* Not known here yet, or ended: the general path (it may ask the
     * root) and its errors. */
    rc = nxpvmi_resolve(tid, &gp);
    if (rc < 0)
      return rc;
    rc = nxpvmi_rsr(tid, &gp, H_MSG, hint, &o);
  }
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

/* psend and precv use a buffer of their own and leave the active ones as
 * they were. */
int pvm_psend(int tid, int msgtag, void *buf, int len, int datatype) {
  if (len < 0 || (buf == NULL && len > 0) || nxpvmi_type_size(datatype) == 0)
    return nxpvmi_err("pvm_psend", PvmBadParam);
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

int pvm_precv(int tid, int msgtag, void *buf, int len, int datatype, int *rtid,
              int *rtag, int *rlen) {
  int size = nxpvmi_type_size(datatype);
  if (len < 0 || (buf == NULL && len > 0) || size == 0)
    return nxpvmi_err("pvm_precv", PvmBadParam);
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
