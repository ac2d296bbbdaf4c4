/* The tcp protocol module: RSR frames between processes over TCP, on sockets
 * in the module's own epoll set, one connection per pair of processes; this
 * file holds the ops table, the peers, the send path and progress. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "tcp_addr.h"
#include "tcp_conn.h"
#include "nxu_opt.h"
#include "nxu_time.h"

/* Threads. send() runs on any thread, concurrently; everything that touches
 * the epoll set or a connection's state runs on the driver (progress, init,
 * finalize). A peer's `lock` guards its send side: the socket of its open
 * connection, the queue of frames not yet written, the dead flag. A sender with
 * nothing queued writes straight to the socket (sendmsg, non-blocking,
 * MSG_NOSIGNAL) under that lock and queues only what the socket did not take;
 * the driver writes the queue when the socket becomes writable. Because a frame
 * is written directly only when the queue is empty, and a partly written frame
 * goes to the head of the queue, frames leave in the order their send() calls
 * took the lock and their bytes never interleave. A sender that needs the
 * driver (a frame queued behind nothing, a connection to open, a dead
 * connection to close) pushes the peer on an "attention" stack and wakes the
 * core. Lock order: peers_lock, then a peer's lock; nothing takes peers_lock
 * while holding a peer's lock. */

/* Frames: module_data[0] links the queue, module_data[1] counts the bytes
 * already written. */

static nx_frame_t *frame_next(const nx_frame_t *f) { return f->module_data[0]; }

static size_t frame_sent(const nx_frame_t *f) {
  return (size_t)(uintptr_t)f->module_data[1];
}

static size_t frame_total(const nx_frame_t *f) {
  size_t n = 0;
  const struct iovec *v = nx_frame_iovs(f);
  for (int i = 0; i < f->iovcnt; i++)
    n += v[i].iov_len;
  return n;
}

/* Appends the unsent part of `f` to `iov`; returns the entries used. */
static int frame_iov(const nx_frame_t *f, struct iovec *iov) {
  size_t skip = frame_sent(f);
  const struct iovec *v = nx_frame_iovs(f);
  int n = 0;
  for (int i = 0; i < f->iovcnt; i++) {
    size_t len = v[i].iov_len;
    if (skip >= len) {
      skip -= len;
      continue;
    }
    iov[n].iov_base = (char *)v[i].iov_base + skip;
    iov[n].iov_len = len - skip;
    skip = 0;
    n++;
  }
  return n;
}

static ssize_t write_iov(int fd, struct iovec *iov, int n) {
  struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
  ssize_t w;
  do
    w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (w < 0 && errno == EINTR);
  return w;
}

static void complete(struct tcp *t, nx_frame_t *list, int status) {
  while (list != NULL) {
    nx_frame_t *next = frame_next(list);
    t->core->send_done(list, status);
    list = next;
  }
}

/* Writes queued frames until the queue is empty or the socket is full.
 * Peer lock held; written frames go to `*done` for send_done after the
 * unlock. Returns 0, or a negative errno when the connection is broken. */
#define FLUSH_IOV 64
static int flush_locked(struct tcp_peer *p, nx_frame_t **done) {
  while (p->qhead != NULL) {
    struct iovec iov[FLUSH_IOV];
    int n = 0;
    for (nx_frame_t *f = p->qhead; f != NULL && n + f->iovcnt <= FLUSH_IOV;
         f = frame_next(f))
      n += frame_iov(f, iov + n);
    ssize_t w = write_iov(p->fd, iov, n);
    if (w < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
    size_t left = (size_t)w;
    p->qbytes -= left;
    while (p->qhead != NULL) {
      nx_frame_t *f = p->qhead;
      size_t rest = frame_total(f) - frame_sent(f);
      if (left < rest) {
        f->module_data[1] = (void *)(uintptr_t)(frame_sent(f) + left);
        return 0; /* the socket is full */
      }
      left -= rest;
      p->qhead = frame_next(f);
      if (p->qhead == NULL)
        p->qtail = NULL;
      f->module_data[0] = *done;
      *done = f;
    }
  }
  return 0;
}

static void enqueue_locked(struct tcp_peer *p, nx_frame_t *f, size_t unsent) {
  f->module_data[0] = NULL;
  if (p->qtail != NULL)
    p->qtail->module_data[0] = f;
  else
    p->qhead = f;
  p->qtail = f;
  p->qbytes += unsent;
}

/* Marks the peer dead: no more writes to its socket (the driver closes
 * it), no more frames accepted. Returns the frames that were queued. */
static nx_frame_t *mark_dead_locked(struct tcp_peer *p) {
  nx_frame_t *q = p->qhead;
  p->dead = 1;
  p->fd = -1;
  p->qhead = p->qtail = NULL;
  p->qbytes = 0;
  return q;
}

static void report(struct tcp *t, struct tcp_peer *p, const char *why) {
  if (atomic_exchange(&p->reported, 1) || t->finalizing)
    return;
  TCP_LOG(t, 1, "peer %02x%02x%02x%02x: %s", p->base.uuid[0], p->base.uuid[1],
          p->base.uuid[2], p->base.uuid[3], why);
  t->core->peer_failed(&p->base, NX_EPEERDEAD);
}

/* Peers. tcp_conn.c reaches these through the hooks in struct tcp, which
 * tcp_init installs. */

/* Finds the peer with `uuid` or adds one; returns it with a reference, or
 * NULL when out of memory. */
static struct tcp_peer *tcp_peer_get(struct tcp *t, const uint8_t *uuid);
static void tcp_peer_release(struct tcp *t, struct tcp_peer *p);
/* Driver only: `c` (the peer's, answered or accepted) now carries the
 * peer's frames; flushes what was queued. */
static void tcp_peer_open(struct tcp *t, struct tcp_peer *p,
                          struct tcp_conn *c);
/* Driver only: writes queued frames after the socket became writable. */
static void tcp_peer_flush(struct tcp *t, struct tcp_peer *p);
/* Driver only: the peer is dead; fails its queue, closes its connections,
 * reports it once. */
static void tcp_peer_fail(struct tcp *t, struct tcp_peer *p, const char *why);
/* Driver only: a write to the peer failed with errno `err`. */
static void peer_write_failed(struct tcp *t, struct tcp_peer *p, int err);

/* The endpoint is a peer's first member. */
static struct tcp_peer *peer_of(struct nx_endpoint *ep) {
  return (struct tcp_peer *)(void *)ep;
}

static struct tcp_peer *tcp_peer_get(struct tcp *t, const uint8_t *uuid) {
  pthread_mutex_lock(&t->peers_lock);
  for (struct nx_endpoint *l = nxu_uuid_find(&t->peers, uuid, NULL); l != NULL;
       l = nxu_uuid_find(&t->peers, uuid, l)) {
    struct tcp_peer *p = peer_of(l);
    /* One whose count reached zero belongs to the thread freeing it. */
    unsigned r = atomic_load(&p->refs);
    while (r != 0 && !atomic_compare_exchange_weak(&p->refs, &r, r + 1))
      ;
    if (r != 0) {
      pthread_mutex_unlock(&t->peers_lock);
      return p;
    }
  }
  struct tcp_peer *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    pthread_mutex_unlock(&t->peers_lock);
    return NULL;
  }
  nxu_lock_init(&p->lock);
  nx_endpoint_init(&p->base, uuid);
  atomic_init(&p->refs, 1);
  p->fd = -1;
  nxu_uuid_insert(&t->peers, &p->base);
  pthread_mutex_unlock(&t->peers_lock);
  return p;
}

/* Whoever drops the last reference frees the peer. By then it has no
 * connection (each holds a reference) and so nothing queued. */
static void tcp_peer_release(struct tcp *t, struct tcp_peer *p) {
  if (atomic_fetch_sub(&p->refs, 1) != 1)
    return;
  pthread_mutex_lock(&t->peers_lock);
  nxu_uuid_remove(&t->peers, &p->base);
  pthread_mutex_unlock(&t->peers_lock);
  complete(t, p->qhead, NX_EPEERDEAD);
  free(p);
}

/* Asks the driver to look at the peer. The caller holds a reference. */
static void attend(struct tcp *t, struct tcp_peer *p) {
  if (atomic_exchange(&p->attn, 1))
    return; /* already waiting */
  atomic_fetch_add(&p->refs, 1);
  struct tcp_peer *head = atomic_load(&t->attn_head);
  do
    p->attn_next = head;
  while (!atomic_compare_exchange_weak(&t->attn_head, &head, p));
  t->core->wake();
}

static void tcp_peer_open(struct tcp *t, struct tcp_peer *p,
                          struct tcp_conn *c) {
  c->state = CONN_OPEN;
  c->deadline = 0; /* the handshake is over */
  p->conn = c;
  nx_frame_t *done = NULL;
  nxu_lock(&p->lock);
  p->fd = c->fd;
  int r = flush_locked(p, &done);
  int more = p->qhead != NULL;
  nxu_unlock(&p->lock);
  complete(t, done, 0);
  if (r < 0) {
    peer_write_failed(t, p, -r);
    return;
  }
  tcp_conn_poll(c, EPOLLIN | (more ? EPOLLOUT : 0));
}

static void tcp_peer_flush(struct tcp *t, struct tcp_peer *p) {
  nx_frame_t *done = NULL;
  int r = 0, more = 0;
  nxu_lock(&p->lock);
  if (p->fd >= 0) {
    r = flush_locked(p, &done);
    more = p->qhead != NULL;
  }
  nxu_unlock(&p->lock);
  if (done != NULL)
    t->events++;
  complete(t, done, 0);
  if (r < 0) {
    peer_write_failed(t, p, -r);
    return;
  }
  if (p->conn != NULL)
    tcp_conn_poll(p->conn, EPOLLIN | (more ? EPOLLOUT : 0));
}

static void tcp_peer_fail(struct tcp *t, struct tcp_peer *p, const char *why) {
  nxu_lock(&p->lock);
  nx_frame_t *q = mark_dead_locked(p);
  nxu_unlock(&p->lock);
  if (p->conn != NULL)
    tcp_conn_close(p->conn);
  if (p->out != NULL)
    tcp_conn_close(p->out);
  /* The peer first, then its RSRs: whoever hears of a lost RSR can find
   * its destination failed already. */
  report(t, p, why);
  complete(t, q, NX_EPEERDEAD);
}

/* EPIPE: the connection was reset after the peer's FIN (tcp_conn_event),
 * so the peer ended its writing first, and what it sent before (its last
 * reply, its final counts) may still lie unread in the socket. The
 * connection is read to its end first; the EOF there fails the peer, as a
 * close does. Meanwhile nothing more is written to it. Any other error
 * (a reset without a FIN: a broken connection) fails the peer now. */
static void peer_write_failed(struct tcp *t, struct tcp_peer *p, int err) {
  if (err == EPIPE && !t->finalizing && p->conn != NULL &&
      p->conn->state == CONN_OPEN) {
    TCP_LOG(t, 2, "peer %02x%02x%02x%02x: %s; reading what it sent first",
            p->base.uuid[0], p->base.uuid[1], p->base.uuid[2], p->base.uuid[3],
            strerror(err));
    nxu_lock(&p->lock);
    p->dead = 1;
    p->fd = -1;
    p->error = err;
    nxu_unlock(&p->lock);
    tcp_conn_poll(p->conn, EPOLLIN);
    tcp_conn_read(p->conn);
    return;
  }
  tcp_peer_fail(t, p, strerror(err));
}

/* What the driver does for a peer on the attention stack. */
static void service(struct tcp *t, struct tcp_peer *p) {
  nxu_lock(&p->lock);
  int dead = p->dead, open = p->fd >= 0, queued = p->qhead != NULL;
  int error = p->error;
  nxu_unlock(&p->lock);
  if (dead) {
    /* A sender found the connection broken (or it failed before). */
    if (queued || p->conn != NULL || p->out != NULL ||
        !atomic_load(&p->reported))
      peer_write_failed(t, p, error);
    return;
  }
  if (open)
    tcp_peer_flush(t, p);
  else if (queued && p->conn == NULL && p->out == NULL)
    tcp_conn_start(t, p);
}

static void service_all(struct tcp *t) {
  if (atomic_load_explicit(&t->attn_head, memory_order_relaxed) == NULL)
    return;
  struct tcp_peer *p = atomic_exchange(&t->attn_head, NULL);
  while (p != NULL) {
    struct tcp_peer *next = p->attn_next;
    atomic_store(&p->attn, 0);
    service(t, p);
    t->events++;
    tcp_peer_release(t, p);
    p = next;
  }
}

/* The ops. */

static void tcp_finalize(void *state);

static int tcp_init(const struct nx_core_api *core, void **state, char *why,
                    size_t why_len) {
  struct tcp *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return NX_ENOMEM;
  t->core = core;
  t->peer_get = tcp_peer_get;
  t->peer_release = tcp_peer_release;
  t->peer_open = tcp_peer_open;
  t->peer_flush = tcp_peer_flush;
  t->peer_fail = tcp_peer_fail;
  size_t ms;
  int r = nxu_opt_size("NX_TCP_QUEUE_MAX", &t->queue_max, why, why_len);
  if (r == 0)
    r = nxu_opt_size("NX_TCP_HANDSHAKE_MS", &ms, why, why_len);
  if (r < 0) {
    free(t);
    return r;
  }
  t->handshake_ms = (unsigned)ms;
  t->stage = malloc(TCP_STAGE_SIZE);
  if (t->stage == NULL) {
    free(t);
    return NX_ENOMEM;
  }
  t->epfd = epoll_create1(EPOLL_CLOEXEC);
  t->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  t->timer_src.kind = TCP_SRC_TIMER;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &t->timer_src};
  if (t->epfd < 0 || t->timer_fd < 0 ||
      epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->timer_fd, &ev) < 0) {
    r = -errno;
    snprintf(why, why_len, "epoll or timerfd: %s", strerror(-r));
    if (t->epfd >= 0)
      close(t->epfd);
    if (t->timer_fd >= 0)
      close(t->timer_fd);
    free(t->stage);
    free(t);
    return tcp_status_to_nx(r);
  }
  pthread_mutex_init(&t->peers_lock, NULL);
  for (int family = AF_INET; family != 0;
       family = family == AF_INET ? AF_INET6 : 0) {
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0)
      close(fd);
    *(family == AF_INET ? &t->ipv4_ok : &t->ipv6_ok) = fd >= 0;
  }
  struct utsname u;
  snprintf(t->version, sizeof(t->version), "epoll, Linux %.40s",
           uname(&u) == 0 ? u.release : "?");
  r = tcp_listeners_open(t, why, why_len);
  if (r < 0) {
    tcp_finalize(t);
    return r;
  }
  *state = t;
  return 0;
}

static int queues_empty(struct tcp *t) {
  int empty = 1;
  pthread_mutex_lock(&t->peers_lock);
  for (struct nx_endpoint *l = nxu_uuid_first(&t->peers); l != NULL && empty;
       l = nxu_uuid_next(&t->peers, l)) {
    struct tcp_peer *p = peer_of(l);
    nxu_lock(&p->lock);
    empty = p->qhead == NULL || p->dead;
    nxu_unlock(&p->lock);
  }
  pthread_mutex_unlock(&t->peers_lock);
  return empty;
}

static int tcp_progress(void *state, nx_frame_batch_t *batch);
static int progress_round(struct tcp *t);

/* Runs after the core stopped its progress engine and disconnected every
 * endpoint. Frames still queued get up to TCP_LINGER_MS to leave (a last
 * reply is often sent just before nx_finalize); frames that arrive meanwhile
 * are dropped, peers that fail are not reported. Then everything closes. */
/* Before the sockets close: our side says it is done (FIN after what was
 * written), what peers sent meanwhile is read and dropped, and the kernel
 * gets a moment to have our last bytes acknowledged. A socket closed with
 * unread data sends a reset, and a reset can make the peer's kernel drop
 * what it had not read yet: the last frames (the ledger's final counts,
 * docs/design.md section 9) would be lost. At most TCP_LINGER_CLOSE_MS. */
#define TCP_LINGER_CLOSE_MS 100
static void linger_close(struct tcp *t) {
  for (struct tcp_conn *c = t->conns; c != NULL; c = c->next)
    if (c->fd >= 0)
      shutdown(c->fd, SHUT_WR);
  uint64_t deadline = nxu_now_ms() + TCP_LINGER_CLOSE_MS;
  for (;;) {
    int busy = 0;
    char sink[4096];
    for (struct tcp_conn *c = t->conns; c != NULL; c = c->next) {
      if (c->fd < 0)
        continue;
      while (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
      int unacked = 0;
      if (ioctl(c->fd, SIOCOUTQ, &unacked) == 0 && unacked > 0)
        busy = 1;
    }
    if (!busy || nxu_now_ms() >= deadline)
      break;
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
}

static void tcp_finalize(void *state) {
  struct tcp *t = state;
  t->finalizing = 1;
  uint64_t deadline = nxu_now_ms() + TCP_LINGER_MS;
  while (t->nlisten > 0 && !queues_empty(t) && nxu_now_ms() < deadline) {
    tcp_progress(t, NULL);
    struct pollfd pfd = {.fd = t->epfd, .events = POLLIN};
    poll(&pfd, 1, 10);
  }
  tcp_listeners_close(t);
  pthread_mutex_lock(&t->peers_lock);
  for (struct nx_endpoint *l = nxu_uuid_first(&t->peers); l != NULL;
       l = nxu_uuid_next(&t->peers, l)) {
    struct tcp_peer *p = peer_of(l);
    nxu_lock(&p->lock);
    nx_frame_t *q = mark_dead_locked(p);
    nxu_unlock(&p->lock);
    if (q != NULL)
      TCP_LOG(t, 1, "finalize: dropping frames that could not be sent");
    complete(t, q, NX_EFINALIZED);
  }
  pthread_mutex_unlock(&t->peers_lock);
  service_all(t); /* drops the references the stack holds */
  linger_close(t);
  /* Closing frees nothing yet, so the list stays walkable. */
  for (struct tcp_conn *c = t->conns; c != NULL; c = c->next)
    tcp_conn_close(c);
  tcp_conn_free_closed(t);
  close(t->timer_fd);
  close(t->epfd);
  struct nx_endpoint *l; /* only if the core kept an endpoint */
  while ((l = nxu_uuid_first(&t->peers)) != NULL) {
    struct tcp_peer *p = peer_of(l);
    nxu_uuid_remove(&t->peers, l);
    free(p);
  }
  pthread_mutex_destroy(&t->peers_lock);
  free(t->stage);
  free(t);
}

static int tcp_descriptor(void *state, struct nx_desc_buf *out) {
  tcp_desc_encode(state, out);
  return 0;
}

static int tcp_reachable(void *state, const struct nx_desc *peer) {
  struct tcp *t = state;
  struct tcp_desc d;
  if (tcp_desc_decode(t, peer, &d) < 0 ||
      memcmp(d.uuid, t->core->process_uuid, TCP_UUID_SIZE) == 0)
    return NX_EUNREACH; /* this process: the local module's */
  return TCP_COST;
}

static int tcp_connect(void *state, const struct nx_desc *peer,
                       struct nx_endpoint **ep) {
  struct tcp *t = state;
  struct tcp_desc d;
  if (tcp_desc_decode(t, peer, &d) < 0 ||
      memcmp(d.uuid, t->core->process_uuid, TCP_UUID_SIZE) == 0)
    return NX_EUNREACH;
  struct tcp_peer *p = tcp_peer_get(t, d.uuid);
  if (p == NULL)
    return NX_ENOMEM;
  nxu_lock(&p->lock);
  if (p->naddr == 0) {
    memcpy(p->addr, d.addr, sizeof(d.addr[0]) * (size_t)d.naddr);
    p->naddr = d.naddr;
  }
  nxu_unlock(&p->lock);
  *ep = &p->base;
  return 0;
}

static void tcp_disconnect(void *state, struct nx_endpoint *ep) {
  tcp_peer_release(state, peer_of(ep));
}

static int tcp_send(void *state, struct nx_endpoint *ep, nx_frame_t *frame,
                    unsigned flags) {
  (void)flags; /* NX_EAGAIN either way: the core decides whether to wait */
  struct tcp *t = state;
  struct tcp_peer *p = peer_of(ep);
  size_t total = frame_total(frame);
  frame->module_data[0] = NULL;
  frame->module_data[1] = NULL;
  nxu_lock(&p->lock);
  if (p->dead) {
    nxu_unlock(&p->lock);
    return NX_EPEERDEAD;
  }
  if (p->qhead == NULL && p->fd >= 0) {
    /* The fast path: straight to the socket. */
    size_t sent = 0;
    ssize_t w = 0;
    while (sent < total) {
      struct iovec iov[NX_FRAME_IOV_MAX];
      int n = frame_iov(frame, iov);
      w = write_iov(p->fd, iov, n);
      if (w <= 0)
        break;
      sent += (size_t)w;
      frame->module_data[1] = (void *)(uintptr_t)sent;
    }
    if (sent == total) {
      nxu_unlock(&p->lock);
      return NX_PROTOCOL_SENT; /* no send_done: the core takes it back */
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      /* No more writes; the driver fails the queue, closes the
       * connection and reports the peer. */
      p->dead = 1;
      p->fd = -1;
      p->error = errno;
      nxu_unlock(&p->lock);
      attend(t, p);
      return NX_EPEERDEAD;
    }
    enqueue_locked(p, frame, total - sent);
    nxu_unlock(&p->lock);
    attend(t, p); /* the driver polls for writable */
    return 0;
  }
  if (p->qhead != NULL && p->qbytes + total > t->queue_max) {
    nxu_unlock(&p->lock);
    return NX_EAGAIN;
  }
  int first = p->qhead == NULL;
  enqueue_locked(p, frame, total);
  nxu_unlock(&p->lock);
  /* Behind other frames, the driver is already at work on this peer. */
  if (first)
    attend(t, p);
  return 0;
}

/* The frames it reads go into the core's `batch` (t->batch, which
 * tcp_conn.c's deliver uses) until it returns. */
static int tcp_progress(void *state, nx_frame_batch_t *batch) {
  struct tcp *t = state;
  t->batch = batch;
  int n = progress_round(t);
  t->batch = NULL;
  return n;
}

/* A listening socket that reports an error or a hang-up (destroyed by
 * `ss -K -l`, say) accepts nothing again, and would report it at every
 * epoll_wait, level-triggered: the core could not sleep, and each round
 * logged it (334,426 lines in 1.5 s in tcp_listener_kill). It leaves the
 * epoll set and is closed,
 * said once; connections made already go on, and a peer that connects
 * later is refused there (docs/tcp.md, "Failure"). */
static void listener_failed(struct tcp_listener *l) {
  struct tcp *t = l->t;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  char text[64];
  tcp_addr_format(&l->addr, text, sizeof(text));
  TCP_LOG(t, 0,
          "the listening socket on %s failed (%s): no connection is "
          "accepted there any more",
          text, err != 0 ? strerror(err) : "hung up");
  epoll_ctl(t->epfd, EPOLL_CTL_DEL, l->fd, NULL);
  close(l->fd);
  l->fd = -1;
}

/* One epoll_wait that does not wait, and each socket's events handed to
 * the one handler of its kind: the listener accepts, the connection
 * writes, reads (tcp_conn.c's one frame reader) or runs its handshake.
 * Interest is changed with EPOLL_CTL_MOD when it changes, so the set the
 * core sleeps on is always complete. Read-ahead the delivery budget left
 * goes first: a connection holding some reads its socket only after it. */
static int progress_round(struct tcp *t) {
  t->events = 0;
  t->budget = TCP_DELIVER_MAX;
  service_all(t);
  if (t->nleft > 0)
    tcp_conn_read_left(t);
  /* While frames keep coming on one connection, read it straight away:
   * one readv instead of an epoll_wait and then the readv. Every
   * TCP_HOT_MAX-th round epoll runs anyway, for everything else. What it
   * buys: bench_rsr_tcp, 8 B in poll mode, 11.4-11.8 us a round trip with
   * it against 12.8-13.9 us without (docs/tcp.md). */
  if (t->hot != NULL && ++t->hot_streak < TCP_HOT_MAX) {
    tcp_conn_read_hot(t);
    return t->events;
  }
  t->hot_streak = 0;
  struct epoll_event ev[TCP_EVENTS_MAX];
  int n = epoll_wait(t->epfd, ev, TCP_EVENTS_MAX, 0);
  for (int i = 0; i < n; i++) {
    struct tcp_src *src = ev[i].data.ptr;
    if (src->kind == TCP_SRC_CONN) {
      tcp_conn_event((struct tcp_conn *)src, ev[i].events);
    } else if (src->kind == TCP_SRC_LISTENER) {
      if (ev[i].events & (EPOLLERR | EPOLLHUP))
        listener_failed((struct tcp_listener *)src);
      else
        tcp_conn_accept((struct tcp_listener *)src);
    } else {
      tcp_conn_expire(t);
    }
  }
  if (t->nclosed > 0)
    tcp_conn_free_closed(t);
  return t->events;
}

static int tcp_wait_fd(void *state) {
  struct tcp *t = state;
  return t->epfd;
}

static const char *tcp_backend_version(void *state) {
  struct tcp *t = state;
  return t->version;
}

NX_PROTOCOL_EXPORT const struct nx_protocol_ops nx_protocol_tcp = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .name = TCP_NAME,
    .wire_version = TCP_WIRE_VERSION,
    .cost = TCP_COST,
    .init = tcp_init,
    .finalize = tcp_finalize,
    .descriptor = tcp_descriptor,
    .reachable = tcp_reachable,
    .connect = tcp_connect,
    .disconnect = tcp_disconnect,
    .send = tcp_send,
    .progress = tcp_progress,
    .wait_fd = tcp_wait_fd,
    .backend_version = tcp_backend_version,
    .iov_max = NX_FRAME_IOV_MAX, /* sendmsg gathers */
};
