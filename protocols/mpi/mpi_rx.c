/* Receiving frames in the mpi module: FRAME messages into receives posted in
 * advance, payloads matched from the ranks that owe them, each rank's frames
 * delivered in the order it sent them; driver only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mpi_rx.h"
#include "mpi_peer.h"
#include "nxu_time.h"

/* MPIMOD_SLOTS receives for FRAME messages from any rank stay posted, and
 * are taken strictly in the order they were posted, which is the order
 * MPI matched messages into them: each rank's FRAME messages are
 * therefore taken in the order that rank sent them (MPI's non-overtaking
 * rule). Posted receives let MPI put a small message straight where it
 * belongs, which is cheaper than probing for it and receiving it after.
 *
 * A FRAME message that carries its whole frame is copied into a frame
 * from the core and delivered. One that carries only a header (its
 * length field says more is coming) gets its frame from the core at once
 * and makes its source owe BODY messages, which progress then probes for
 * from that source alone and receives straight into the frame. A source's
 * frames wait in its queue while an earlier frame's payload is still
 * coming, so delivery keeps the sender's order. */

static int post(struct mpimod *m, int i) {
  mpimod_lock(m);
  int e =
      MPI_Irecv(m->slots[i].buf, (int)MPIMOD_SLOT_SIZE, MPI_BYTE,
                MPI_ANY_SOURCE, MPIMOD_TAG_FRAME, m->comm, &m->slots[i].req);
  mpimod_unlock(m);
  return e;
}

int mpimod_rx_init(struct mpimod *m) {
  m->srcs = calloc((size_t)m->size, sizeof(*m->srcs));
  m->owing = malloc((size_t)m->size * sizeof(*m->owing));
  if (m->srcs == NULL || m->owing == NULL)
    return NX_ENOMEM;
  for (int i = 0; i < MPIMOD_SLOTS; i++) {
    m->slots[i].req = MPI_REQUEST_NULL;
    m->slots[i].buf = malloc(MPIMOD_SLOT_SIZE);
    if (m->slots[i].buf == NULL)
      return NX_ENOMEM;
  }
  /* Set first: the slots posted before a failure are cancelled at
   * finalize. */
  m->ring_posted = 1;
  for (int i = 0; i < MPIMOD_SLOTS; i++) {
    int e = post(m, i);
    if (e != MPI_SUCCESS)
      return mpimod_status_to_nx(e);
  }
  return 0;
}

static struct mpimod_rx *rx_new(struct mpimod *m, int src, int kind) {
  struct mpimod_rx *rx = calloc(1, sizeof(*rx));
  if (rx == NULL)
    return NULL;
  rx->src = src;
  rx->kind = kind;
  atomic_fetch_add(&m->rx_count, 1);
  return rx;
}

static void rx_free(struct mpimod *m, struct mpimod_rx *rx) {
  atomic_fetch_sub(&m->rx_count, 1);
  free(rx);
}

static void enqueue(struct mpimod_src *s, struct mpimod_rx *rx) {
  rx->next = NULL;
  if (s->tail != NULL)
    s->tail->next = rx;
  else
    s->head = rx;
  s->tail = rx;
}

static int owes(const struct mpimod_rx *rx) {
  return rx->kind == MPIMOD_RX_BODY && rx->body_posted < rx->body_len;
}

/* The source's first entry still owed payload: the next BODY message from
 * that source belongs to it. */
static struct mpimod_rx *first_owed(struct mpimod_src *s) {
  for (struct mpimod_rx *rx = s->head; rx != NULL; rx = rx->next)
    if (owes(rx))
      return rx;
  return NULL;
}

/* Blocks until a request completes: only when memory to track it ran out. */
static int wait_now(struct mpimod *m, MPI_Request *req) {
  mpimod_lock(m);
  int e = MPI_Wait(req, MPI_STATUS_IGNORE);
  mpimod_unlock(m);
  return e;
}

static int grow(struct mpimod *m) {
  int cap = m->rx_cap > 0 ? m->rx_cap * 2 : 64;
  MPI_Request *req = realloc(m->rx_req, (size_t)cap * sizeof(*req));
  if (req == NULL)
    return NX_ENOMEM;
  m->rx_req = req;
  struct mpimod_rx **of = realloc(m->rx_of, (size_t)cap * sizeof(*of));
  if (of == NULL)
    return NX_ENOMEM;
  m->rx_of = of;
  int *idx = realloc(m->rx_idx, (size_t)cap * sizeof(*idx));
  if (idx == NULL)
    return NX_ENOMEM;
  m->rx_idx = idx;
  MPI_Status *st = realloc(m->rx_st, (size_t)cap * sizeof(*st));
  if (st == NULL)
    return NX_ENOMEM;
  m->rx_st = st;
  m->rx_cap = cap;
  return 0;
}

/* Tests `req` from now on for `rx`; without memory for that, waits for it
 * here. */
static void track(struct mpimod *m, MPI_Request req, struct mpimod_rx *rx) {
  if (m->rx_n == m->rx_cap && grow(m) < 0) {
    if (wait_now(m, &req) != MPI_SUCCESS)
      rx->failed = 1;
    return;
  }
  m->rx_req[m->rx_n] = req;
  m->rx_of[m->rx_n] = rx;
  m->rx_n++;
  rx->outstanding++;
}

/* Stops listening to a rank: it broke the wire format (`malformed`, which
 * the core counts) or a receive from it failed. Frames it sent before are
 * still delivered, except those whose payload had not come; whatever it
 * sends later is dropped, and its endpoint, if any, is reported dead. */
static void drop_source(struct mpimod *m, int src, const char *why,
                        int malformed) {
  struct mpimod_src *s = &m->srcs[src];
  if (s->dropped)
    return;
  s->dropped = 1;
  for (struct mpimod_rx *rx = s->head; rx != NULL; rx = rx->next) {
    if (owes(rx)) {
      rx->failed = 1;
      rx->body_posted = rx->body_len; /* its payload is not awaited */
    }
  }
  s->owed = 0;
  if (malformed) {
    char text[160];
    snprintf(text, sizeof(text), "rank %d: %s", src, why);
    m->core->bad_peer(MPIMOD_NAME, text);
  } else {
    MPIMOD_LOG(m, 0, "rank %d: %s; no more frames are taken from it", src, why);
  }
  struct mpimod_peer *p = mpimod_peer_find(m, src);
  if (p != NULL)
    mpimod_peer_fail(m, p, why);
}

/* Receives a matched BODY message only to drop it. Open MPI cannot be
 * asked to truncate a large message to nothing (4.1 crashes), so it is
 * received into memory of its size. Without that memory it stays
 * unreceived, which costs only the memory MPI holds for it. */
static void discard(struct mpimod *m, MPI_Message *msg, int src, int count) {
  struct mpimod_rx *rx = rx_new(m, src, MPIMOD_RX_DISCARD);
  uint8_t *buf = malloc(count > 0 ? (size_t)count : 1);
  if (rx == NULL || buf == NULL) {
    MPIMOD_LOG(m, 0, "rank %d: no memory to drop a message of %d bytes", src,
               count);
    free(buf);
    if (rx != NULL)
      rx_free(m, rx);
    return;
  }
  MPI_Request req;
  int done = 0;
  mpimod_lock(m);
  int e = MPI_Imrecv(buf, count, MPI_BYTE, msg, &req);
  if (e == MPI_SUCCESS)
    e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  mpimod_unlock(m);
  if (e == MPI_SUCCESS && !done) {
    rx->buf = buf;
    track(m, req, rx);
    if (rx->outstanding > 0)
      return;
  }
  free(buf);
  rx_free(m, rx);
}

/* A whole frame, header and `len` payload bytes, in `buf`: hands it to
 * the core. Returns 1 if it was delivered. */
static int frame_bytes(struct mpimod *m, int src, const uint8_t *buf,
                       uint64_t len) {
  nx_frame_t *f;
  int r = m->core->frame_alloc_lead(buf, &f);
  size_t lead = r == 0 && f->iov[1].iov_len < len ? f->iov[1].iov_len : 0;
  if (lead != 0) /* the tail is copied once, to where the program says */
    r = nx_frame_place_lead(m->core, f, buf + NX_FRAME_HDR_SIZE);
  if (r < 0) {
    /* NX_EPROTO: the core counted the bad header. Unlike a byte stream,
     * MPI keeps message boundaries, so the next frame from this rank is
     * found all the same: the rank is not dropped. */
    if (r != NX_EPROTO)
      MPIMOD_LOG(m, 0, "rank %d: a frame of %llu bytes is lost (error %d)", src,
                 (unsigned long long)len, r);
    return 0;
  }
  if (len > lead)
    memcpy(f->iov[1].iov_base, buf + NX_FRAME_HDR_SIZE + lead,
           (size_t)len - lead);
  nx_frame_batch_add(m->core, m->batch, f);
  return 1;
}

/* A queue entry whose receives are all complete: delivers or frees what
 * it holds. Returns 1 if it delivered a frame. */
static int finish(struct mpimod *m, struct mpimod_rx *rx) {
  int n = 0;
  if (rx->kind == MPIMOD_RX_FRAME) {
    if (!rx->failed && !m->finalizing)
      n = frame_bytes(m, rx->src, rx->buf, rx->buf_len - NX_FRAME_HDR_SIZE);
    free(rx->buf);
  } else if (rx->kind == MPIMOD_RX_BODY && rx->frame != NULL && !rx->leaked) {
    if (!rx->failed && !m->finalizing) {
      nx_frame_batch_add(m->core, m->batch, rx->frame);
      n = 1;
    } else {
      m->core->frame_free(rx->frame);
    }
  } else if (rx->kind == MPIMOD_RX_DISCARD && !rx->leaked) {
    free(rx->buf);
  }
  rx_free(m, rx);
  return n;
}

/* Finishes the source's entries from the front while they are complete. */
static int drain(struct mpimod *m, int src) {
  struct mpimod_src *s = &m->srcs[src];
  struct mpimod_rx *rx;
  int n = 0;
  while ((rx = s->head) != NULL && rx->outstanding == 0 && !owes(rx)) {
    s->head = rx->next;
    if (s->head == NULL)
      s->tail = NULL;
    n += finish(m, rx);
  }
  return n;
}

/* A header whose payload comes in BODY messages; or, with `lead` bytes
 * after it (receive placement: docs/mpi.md), one whose tail does, into
 * the memory the receiving program names (frame_place). */
static void head_arrived(struct mpimod *m, int src, const uint8_t *hdr,
                         uint64_t len, size_t lead) {
  struct mpimod_src *s = &m->srcs[src];
  struct mpimod_rx *rx = rx_new(m, src, MPIMOD_RX_BODY);
  if (rx == NULL) {
    drop_source(m, src, "no memory for a frame", 0);
    return;
  }
  rx->body_len = (size_t)len - lead;
  int r = lead == 0 ? m->core->frame_alloc(hdr, &rx->frame)
                    : m->core->frame_alloc_lead(hdr, &rx->frame);
  if (r == 0 && lead != 0)
    r = nx_frame_place_lead(m->core, rx->frame, hdr + NX_FRAME_HDR_SIZE);
  if (r < 0) {
    /* Refused (NX_EPROTO, counted by the core) or no memory: its payload
     * is received and dropped, and the rank's later frames still count. */
    rx->frame = NULL;
    if (r != NX_EPROTO)
      MPIMOD_LOG(m, 0, "rank %d: a frame of %llu bytes is lost (error %d)", src,
                 (unsigned long long)len, r);
  }
  enqueue(s, rx);
  s->owed++;
  if (!s->listed) {
    s->listed = 1;
    m->owing[m->nowing++] = src;
  }
}

/* A FRAME message from a slot. Returns the frames delivered. */
static int frame_arrived(struct mpimod *m, const uint8_t *buf,
                         const MPI_Status *st) {
  int src = st->MPI_SOURCE, count = MPI_UNDEFINED;
  MPI_Get_count(st, MPI_BYTE, &count);
  if (src < 0 || src >= m->size)
    return 0;
  struct mpimod_src *s = &m->srcs[src];
  if (s->dropped)
    return 0;
  if (count == MPI_UNDEFINED || (size_t)count < NX_FRAME_HDR_SIZE) {
    drop_source(m, src, "a frame shorter than its header", 1);
    return drain(m, src);
  }
  uint64_t len = nx_frame_payload_len(buf);
  if (len == (uint64_t)count - NX_FRAME_HDR_SIZE) {
    if (s->head == NULL) /* the common case: nothing ahead of it */
      return frame_bytes(m, src, buf, len);
    /* Behind a frame whose payload is still coming: it waits, copied out
     * of the slot, which is needed for the next message. */
    struct mpimod_rx *rx = rx_new(m, src, MPIMOD_RX_FRAME);
    uint8_t *copy = malloc((size_t)count);
    if (rx == NULL || copy == NULL) {
      free(copy);
      if (rx != NULL)
        rx_free(m, rx);
      drop_source(m, src, "no memory for a frame", 0);
      return drain(m, src);
    }
    memcpy(copy, buf, (size_t)count);
    rx->buf = copy;
    rx->buf_len = (size_t)count;
    enqueue(s, rx);
  } else if ((size_t)count == NX_FRAME_HDR_SIZE) {
    head_arrived(m, src, buf, len, 0);
  } else if ((size_t)count > NX_FRAME_HDR_SIZE &&
             (size_t)count - NX_FRAME_HDR_SIZE == nx_frame_lead(buf) &&
             nx_frame_lead(buf) < len) {
    head_arrived(m, src, buf, len, nx_frame_lead(buf));
  } else {
    drop_source(m, src, "a frame whose header does not match its size", 1);
  }
  return drain(m, src);
}

/* A BODY message from `src`, matched. */
static void body_arrived(struct mpimod *m, int src, MPI_Message *msg,
                         const MPI_Status *st) {
  struct mpimod_src *s = &m->srcs[src];
  struct mpimod_rx *rx = first_owed(s);
  int count = MPI_UNDEFINED;
  MPI_Get_count(st, MPI_BYTE, &count);
  size_t want = rx != NULL ? rx->body_len - rx->body_posted : 0;
  if (want > MPIMOD_CHUNK)
    want = MPIMOD_CHUNK;
  if (rx == NULL || count == MPI_UNDEFINED || (size_t)count != want) {
    drop_source(m, src, "a payload message of the wrong size", 1);
    if (count != MPI_UNDEFINED)
      discard(m, msg, src, count);
    return;
  }
  size_t at = rx->body_posted;
  rx->body_posted += want;
  if (!owes(rx))
    s->owed--;
  if (rx->frame == NULL) {
    discard(m, msg, src, count);
    return;
  }
  MPI_Request req;
  int done = 0;
  mpimod_lock(m);
  int e = MPI_Imrecv((uint8_t *)rx->frame->iov[1].iov_base + at, count,
                     MPI_BYTE, msg, &req);
  if (e == MPI_SUCCESS)
    e = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  mpimod_unlock(m);
  if (e != MPI_SUCCESS) {
    rx->failed = 1;
    drop_source(m, src, "a receive failed", 0);
    return;
  }
  if (!done)
    track(m, req, rx);
}

/* Takes FRAME messages from the slots, in order; returns the events. */
static int take_frames(struct mpimod *m) {
  int n = 0;
  nxu_lock(&m->ring_lock);
  for (int k = 0; k < MPIMOD_MATCH_MAX && m->ring_posted; k++) {
    struct mpimod_slot *sl = &m->slots[m->ring_head];
    MPI_Status st;
    st.MPI_SOURCE = MPI_ANY_SOURCE;
    int done = 0;
    mpimod_lock(m);
    int e = MPI_Test(&sl->req, &done, &st);
    mpimod_unlock(m);
    if (e == MPI_SUCCESS && !done)
      break;
    if (e == MPI_SUCCESS) {
      n += 1 + frame_arrived(m, sl->buf, &st);
    } else if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < m->size) {
      /* Completed with an error: a message too large for a slot, which
       * no module of this wire version sends, or a failed receive. */
      drop_source(m, st.MPI_SOURCE, "a FRAME message could not be received", 1);
      drain(m, st.MPI_SOURCE);
      n++;
    }
    e = post(m, m->ring_head);
    if (e != MPI_SUCCESS) {
      MPIMOD_LOG(m, 0,
                 "cannot post a receive (error %d): no more frames "
                 "are received",
                 mpimod_status_to_nx(e));
      m->ring_posted = 0;
      break;
    }
    m->ring_head = (m->ring_head + 1) % MPIMOD_SLOTS;
  }
  nxu_unlock(&m->ring_lock);
  return n;
}

/* Matches BODY messages from the sources that owe some. */
static int match_bodies(struct mpimod *m) {
  int n = 0;
  for (int i = 0; i < m->nowing;) {
    int src = m->owing[i];
    struct mpimod_src *s = &m->srcs[src];
    while (s->owed > 0 && !s->dropped && n < MPIMOD_MATCH_MAX) {
      int flag = 0;
      MPI_Message msg;
      MPI_Status st;
      mpimod_lock(m);
      int e = MPI_Improbe(src, MPIMOD_TAG_BODY, m->comm, &flag, &msg, &st);
      mpimod_unlock(m);
      if (e != MPI_SUCCESS) {
        if (!m->probe_error)
          MPIMOD_LOG(m, 0, "MPI_Improbe failed (error %d)",
                     mpimod_status_to_nx(e));
        m->probe_error = 1;
        break;
      }
      if (!flag)
        break;
      body_arrived(m, src, &msg, &st);
      n += 1 + drain(m, src);
    }
    if (s->owed == 0 || s->dropped) {
      s->listed = 0;
      m->owing[i] = m->owing[--m->nowing];
    } else {
      i++;
    }
  }
  return n;
}

/* Tests the payload receives in flight; finishes what they complete. */
static int complete(struct mpimod *m) {
  int n = m->rx_n, outc = 0, delivered = 0;
  if (n == 0)
    return 0;
  mpimod_lock(m);
  int e = MPI_Testsome(n, m->rx_req, &outc, m->rx_idx, m->rx_st);
  mpimod_unlock(m);
  if ((e != MPI_SUCCESS && e != MPI_ERR_IN_STATUS) || outc == MPI_UNDEFINED)
    return 0;
  /* First account for every completed request (rx_idx[i] then holds the
   * source to drain, or -1), then compact the set, then drain: draining
   * frees entries, which must no longer be in the set. */
  for (int i = 0; i < outc; i++) {
    struct mpimod_rx *rx = m->rx_of[m->rx_idx[i]];
    int failed = e == MPI_ERR_IN_STATUS && m->rx_st[i].MPI_ERROR != MPI_SUCCESS;
    rx->outstanding--;
    m->rx_idx[i] = -1;
    if (rx->kind == MPIMOD_RX_DISCARD) {
      free(rx->buf);
      rx_free(m, rx);
      continue;
    }
    if (failed) {
      rx->failed = 1;
      drop_source(m, rx->src, "a receive failed", 0);
    }
    m->rx_idx[i] = rx->src;
  }
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (m->rx_req[i] == MPI_REQUEST_NULL)
      continue;
    m->rx_req[k] = m->rx_req[i];
    m->rx_of[k] = m->rx_of[i];
    k++;
  }
  m->rx_n = k;
  for (int i = 0; i < outc; i++)
    if (m->rx_idx[i] >= 0)
      delivered += drain(m, m->rx_idx[i]);
  return outc + delivered;
}

int mpimod_rx_progress(struct mpimod *m) {
  int n = complete(m);
  if (m->finalizing)
    return n;
  n += take_frames(m);
  if (m->nowing > 0)
    n += match_bodies(m);
  return n;
}

int mpimod_rx_ready(struct mpimod *m) {
  int flag = 0;
  nxu_lock(&m->ring_lock);
  if (m->ring_posted) {
    /* Does not free the request, and polls MPI when it is not complete. */
    mpimod_lock(m);
    MPI_Request_get_status(m->slots[m->ring_head].req, &flag,
                           MPI_STATUS_IGNORE);
    mpimod_unlock(m);
  }
  nxu_unlock(&m->ring_lock);
  return flag;
}

/* Finalize: the slots' receives are cancelled; one that matched a message
 * meanwhile gets a moment to complete. Payload receives still in flight
 * after the linger leave their memory to MPI (leaked) and their requests
 * are released. Everything queued is freed, not delivered. */
void mpimod_rx_abandon(struct mpimod *m) {
  nxu_lock(&m->ring_lock);
  if (m->ring_posted) {
    for (int i = 0; i < MPIMOD_SLOTS; i++) {
      if (m->slots[i].req == MPI_REQUEST_NULL)
        continue;
      mpimod_lock(m);
      MPI_Cancel(&m->slots[i].req);
      mpimod_unlock(m);
    }
    uint64_t deadline = nxu_now_ms() + 200;
    for (int i = 0; i < MPIMOD_SLOTS; i++) {
      int done = 0;
      while (!done) {
        mpimod_lock(m);
        int e = MPI_Test(&m->slots[i].req, &done, MPI_STATUS_IGNORE);
        if (!done && nxu_now_ms() > deadline) {
          MPI_Request_free(&m->slots[i].req);
          m->slots[i].buf = NULL; /* MPI may still write it: leaked */
          done = 1;
        }
        mpimod_unlock(m);
        if (e != MPI_SUCCESS)
          break;
      }
    }
    m->ring_posted = 0;
  }
  nxu_unlock(&m->ring_lock);
  if (m->rx_n > 0)
    MPIMOD_LOG(m, 1,
               "finalize: %d receives still in flight; their memory "
               "is leaked",
               m->rx_n);
  for (int i = 0; i < m->rx_n; i++) {
    struct mpimod_rx *rx = m->rx_of[i];
    mpimod_lock(m);
    MPI_Request_free(&m->rx_req[i]);
    mpimod_unlock(m);
    rx->leaked = 1;
    if (rx->kind == MPIMOD_RX_DISCARD && --rx->outstanding == 0)
      rx_free(m, rx);
    else
      rx->outstanding = 0;
  }
  m->rx_n = 0;
  for (int src = 0; m->srcs != NULL && src < m->size; src++) {
    struct mpimod_src *s = &m->srcs[src];
    while (s->head != NULL) {
      struct mpimod_rx *rx = s->head;
      s->head = rx->next;
      rx->failed = 1;
      finish(m, rx);
    }
    s->tail = NULL;
  }
}

void mpimod_rx_fini(struct mpimod *m) {
  for (int i = 0; i < MPIMOD_SLOTS; i++) {
    free(m->slots[i].buf);
    m->slots[i].buf = NULL;
  }
  free(m->srcs);
  free(m->owing);
  free(m->rx_req);
  free(m->rx_of);
  free(m->rx_idx);
  free(m->rx_st);
  m->srcs = NULL;
  m->owing = NULL;
  m->rx_req = NULL;
  m->rx_of = NULL;
  m->rx_idx = NULL;
  m->rx_st = NULL;
  m->rx_n = m->rx_cap = m->nowing = 0;
}
