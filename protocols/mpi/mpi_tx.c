/* Sending frames in the mpi module: posting a frame's messages from any thread,
 * and completing them on the driver. */
#include <stdlib.h>
#include <string.h>

#include "mpi_tx.h"
#include "mpi_peer.h"

/* A frame the module accepted and has not finished with keeps, in
 * module_data[0], the stage it was copied into (or NULL), and in
 * module_data[1] the number of its requests still in flight, with
 * FRAME_FAILED set once one of them failed and FRAME_TYPED if it counts in
 * tx_typed. */
#define FRAME_FAILED ((uintptr_t)1 << 31)
#define FRAME_TYPED ((uintptr_t)1 << 30)
#define FRAME_COUNT (FRAME_TYPED - 1)

/* Small frames are copied, header and payload, into one message: the
 * core keeps the header apart from the payload, and one message costs
 * half of two. The copy goes into a per-thread stage; when MPI does not
 * finish with it at once (Open MPI usually does: small sends complete
 * inline), the frame takes the stage and the thread gets a new one. */
struct stage {
  size_t cap;
  _Alignas(16) uint8_t bytes[];
};

static pthread_once_t stage_once = PTHREAD_ONCE_INIT;
static pthread_key_t stage_key;

/* The key outlives every nx_init: the module is never unloaded, and each
 * thread's stage is freed when the thread ends. */
static void stage_key_create(void) { pthread_key_create(&stage_key, free); }

static struct stage *stage_get(size_t need) {
  struct stage *s = pthread_getspecific(stage_key);
  if (s != NULL && s->cap >= need)
    return s;
  free(s);
  size_t cap = need < MPIMOD_INLINE_DEFAULT + NX_FRAME_HDR_SIZE
                   ? MPIMOD_INLINE_DEFAULT + NX_FRAME_HDR_SIZE
                   : need;
  s = malloc(sizeof(*s) + cap);
  if (s != NULL)
    s->cap = cap;
  pthread_setspecific(stage_key, s);
  return s;
}

int mpimod_tx_init(struct mpimod *m) {
  pthread_once(&stage_once, stage_key_create);
  m->tx_cap = 0;
  return 0;
}

static size_t frame_payload(const nx_frame_t *f) {
  const struct iovec *v = nx_frame_iovs(f);
  size_t n = 0;
  for (int i = 1; i < f->iovcnt; i++)
    n += v[i].iov_len;
  return n;
}

/* Adds requests of a frame to the set the driver tests. tx_lock held. */
static int track_locked(struct mpimod *m, struct mpimod_peer *p, nx_frame_t *f,
                        const MPI_Request *reqs, int n) {
  if (m->tx_n + n > m->tx_cap) {
    int cap = m->tx_cap > 0 ? m->tx_cap : 64;
    while (cap < m->tx_n + n)
      cap *= 2;
    MPI_Request *req = realloc(m->tx_req, (size_t)cap * sizeof(*req));
    if (req == NULL)
      return NX_ENOMEM;
    m->tx_req = req;
    struct mpimod_tx *of = realloc(m->tx_of, (size_t)cap * sizeof(*of));
    if (of == NULL)
      return NX_ENOMEM;
    m->tx_of = of;
    m->tx_cap = cap;
  }
  for (int i = 0; i < n; i++) {
    m->tx_req[m->tx_n] = reqs[i];
    m->tx_of[m->tx_n].frame = f;
    m->tx_of[m->tx_n].peer = p;
    m->tx_n++;
  }
  atomic_store(&m->tx_count, m->tx_n);
  return 0;
}

/* Hands requests in flight to the driver. Out of memory for the request
 * set, the sender waits for them itself: rare, and better than losing
 * track of memory MPI still reads. Returns 1 if they completed here. */
static int track(struct mpimod *m, struct mpimod_peer *p, nx_frame_t *f,
                 MPI_Request *reqs, int n, int failed, int typed) {
  /* Counted before the driver can see it, so that it is uncounted once. */
  if (typed)
    atomic_fetch_add(&m->tx_typed, 1);
  f->module_data[1] = (void *)((uintptr_t)n | (failed ? FRAME_FAILED : 0) |
                               (typed ? FRAME_TYPED : 0));
  nxu_lock(&m->tx_lock);
  int r = track_locked(m, p, f, reqs, n);
  nxu_unlock(&m->tx_lock);
  if (r == 0)
    return 0;
  mpimod_lock(m);
  MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
  mpimod_unlock(m);
  if (typed)
    atomic_fetch_sub(&m->tx_typed, 1);
  return 1;
}

enum { POSTED = 0, DONE = 1 };

/* Posts a small frame as one FRAME message. Peer lock held. Returns DONE
 * (MPI finished with it), POSTED, or a negative code (nothing posted). */
static int post_inline(struct mpimod *m, struct mpimod_peer *p, nx_frame_t *f,
                       size_t plen, int *mpi_error) {
  size_t total = NX_FRAME_HDR_SIZE + plen;
  struct stage *s = stage_get(total);
  if (s == NULL)
    return NX_ENOMEM;
  /* The pieces of a frame put by reference are gathered here too: this
   * copy is made anyway. */
  const struct iovec *v = nx_frame_iovs(f);
  uint8_t *to = s->bytes;
  for (int i = 0; i < f->iovcnt; i++) {
    if (v[i].iov_len > 0)
      memcpy(to, v[i].iov_base, v[i].iov_len);
    to += v[i].iov_len;
  }
  MPI_Request req;
  int done = 0;
  mpimod_lock(m);
  int e = MPI_Isend(s->bytes, (int)total, MPI_BYTE, p->rank, MPIMOD_TAG_FRAME,
                    m->comm, &req);
  /* A failed test completes (and frees) the request: either way nothing
   * refers to the stage afterwards. */
  if (e == MPI_SUCCESS)
    e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  mpimod_unlock(m);
  if (e != MPI_SUCCESS) {
    *mpi_error = e;
    return NX_EPEERDEAD;
  }
  if (done)
    return DONE;
  pthread_setspecific(stage_key, NULL); /* the frame owns it now */
  f->module_data[0] = s;
  return track(m, p, f, &req, 1, 0, 0) ? DONE : POSTED;
}

/* A place in a frame's payload: piece `k` of its iovecs (1 and up), `in`
 * bytes into it. */
struct cursor {
  const struct iovec *v;
  int n; /* the frame's iovcnt */
  int k;
  size_t in;
};

/* Posts the next `len` payload bytes (len <= MPIMOD_CHUNK) as one BODY
 * message from where they are, and moves the cursor past them: straight
 * from a piece that holds them all, else through a datatype that lists
 * the pieces' parts (the receiver sees the same bytes either way). The
 * type can go at once: MPI keeps what a pending send needs. `big` held. */
static int post_chunk(struct mpimod *m, struct mpimod_peer *p, struct cursor *c,
                      size_t len, MPI_Request *req, int *typed) {
  while (c->k < c->n && c->in == c->v[c->k].iov_len) {
    c->k++; /* an empty piece, or the end of one */
    c->in = 0;
  }
  const uint8_t *at = (const uint8_t *)c->v[c->k].iov_base + c->in;
  if (c->v[c->k].iov_len - c->in >= len) {
    c->in += len;
    return MPI_Isend(at, (int)len, MPI_BYTE, p->rank, MPIMOD_TAG_BODY, m->comm,
                     req);
  }
  int lens[NX_FRAME_IOV_MAX];
  MPI_Aint where[NX_FRAME_IOV_MAX];
  int nparts = 0, e = MPI_SUCCESS;
  for (size_t left = len; left > 0 && e == MPI_SUCCESS;) {
    if (c->in == c->v[c->k].iov_len) {
      c->k++;
      c->in = 0;
      continue;
    }
    size_t take = c->v[c->k].iov_len - c->in;
    if (take > left)
      take = left;
    e = MPI_Get_address((const uint8_t *)c->v[c->k].iov_base + c->in,
                        &where[nparts]);
    lens[nparts++] = (int)take;
    c->in += take;
    left -= take;
  }
  MPI_Datatype type;
  if (e == MPI_SUCCESS)
    e = MPI_Type_create_hindexed(nparts, lens, where, MPI_BYTE, &type);
  if (e != MPI_SUCCESS)
    return e;
  e = MPI_Type_commit(&type);
  if (e == MPI_SUCCESS)
    e = MPI_Isend(MPI_BOTTOM, 1, type, p->rank, MPIMOD_TAG_BODY, m->comm, req);
  MPI_Type_free(&type);
  if (e == MPI_SUCCESS)
    *typed = 1;
  return e;
}

/* Posts a large frame: its header alone as a FRAME message, its payload in
 * BODY messages of MPIMOD_CHUNK bytes straight from the frame's pieces.
 * Peer lock held. Returns DONE, POSTED, or a negative code if nothing was
 * posted. */
static int post_split(struct mpimod *m, struct mpimod_peer *p, nx_frame_t *f,
                      size_t plen, int *mpi_error) {
  size_t chunks = (plen + MPIMOD_CHUNK - 1) / MPIMOD_CHUNK;
  if (chunks >= FRAME_COUNT)
    return NX_EMSGSIZE;
  MPI_Request local[8];
  MPI_Request *reqs = local;
  if (chunks + 1 > 8) {
    reqs = malloc((chunks + 1) * sizeof(*reqs));
    if (reqs == NULL)
      return NX_ENOMEM;
  }
  struct cursor c = {.v = nx_frame_iovs(f), .n = f->iovcnt, .k = 1, .in = 0};
  /* A lead (receive placement) goes with the header, from a block of
   * their own that the frame keeps until it completes (module_data[0]),
   * and the BODY messages carry the tail. */
  const void *head = c.v[0].iov_base;
  size_t head_len = NX_FRAME_HDR_SIZE;
  size_t lead = nx_frame_lead(head);
  if (lead != 0 && lead <= MPIMOD_LEAD_MAX && lead < plen &&
      (f->module_data[0] = malloc(NX_FRAME_HDR_SIZE + lead)) != NULL) {
    uint8_t *h = f->module_data[0];
    memcpy(h, head, NX_FRAME_HDR_SIZE);
    for (size_t got = 0; got < lead;) {
      while (c.in == c.v[c.k].iov_len) {
        c.k++;
        c.in = 0;
      }
      size_t take = c.v[c.k].iov_len - c.in;
      if (take > lead - got)
        take = lead - got;
      memcpy(h + NX_FRAME_HDR_SIZE + got,
             (const uint8_t *)c.v[c.k].iov_base + c.in, take);
      c.in += take;
      got += take;
    }
    head = h;
    head_len += lead;
    plen -= lead; /* no more chunks than counted above */
  }
  int posted = 0, head_done = 0, typed = 0;
  mpimod_lock(m);
  int e = MPI_Isend(head, (int)head_len, MPI_BYTE, p->rank, MPIMOD_TAG_FRAME,
                    m->comm, &reqs[0]);
  if (e == MPI_SUCCESS)
    posted = 1;
  for (size_t off = 0; e == MPI_SUCCESS && off < plen; off += MPIMOD_CHUNK) {
    size_t n = plen - off < MPIMOD_CHUNK ? plen - off : MPIMOD_CHUNK;
    e = post_chunk(m, p, &c, n, &reqs[posted], &typed);
    if (e == MPI_SUCCESS)
      posted++;
  }
  /* The header is small and usually gone at once: then only the payload
   * needs watching. */
  int failed = e != MPI_SUCCESS;
  if (posted > 0 &&
      MPI_Test(&reqs[0], &head_done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
    head_done = 1; /* completed with an error, and freed */
    failed = 1;
  }
  mpimod_unlock(m);
  int r;
  if (posted == 0) {
    *mpi_error = e;
    r = NX_EPEERDEAD;
    free(f->module_data[0]); /* the core keeps the frame */
    f->module_data[0] = NULL;
  } else {
    /* Some messages are out: the frame is ours until they complete, even
     * if the rest could not be posted (it then completes as lost). */
    if (failed)
      *mpi_error = e != MPI_SUCCESS ? e : MPI_ERR_OTHER;
    int first = head_done ? 1 : 0;
    if (posted - first == 0)
      r = DONE;
    else
      r = track(m, p, f, reqs + first, posted - first, failed, typed) ? DONE
                                                                      : POSTED;
    if (failed && r == DONE) {
      /* Nothing in flight, but part of it never left. */
      f->module_data[1] = (void *)FRAME_FAILED;
    }
  }
  if (reqs != local)
    free(reqs);
  return r;
}

int mpimod_send_frame(struct mpimod *m, struct mpimod_peer *p, nx_frame_t *f) {
  if (f->iovcnt < 1 || f->iovcnt > NX_FRAME_IOV_MAX ||
      (f->iovcnt > 2 && f->iovs == NULL) ||
      nx_frame_iovs(f)[0].iov_len != NX_FRAME_HDR_SIZE)
    return NX_EINVAL;
  size_t plen = frame_payload(f);
  size_t total = NX_FRAME_HDR_SIZE + plen;
  f->module_data[0] = NULL;
  f->module_data[1] = NULL;
  int mpi_error = MPI_SUCCESS;
  nxu_lock(&p->lock);
  if (p->dead) {
    nxu_unlock(&p->lock);
    return NX_EPEERDEAD;
  }
  /* Backpressure: a frame that would take the bytes in flight to this
   * rank past queue_max waits, unless nothing is in flight (a frame larger
   * than the bound must still go). */
  if (p->inflight > 0 && p->inflight + total > m->queue_max) {
    nxu_unlock(&p->lock);
    return NX_EAGAIN;
  }
  int r = plen <= m->inline_max ? post_inline(m, p, f, plen, &mpi_error)
                                : post_split(m, p, f, plen, &mpi_error);
  if (r == POSTED)
    p->inflight += total; /* the driver subtracts it under this lock */
  nxu_unlock(&p->lock);
  if (mpi_error != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_error, text, &len) != MPI_SUCCESS)
      strcpy(text, "MPI error");
    mpimod_peer_fail(m, p, text);
  }
  if (r == DONE) {
    int lost = ((uintptr_t)f->module_data[1] & FRAME_FAILED) != 0;
    free(f->module_data[0]); /* a stage, if the sender had to wait */
    m->core->send_done(f, lost ? NX_EPEERDEAD : 0);
    return 0;
  }
  return r;
}

/* Scratch arrays for MPI_Testsome, as large as the request set. tx_lock
 * held. */
static int scratch(struct mpimod *m) {
  if (m->tx_scratch_cap >= m->tx_cap)
    return 0;
  int cap = m->tx_cap;
  int *idx = realloc(m->tx_idx, (size_t)cap * sizeof(*idx));
  if (idx == NULL)
    return NX_ENOMEM;
  m->tx_idx = idx;
  MPI_Status *st = realloc(m->tx_st, (size_t)cap * sizeof(*st));
  if (st == NULL)
    return NX_ENOMEM;
  m->tx_st = st;
  struct mpimod_tx *fin = realloc(m->tx_fin, (size_t)cap * sizeof(*fin));
  if (fin == NULL)
    return NX_ENOMEM;
  m->tx_fin = fin;
  m->tx_scratch_cap = cap;
  return 0;
}

static void finish(struct mpimod *m, struct mpimod_tx *t) {
  nx_frame_t *f = t->frame;
  size_t total = NX_FRAME_HDR_SIZE + frame_payload(f);
  int lost = ((uintptr_t)f->module_data[1] & FRAME_FAILED) != 0;
  if ((uintptr_t)f->module_data[1] & FRAME_TYPED)
    atomic_fetch_sub(&m->tx_typed, 1);
  nxu_lock(&t->peer->lock);
  t->peer->inflight -= total;
  nxu_unlock(&t->peer->lock);
  free(f->module_data[0]);
  f->module_data[0] = NULL;
  if (lost)
    mpimod_peer_fail(m, t->peer, "a send failed");
  m->core->send_done(f, lost ? NX_EPEERDEAD : 0);
}

int mpimod_tx_progress(struct mpimod *m) {
  if (atomic_load_explicit(&m->tx_count, memory_order_relaxed) == 0)
    return 0;
  nxu_lock(&m->tx_lock);
  int n = m->tx_n, outc = 0, nfin = 0;
  if (n == 0 || scratch(m) < 0) {
    nxu_unlock(&m->tx_lock);
    return 0;
  }
  mpimod_lock(m);
  int e = MPI_Testsome(n, m->tx_req, &outc, m->tx_idx, m->tx_st);
  mpimod_unlock(m);
  if ((e != MPI_SUCCESS && e != MPI_ERR_IN_STATUS) || outc == MPI_UNDEFINED)
    outc = 0;
  for (int i = 0; i < outc; i++) {
    struct mpimod_tx *t = &m->tx_of[m->tx_idx[i]];
    uintptr_t v = (uintptr_t)t->frame->module_data[1];
    if (e == MPI_ERR_IN_STATUS && m->tx_st[i].MPI_ERROR != MPI_SUCCESS)
      v |= FRAME_FAILED;
    v--;
    t->frame->module_data[1] = (void *)v;
    if ((v & FRAME_COUNT) == 0)
      m->tx_fin[nfin++] = *t;
  }
  /* Testsome set the completed requests to MPI_REQUEST_NULL. */
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (m->tx_req[i] == MPI_REQUEST_NULL)
      continue;
    m->tx_req[k] = m->tx_req[i];
    m->tx_of[k] = m->tx_of[i];
    k++;
  }
  m->tx_n = k;
  atomic_store(&m->tx_count, k);
  nxu_unlock(&m->tx_lock);
  /* send_done outside the locks: the core may free memory and count. The
   * scratch array is the driver's, so it stays valid meanwhile. */
  for (int i = 0; i < nfin; i++)
    finish(m, &m->tx_fin[i]);
  /* A send by datatype advances only while MPI is called on this side
   * (Open MPI packs it through its transport's buffers, a piece at a
   * time, where a contiguous one is pulled by the receiver at once): it
   * counts as work, so that the core keeps polling instead of sleeping
   * between the pieces. */
  if (nfin == 0 && atomic_load_explicit(&m->tx_typed, memory_order_relaxed) > 0)
    return 1;
  return nfin;
}

/* Sends still in flight after the linger: MPI may still read their
 * frames, so they are neither freed nor reported done; their requests are
 * released so that MPI does not keep them either. */
void mpimod_tx_abandon(struct mpimod *m) {
  nxu_lock(&m->tx_lock);
  if (m->tx_n > 0)
    MPIMOD_LOG(m, 1,
               "finalize: %d sends still in flight; their frames are "
               "leaked",
               m->tx_n);
  for (int i = 0; i < m->tx_n; i++) {
    mpimod_lock(m);
    MPI_Request_free(&m->tx_req[i]);
    mpimod_unlock(m);
  }
  m->tx_n = 0;
  atomic_store(&m->tx_count, 0);
  nxu_unlock(&m->tx_lock);
}

void mpimod_tx_fini(struct mpimod *m) {
  free(m->tx_req);
  free(m->tx_of);
  free(m->tx_idx);
  free(m->tx_st);
  free(m->tx_fin);
  m->tx_req = NULL;
  m->tx_of = NULL;
  m->tx_idx = NULL;
  m->tx_st = NULL;
  m->tx_fin = NULL;
  m->tx_cap = m->tx_scratch_cap = 0;
}
