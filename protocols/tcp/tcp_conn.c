/* Connections of the tcp module: connecting and accepting, the handshake,
 * reading frames, timeouts and closing; all on the driver. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_conn.h"
#include "tcp_addr.h"
#include "nxu_key.h"
#include "nxu_time.h"

/* Who keeps which connection. Each pair of processes uses one connection,
 * opened when the first frame is to be sent. A client runs the handshake
 * (both sides prove the key, tcp.h) and waits for the answer before it
 * writes any frame; the server answers
 * ACCEPT only when the connection is to carry the pair's frames. When both
 * processes connect at once, the connection opened by the process with the
 * lower uuid wins: the server of the other one answers RETRY (the client
 * then waits for the winner's hello, at most the handshake timeout), or,
 * if it is the lower one itself, drops its own attempt and accepts. So no
 * frame ever travels on a connection that loses, and every frame from one
 * process to another goes, in order, through the one connection that
 * won. Losing that connection means the peer is dead: there is no
 * reconnection. */

static void on_deadline(struct tcp_conn *c);
static void read_frames(struct tcp_conn *c);

/* Deadlines. One timerfd in the epoll set, armed for the earliest
 * handshake deadline, so that a timeout fires while the core sleeps on
 * wait_fd; progress runs the deadlines that passed when it reports. */

static void timer_arm(struct tcp *t, uint64_t at) {
  if (t->timer_at != 0 && t->timer_at <= at)
    return;
  t->timer_at = at;
  struct itimerspec its = {
      .it_value = {.tv_sec = (time_t)(at / 1000),
                   .tv_nsec = (long)(at % 1000) * 1000000L}};
  if (timerfd_settime(t->timer_fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
    TCP_LOG(t, 0, "timerfd_settime: %s", strerror(errno));
}

void tcp_conn_expire(struct tcp *t) {
  uint64_t count;
  ssize_t r = read(t->timer_fd, &count, sizeof(count));
  (void)r; /* EAGAIN: fired and re-armed since */
  uint64_t now = nxu_now_ms();
  t->timer_at = 0;
  /* on_deadline may open connections (at the head: not visited) and close
   * them (freed only by tcp_conn_free_closed). */
  for (struct tcp_conn *c = t->conns; c != NULL; c = c->next)
    if (c->deadline != 0 && c->deadline <= now && c->state != CONN_CLOSING)
      on_deadline(c);
  uint64_t next = 0;
  for (struct tcp_conn *c = t->conns; c != NULL; c = c->next)
    if (c->deadline != 0 && c->state != CONN_CLOSING &&
        (next == 0 || c->deadline < next))
      next = c->deadline;
  if (next != 0)
    timer_arm(t, next);
}

void tcp_conn_free_closed(struct tcp *t) {
  struct tcp_conn *c = t->conns;
  while (t->nclosed > 0 && c != NULL) {
    struct tcp_conn *next = c->next;
    if (c->state == CONN_CLOSING) {
      if (c->prev != NULL)
        c->prev->next = c->next;
      else
        t->conns = c->next;
      if (c->next != NULL)
        c->next->prev = c->prev;
      t->nclosed--;
      if (c->peer != NULL)
        t->peer_release(t, c->peer);
      free(c);
    }
    c = next;
  }
}

/* A connection on socket `fd` (-1 for a placeholder), in the epoll set for
 * `events`, its handshake deadline set. On failure closes `fd` and returns
 * NULL. */
static struct tcp_conn *conn_new(struct tcp *t, int fd, int state,
                                 uint32_t events) {
  struct tcp_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  c->src.kind = TCP_SRC_CONN;
  c->t = t;
  c->fd = -1;
  c->state = state;
  if (fd >= 0) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
      TCP_LOG(t, 0, "epoll_ctl: %s", strerror(errno));
      close(fd);
      free(c);
      return NULL;
    }
    c->fd = fd;
    c->events = events;
  }
  c->next = t->conns;
  if (t->conns != NULL)
    t->conns->prev = c;
  t->conns = c;
  c->deadline = nxu_now_ms() + t->handshake_ms;
  timer_arm(t, c->deadline);
  return c;
}

void tcp_conn_close(struct tcp_conn *c) {
  if (c->state == CONN_CLOSING)
    return;
  struct tcp *t = c->t;
  if (c->state == CONN_WAIT_HELLO)
    t->handshaking--;
  int was_open = c->state == CONN_OPEN;
  c->state = CONN_CLOSING;
  c->deadline = 0;
  if (t->hot == c)
    t->hot = NULL;
  t->nclosed++;
  struct tcp_peer *p = c->peer;
  if (p != NULL && p->conn == c) {
    nxu_lock(&p->lock);
    p->fd = -1; /* senders stop writing before the socket goes */
    nxu_unlock(&p->lock);
    p->conn = NULL;
  }
  if (p != NULL && p->out == c)
    p->out = NULL;
  if (c->rx != NULL) {
    t->core->frame_free(c->rx);
    c->rx = NULL;
  }
  if (c->left != NULL) {
    free(c->left);
    c->left = NULL;
    t->nleft--;
  }
  if (c->fd >= 0) {
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    /* A FIN after what was written, before the close: should the close
     * reset the connection (bytes of the peer's unread), the peer then
     * still reads what we sent (see tcp_conn_event). */
    if (was_open)
      shutdown(c->fd, SHUT_WR);
    close(c->fd);
    c->fd = -1;
  }
  t->events++;
}

void tcp_conn_poll(struct tcp_conn *c, uint32_t events) {
  if (c->state == CONN_CLOSING || c->fd < 0 || c->events == events)
    return;
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(c->t->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0) {
    TCP_LOG(c->t, 0, "epoll_ctl: %s", strerror(errno));
    return;
  }
  c->events = events;
}

/* A peer sent something malformed before it had a peer object: count it,
 * drop it. */
static void drop_bad(struct tcp_conn *c, const char *why) {
  c->t->core->bad_peer(TCP_NAME, why);
  tcp_conn_close(c);
}

static void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void put_le16(uint8_t *p, unsigned v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static unsigned get_le16(const uint8_t *p) {
  return (unsigned)p[0] | (unsigned)p[1] << 8;
}

/* Connecting. */

/* Tries the peer's addresses from `index` on until a connect starts; fails
 * the peer when none is left. */
static void try_connect(struct tcp *t, struct tcp_peer *p, int index) {
  for (;; index++) {
    struct tcp_addr a;
    nxu_lock(&p->lock);
    int have = index < p->naddr && !p->dead;
    if (have)
      a = p->addr[index];
    nxu_unlock(&p->lock);
    if (!have) {
      t->peer_fail(t, p,
                   index == 0 ? "no address to connect to"
                              : "cannot connect to any of its addresses");
      return;
    }
    char text[64];
    tcp_addr_format(&a, text, sizeof(text));
    int fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      TCP_LOG(t, 1, "socket for %s: %s", text, strerror(errno));
      continue;
    }
    set_nodelay(fd);
    struct sockaddr_storage ss;
    socklen_t sl = tcp_addr_sockaddr(&a, &ss);
    if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
      TCP_LOG(t, 1, "connect to %s: %s", text, strerror(errno));
      close(fd);
      continue;
    }
    struct tcp_conn *c = conn_new(t, fd, CONN_CONNECTING, EPOLLOUT);
    if (c == NULL) {
      t->peer_fail(t, p, "out of memory");
      return;
    }
    atomic_fetch_add(&p->refs, 1);
    c->peer = p;
    c->next_addr = index + 1;
    p->out = c;
    TCP_LOG(t, 2, "connecting to %s", text);
    return;
  }
}

void tcp_conn_start(struct tcp *t, struct tcp_peer *p) { try_connect(t, p, 0); }

/* A connect attempt failed before the handshake: the next address. */
static void connect_failed(struct tcp_conn *c, const char *why) {
  struct tcp *t = c->t;
  struct tcp_peer *p = c->peer; /* c's reference lasts until it is freed */
  int next = c->next_addr;
  TCP_LOG(t, 1, "connect: %s", why);
  tcp_conn_close(c);
  try_connect(t, p, next);
}

static void write_hello(struct tcp_conn *c) {
  while (c->hs_out_off < c->hs_out_len) {
    ssize_t n =
        send(c->fd, c->hs_out + c->hs_out_off, c->hs_out_len - c->hs_out_off,
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      tcp_conn_poll(c, EPOLLIN | EPOLLOUT);
      return;
    }
    if (n < 0) {
      c->t->peer_fail(c->t, c->peer, strerror(errno));
      return;
    }
    c->hs_out_off += (size_t)n;
  }
  tcp_conn_poll(c, EPOLLIN);
}

static void connected(struct tcp_conn *c) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
    err = errno;
  if (err != 0) {
    connect_failed(c, strerror(err));
    return;
  }
  struct tcp *t = c->t;
  if (nxu_auth_nonce(c->nonce_c) < 0) {
    t->peer_fail(t, c->peer, "no random bytes for the handshake");
    return;
  }
  uint8_t *h = c->hs_out;
  memcpy(h, TCP_MAGIC, 4);
  put_le16(h + 4, TCP_HS_VERSION);
  memcpy(h + 6, t->core->process_uuid, TCP_UUID_SIZE);
  memcpy(h + 6 + TCP_UUID_SIZE, c->nonce_c, NXU_NONCE_SIZE);
  memcpy(c->ids, t->core->process_uuid, TCP_UUID_SIZE);
  memcpy(c->ids + TCP_UUID_SIZE, c->peer->base.uuid, TCP_UUID_SIZE);
  c->hs_out_len = TCP_HELLO_SIZE;
  c->hs_out_off = 0;
  c->state = CONN_HELLO_SENT;
  t->events++;
  write_hello(c);
}

/* The connection broke (EOF, reset, poll error), in any state. */
static void conn_lost(struct tcp_conn *c, const char *why) {
  struct tcp *t = c->t;
  char line[160];
  switch (c->state) {
  case CONN_WAIT_HELLO:
    if (c->hs_in_len > 0) {
      snprintf(line, sizeof(line), "connection lost during the handshake: %s",
               why);
      drop_bad(c, line);
    } else {
      TCP_LOG(t, 1, "a connection closed before its handshake: %s", why);
      tcp_conn_close(c);
    }
    return;
  case CONN_CONNECTING: connect_failed(c, why); return;
  case CONN_HELLO_SENT:
    snprintf(line, sizeof(line),
             "connection lost during the handshake (a wrong key, or a peer "
             "older than handshake version %u?): %s",
             TCP_HS_VERSION, why);
    t->peer_fail(t, c->peer, line);
    return;
  case CONN_OPEN:
    if (c->rx != NULL || c->hdr_len > 0)
      t->core->bad_peer(TCP_NAME, "connection lost in the middle of a frame");
    t->peer_fail(t, c->peer, why);
    return;
  default: tcp_conn_close(c);
  }
}

static void lost_errno(struct tcp_conn *c, ssize_t n) {
  conn_lost(c, n == 0 ? "closed the connection" : strerror(errno));
}

/* The handshake. */

/* Reads handshake bytes until `want` are in. Returns 1 when complete, 0
 * when more must come, -1 when the connection is gone. */
static int read_handshake(struct tcp_conn *c, size_t want) {
  ssize_t n;
  do
    n = recv(c->fd, c->hs_in + c->hs_in_len, want - c->hs_in_len, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return 0;
  if (n <= 0) {
    lost_errno(c, n);
    return -1;
  }
  c->t->events++;
  c->hs_in_len += (size_t)n;
  return c->hs_in_len == want;
}

/* Server: the client's hello is in. Checks it, picks ACCEPT, RETRY or
 * GONE (see the top of this file) and answers. */
/* Server: the first bytes of a hello name its version. One this side does
 * not speak is refused at once, with a line naming both; a version-1 peer
 * also gets the answer GONE in its own layout, so it reports a refusal
 * instead of waiting for its timeout. Returns 0 if the version is ours. */
static int hello_version(struct tcp_conn *c) {
  const uint8_t *h = c->hs_in;
  unsigned v = get_le16(h + 4);
  if (v == TCP_HS_VERSION)
    return 0;
  if (v == 1) {
    uint8_t a[TCP_ANSWER_SIZE];
    memcpy(a, TCP_MAGIC, 4);
    put_le16(a + 4, 1);
    put_le16(a + 6, TCP_ANSWER_GONE);
    memcpy(a + 8, c->t->core->process_uuid, TCP_UUID_SIZE);
    ssize_t n = send(c->fd, a, sizeof(a), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n; /* best effort: the peer is refused either way */
  }
  char line[128];
  snprintf(line, sizeof(line),
           "handshake: the peer speaks version %u, this nexus %u (it sends "
           "no proof of the key): refused; update the older side",
           v, TCP_HS_VERSION);
  drop_bad(c, line);
  return -1;
}

/* Server: the client's hello is in (version checked). Sends the challenge:
 * our nonce and our proof over both nonces. */
static void hello_received(struct tcp_conn *c) {
  struct tcp *t = c->t;
  const uint8_t *uuid = c->hs_in + 6;
  if (memcmp(uuid, t->core->process_uuid, TCP_UUID_SIZE) == 0) {
    drop_bad(c, "handshake: the peer claims this process's identity");
    return;
  }
  memcpy(c->ids, uuid, TCP_UUID_SIZE);
  memcpy(c->ids + TCP_UUID_SIZE, t->core->process_uuid, TCP_UUID_SIZE);
  memcpy(c->nonce_c, c->hs_in + 6 + TCP_UUID_SIZE, NXU_NONCE_SIZE);
  uint8_t m[TCP_CHALLENGE_SIZE];
  memcpy(m, TCP_MAGIC, 4);
  put_le16(m + 4, TCP_HS_VERSION);
  memcpy(m + 6, t->core->process_uuid, TCP_UUID_SIZE);
  if (nxu_auth_nonce(c->nonce_s) < 0 ||
      nxu_auth_mac(t->core->key, NX_KEY_SIZE, "server", c->nonce_c, c->nonce_s,
                   c->ids, sizeof(c->ids),
                   m + 6 + TCP_UUID_SIZE + NXU_NONCE_SIZE) < 0) {
    TCP_LOG(t, 0, "cannot compute a handshake proof");
    tcp_conn_close(c);
    return;
  }
  memcpy(m + 6 + TCP_UUID_SIZE, c->nonce_s, NXU_NONCE_SIZE);
  /* A new socket's buffer always takes the 86 bytes at once. */
  ssize_t n = send(c->fd, m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != (ssize_t)sizeof(m)) {
    TCP_LOG(t, 1, "cannot send a handshake challenge: %s",
            n < 0 ? strerror(errno) : "short write");
    tcp_conn_close(c);
    return;
  }
  c->hs_proved = 1;
  c->hs_in_len = 0;
}

/* Server: the client's proof is in. Checks it, picks ACCEPT, RETRY or
 * GONE (see the top of this file) and answers. */
static void proof_received(struct tcp_conn *c) {
  struct tcp *t = c->t;
  const uint8_t *uuid = c->ids;
  /* Over our fresh nonce: a proof recorded from another handshake fails. */
  if (!nxu_auth_check(t->core->key, NX_KEY_SIZE, "client", c->nonce_c,
                      c->nonce_s, c->ids, sizeof(c->ids), c->hs_in)) {
    drop_bad(c, "handshake: wrong key (the peer's proof does not match)");
    return;
  }
  struct tcp_peer *p = t->peer_get(t, uuid);
  if (p == NULL) {
    tcp_conn_close(c);
    return;
  }
  c->peer = p;
  nxu_lock(&p->lock);
  int dead = p->dead;
  nxu_unlock(&p->lock);
  unsigned status = TCP_ANSWER_ACCEPT;
  if (dead || p->conn != NULL)
    status = TCP_ANSWER_GONE;
  else if (p->out != NULL &&
           memcmp(uuid, t->core->process_uuid, TCP_UUID_SIZE) > 0)
    status = TCP_ANSWER_RETRY; /* ours, opened by the lower uuid, wins */
  uint8_t a[TCP_ANSWER_SIZE];
  memcpy(a, TCP_MAGIC, 4);
  put_le16(a + 4, TCP_HS_VERSION);
  put_le16(a + 6, status);
  memcpy(a + 8, t->core->process_uuid, TCP_UUID_SIZE);
  /* A new socket's buffer always takes the 24 bytes at once. */
  ssize_t n = send(c->fd, a, sizeof(a), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != (ssize_t)sizeof(a)) {
    TCP_LOG(t, 1, "cannot answer a handshake: %s",
            n < 0 ? strerror(errno) : "short write");
    tcp_conn_close(c);
    return;
  }
  if (status != TCP_ANSWER_ACCEPT) {
    TCP_LOG(t, 1, "refused a connection from a peer (%s)",
            status == TCP_ANSWER_RETRY
                ? "both connected at once: ours wins"
                : "it counts as dead here, or is connected already");
    tcp_conn_close(c);
    return;
  }
  if (p->out != NULL) {
    TCP_LOG(t, 1, "both connected at once: the peer's connection wins");
    tcp_conn_close(p->out); /* our attempt carried nothing */
  }
  TCP_LOG(t, 2, "accepted a connection from peer %02x%02x%02x%02x", uuid[0],
          uuid[1], uuid[2], uuid[3]);
  t->handshaking--;
  t->peer_open(t, p, c);
}

/* Client: the server's challenge is in. Checks its proof, then sends
 * ours. Returns 0 when the proof went out. */
static int challenge_received(struct tcp_conn *c) {
  struct tcp *t = c->t;
  struct tcp_peer *p = c->peer;
  const uint8_t *m = c->hs_in;
  if (memcmp(m + 6, p->base.uuid, TCP_UUID_SIZE) != 0) {
    t->peer_fail(t, p, "another process answers at its address");
    return -1;
  }
  memcpy(c->nonce_s, m + 6 + TCP_UUID_SIZE, NXU_NONCE_SIZE);
  if (!nxu_auth_check(t->core->key, NX_KEY_SIZE, "server", c->nonce_c,
                      c->nonce_s, c->ids, sizeof(c->ids),
                      m + 6 + TCP_UUID_SIZE + NXU_NONCE_SIZE)) {
    t->core->bad_peer(TCP_NAME, "handshake: the peer does not hold the key");
    t->peer_fail(t, p,
                 "handshake: wrong key (the peer's proof does not match)");
    return -1;
  }
  uint8_t proof[TCP_PROOF_SIZE];
  if (nxu_auth_mac(t->core->key, NX_KEY_SIZE, "client", c->nonce_c, c->nonce_s,
                   c->ids, sizeof(c->ids), proof) < 0) {
    t->peer_fail(t, p, "cannot compute a handshake proof");
    return -1;
  }
  /* The hello left long ago: the socket buffer takes 32 bytes at once. */
  ssize_t n = send(c->fd, proof, sizeof(proof), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n != (ssize_t)sizeof(proof)) {
    t->peer_fail(t, p, n < 0 ? strerror(errno) : "short write");
    return -1;
  }
  c->hs_proved = 1;
  c->hs_in_len = 0;
  return 0;
}

/* Client: the server's answer is in. */
static void answer_received(struct tcp_conn *c) {
  struct tcp *t = c->t;
  struct tcp_peer *p = c->peer;
  const uint8_t *a = c->hs_in;
  if (memcmp(a, TCP_MAGIC, 4) != 0 || get_le16(a + 4) != TCP_HS_VERSION ||
      get_le16(a + 6) > TCP_ANSWER_GONE) {
    t->core->bad_peer(TCP_NAME, "malformed handshake answer");
    t->peer_fail(t, p, "malformed handshake answer");
    return;
  }
  if (memcmp(a + 8, p->base.uuid, TCP_UUID_SIZE) != 0) {
    t->peer_fail(t, p, "another process answers at its address");
    return;
  }
  switch (get_le16(a + 6)) {
  case TCP_ANSWER_ACCEPT:
    TCP_LOG(t, 2, "connected to peer %02x%02x%02x%02x", p->base.uuid[0],
            p->base.uuid[1], p->base.uuid[2], p->base.uuid[3]);
    p->out = NULL;
    if (p->conn != NULL) {
      tcp_conn_close(c); /* cannot happen with a peer that follows the rules */
      return;
    }
    t->peer_open(t, p, c);
    return;
  case TCP_ANSWER_RETRY: {
    tcp_conn_close(c);
    if (p->conn != NULL)
      return; /* its connection is here already */
    struct tcp_conn *w = conn_new(t, -1, CONN_WAIT_PEER, 0);
    if (w == NULL) {
      t->peer_fail(t, p, "out of memory");
      return;
    }
    atomic_fetch_add(&p->refs, 1);
    w->peer = p;
    p->out = w;
    return;
  }
  default: t->peer_fail(t, p, "the peer refused the connection");
  }
}

static void read_hello(struct tcp_conn *c) {
  if (c->hs_proved) {
    if (read_handshake(c, TCP_PROOF_SIZE) <= 0)
      return;
    proof_received(c);
    if (c->state == CONN_OPEN)
      read_frames(c); /* frames may follow the proof at once */
    return;
  }
  /* Up to the version first: an older peer's hello is shorter. */
  size_t want = c->hs_in_len < TCP_HS_HEAD ? TCP_HS_HEAD : TCP_HELLO_SIZE;
  int r = read_handshake(c, want);
  if (r < 0)
    return;
  /* Garbage shows in the first bytes: no need to wait for more. */
  if (c->hs_in_len >= 4 && memcmp(c->hs_in, TCP_MAGIC, 4) != 0) {
    drop_bad(c, "handshake: bad magic");
    return;
  }
  if (r == 0)
    return;
  if (want == TCP_HS_HEAD) {
    if (hello_version(c) == 0)
      read_hello(c); /* the rest of it may be in already */
    return;
  }
  hello_received(c);
  if (c->state == CONN_WAIT_HELLO)
    read_hello(c); /* the proof may be in already */
}

static void read_answer(struct tcp_conn *c) {
  if (!c->hs_proved) {
    size_t want = c->hs_in_len < TCP_HS_HEAD ? TCP_HS_HEAD : TCP_CHALLENGE_SIZE;
    int r = read_handshake(c, want);
    if (r <= 0)
      return;
    if (want == TCP_HS_HEAD) {
      if (memcmp(c->hs_in, TCP_MAGIC, 4) != 0 ||
          get_le16(c->hs_in + 4) != TCP_HS_VERSION) {
        char line[128];
        snprintf(line, sizeof(line),
                 "malformed handshake, or a peer speaking another version "
                 "(%u; this nexus speaks %u)",
                 get_le16(c->hs_in + 4), TCP_HS_VERSION);
        c->t->core->bad_peer(TCP_NAME, line);
        c->t->peer_fail(c->t, c->peer, line);
        return;
      }
      read_answer(c);
      return;
    }
    if (challenge_received(c) == 0)
      read_answer(c); /* the answer may be in already */
    return;
  }
  if (read_handshake(c, TCP_ANSWER_SIZE) <= 0)
    return;
  answer_received(c);
  if (c->state == CONN_OPEN)
    read_frames(c);
}

/* Frames. The bytes of the header or payload being read go straight to
 * where they belong (the payload into the frame frame_alloc returned);
 * the same readv also takes up to TCP_STAGE_SIZE bytes that follow, which
 * saves a system call per small frame; those are copied out before the
 * next read. */

static void deliver(struct tcp_conn *c, nx_frame_t *f) {
  if (c->t->finalizing) {
    c->t->core->frame_free(f); /* the core no longer dispatches */
    return;
  }
  nx_frame_batch_add(c->t->core, c->t->batch, f);
  c->t->events++;
  c->t->budget--;
  c->t->hot = c;
}

void tcp_conn_read(struct tcp_conn *c) {
  if (c->state == CONN_OPEN)
    read_frames(c);
}

int tcp_conn_read_hot(struct tcp *t) {
  struct tcp_conn *c = t->hot;
  if (c == NULL || c->state != CONN_OPEN)
    return 0;
  int before = t->events;
  read_frames(c);
  if (t->events > before) {
    t->hot_idle = 0;
    return 1;
  }
  /* Quiet for a while: back to epoll alone, so that a driver woken for
   * another socket does not read this one first. */
  if (++t->hot_idle >= TCP_HOT_IDLE) {
    t->hot = NULL;
    t->hot_idle = 0;
  }
  return 0;
}

static int header_done(struct tcp_conn *c) {
  struct tcp *t = c->t;
  nx_frame_t *f;
  c->hdr_len = 0;
  /* A frame with a lead comes in two steps: the lead, then the tail
   * where the receiving program says (frame_place). */
  int r = t->core->frame_alloc_lead(c->hdr, &f);
  if (r < 0) {
    /* NX_EPROTO is counted by the core already: no bad_peer. */
    t->peer_fail(t, c->peer,
                 r == NX_EPROTO ? "sent a malformed frame header"
                                : "no memory for a frame it sent");
    return -1;
  }
  if (f->iov[1].iov_len == 0) {
    deliver(c, f);
    return 0;
  }
  c->rx = f;
  c->rx_off = 0;
  c->rx_lead = f->iov[1].iov_len + NX_FRAME_HDR_SIZE < f->len;
  return 0;
}

/* The lead is in: the stream goes on into the tail's place. */
static int lead_done(struct tcp_conn *c) {
  c->rx_lead = 0;
  c->rx_off = 0;
  if (c->t->core->frame_place(c->rx) < 0) {
    c->t->peer_fail(c->t, c->peer, "no memory for a frame it sent");
    return -1;
  }
  return 0;
}

/* `n` more bytes of the current header or payload are in place. */
static int rx_advance(struct tcp_conn *c, size_t n) {
  if (n == 0)
    return 0;
  if (c->rx == NULL) {
    c->hdr_len += n;
    return c->hdr_len == NX_FRAME_HDR_SIZE ? header_done(c) : 0;
  }
  c->rx_off += n;
  if (c->rx_off == c->rx->iov[1].iov_len) {
    if (c->rx_lead)
      return lead_done(c);
    nx_frame_t *f = c->rx;
    c->rx = NULL;
    deliver(c, f);
  }
  return 0;
}

/* Consumes read-ahead bytes; stops at a frame boundary once the budget is
 * spent. Returns the bytes used, or -1 when the connection is gone. */
static ssize_t rx_copy(struct tcp_conn *c, const uint8_t *p, size_t n) {
  size_t used = 0;
  while (used < n) {
    if (c->t->budget <= 0 && c->rx == NULL && c->hdr_len == 0)
      break;
    size_t k;
    if (c->rx == NULL) {
      k = NX_FRAME_HDR_SIZE - c->hdr_len;
      k = k < n - used ? k : n - used;
      memcpy(c->hdr + c->hdr_len, p + used, k);
    } else {
      k = c->rx->iov[1].iov_len - c->rx_off;
      k = k < n - used ? k : n - used;
      memcpy((uint8_t *)c->rx->iov[1].iov_base + c->rx_off, p + used, k);
    }
    used += k;
    if (rx_advance(c, k) < 0)
      return -1;
  }
  return (ssize_t)used;
}

/* Keeps read-ahead the budget did not allow to deliver. Returns -1 (and
 * drops the peer) when out of memory. */
static int keep_left(struct tcp_conn *c, const uint8_t *p, size_t n) {
  uint8_t *copy = malloc(n);
  if (copy == NULL) {
    c->t->peer_fail(c->t, c->peer, "no memory for read-ahead");
    return -1;
  }
  memcpy(copy, p, n);
  c->left = copy;
  c->left_len = n;
  c->left_off = 0;
  c->t->nleft++;
  TCP_LOG(c->t, 2, "delivery budget spent: %zu bytes wait", n);
  return 0;
}

/* Delivers what is left of the read-ahead. Returns 1 when all of it is
 * consumed (the socket may be read), 0 when the budget ran out, -1 when
 * the connection is gone. */
static int consume_left(struct tcp_conn *c) {
  ssize_t used = rx_copy(c, c->left + c->left_off, c->left_len - c->left_off);
  if (used < 0)
    return -1;
  c->left_off += (size_t)used;
  if (c->left_off < c->left_len)
    return 0;
  free(c->left);
  c->left = NULL;
  c->t->nleft--;
  return 1;
}

void tcp_conn_read_left(struct tcp *t) {
  for (struct tcp_conn *c = t->conns; c != NULL && t->nleft > 0; c = c->next)
    if (c->left != NULL && c->state == CONN_OPEN && t->budget > 0)
      read_frames(c);
}

static void read_frames(struct tcp_conn *c) {
  struct tcp *t = c->t;
  if (c->left != NULL && consume_left(c) <= 0)
    return;
  for (int round = 0; round < TCP_READ_ROUNDS && t->budget > 0; round++) {
    struct iovec iov[2];
    if (c->rx == NULL) {
      iov[0].iov_base = c->hdr + c->hdr_len;
      iov[0].iov_len = NX_FRAME_HDR_SIZE - c->hdr_len;
    } else {
      iov[0].iov_base = (uint8_t *)c->rx->iov[1].iov_base + c->rx_off;
      iov[0].iov_len = c->rx->iov[1].iov_len - c->rx_off;
    }
    iov[1].iov_base = t->stage;
    iov[1].iov_len = TCP_STAGE_SIZE;
    ssize_t n;
    do
      n = readv(c->fd, iov, 2);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      lost_errno(c, n);
      return;
    }
    t->events++;
    size_t direct = (size_t)n < iov[0].iov_len ? (size_t)n : iov[0].iov_len;
    if (rx_advance(c, direct) < 0)
      return;
    size_t ahead = (size_t)n - direct;
    if (ahead > 0) {
      ssize_t used = rx_copy(c, t->stage, ahead);
      if (used < 0)
        return;
      if ((size_t)used < ahead) {
        keep_left(c, t->stage + used, ahead - (size_t)used);
        return;
      }
    }
    if ((size_t)n < iov[0].iov_len + iov[1].iov_len)
      return; /* the socket is drained: no need to ask again */
  }
}

/* Events. */

void tcp_conn_event(struct tcp_conn *c, uint32_t events) {
  if (c->state == CONN_CLOSING)
    return; /* closed by an earlier event of the same epoll_wait */
  if (events & EPOLLERR) {
    /* A socket error (a refused connect, a reset): find out which. */
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    /* EPIPE: the reset came after the peer's FIN. A process that ends
     * says it is done (FIN) and then resets its connections that still
     * hold bytes of ours unread; what it sent before (a reply, its final
     * counts, docs/design.md section 9) lies in the socket ahead of the
     * FIN, and is read and delivered first: the kernel gives those
     * bytes, then EOF (the error was taken above), which ends the read
     * the way a close does. A reset without a FIN (ECONNRESET) is a
     * broken connection: its unread tail belongs to a route that failed,
     * and the peer's later RSRs take the next route, which the tail
     * must not overtake; it is dropped, and what it carried is reported
     * (docs/design.md section 6, "Falling back"). */
    if (err == EPIPE && c->state == CONN_OPEN) {
      read_frames(c);
      return;
    }
    conn_lost(c, strerror(err != 0 ? err : EIO));
    return;
  }
  if (events & EPOLLOUT) {
    if (c->state == CONN_CONNECTING)
      connected(c);
    else if (c->state == CONN_HELLO_SENT)
      write_hello(c);
    else if (c->state == CONN_OPEN)
      c->t->peer_flush(c->t, c->peer);
  }
  /* A hang-up reads as EOF, after whatever the peer sent before it. */
  if (c->state == CONN_CLOSING || !(events & (EPOLLIN | EPOLLHUP)))
    return;
  switch (c->state) {
  case CONN_WAIT_HELLO: read_hello(c); break;
  case CONN_HELLO_SENT: read_answer(c); break;
  case CONN_OPEN: read_frames(c); break;
  case CONN_CONNECTING: connect_failed(c, "closed while connecting"); break;
  default: break;
  }
}

static void on_deadline(struct tcp_conn *c) {
  struct tcp *t = c->t;
  c->deadline = 0;
  char line[128];
  t->events++;
  switch (c->state) {
  case CONN_WAIT_HELLO:
    snprintf(line, sizeof(line), "no handshake within %u ms", t->handshake_ms);
    drop_bad(c, line);
    return;
  case CONN_CONNECTING: connect_failed(c, "timed out"); return;
  case CONN_HELLO_SENT:
    snprintf(line, sizeof(line), "no answer to the handshake within %u ms",
             t->handshake_ms);
    t->peer_fail(t, c->peer, line);
    return;
  case CONN_WAIT_PEER:
    t->peer_fail(t, c->peer,
                 "refused our connection and did not open its own in time");
    return;
  default: return;
  }
}

void tcp_conn_accept(struct tcp_listener *l) {
  struct tcp *t = l->t;
  for (int i = 0; i < 32; i++) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        TCP_LOG(t, 1, "accept: %s", strerror(errno));
      return;
    }
    t->events++;
    if (t->handshaking >= TCP_MAX_HANDSHAKING) {
      TCP_LOG(t, 1, "%d connections in their handshake: closing a new one",
              t->handshaking);
      close(fd);
      continue;
    }
    set_nodelay(fd);
    struct tcp_conn *c = conn_new(t, fd, CONN_WAIT_HELLO, EPOLLIN);
    if (c == NULL)
      continue;
    t->handshaking++;
  }
}
