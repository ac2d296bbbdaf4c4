/* Attach: a running computation accepts programs started separately (on this
 * host or another); they join it through a URL carrying its address and key. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "processes/attach.h"
#include "processes/chan.h"
#include "processes/uvloop.h"
#include "modules/dlist.h"
#include "nxu_auth.h"
#include "nxu_key.h"
#include "nxu_time.h"

/* The exchange, on a TCP connection to the listener. Both sides prove they
 * hold the key (nxu_auth.h) over both sides' fresh nonces; the key itself
 * never crosses the wire, and a recorded exchange replayed fails on the
 * listener's new nonce:
 *   attacher -> listener: "NXA2", attacher nonce
 *   listener -> attacher: "NXA2", listener nonce, listener proof
 *   attacher -> listener: attacher proof
 *   listener -> attacher: "NXA2", u32 length, one peer entry (ctl.h
 *                         layout: context, address, descriptor list)
 * then the listener closes. A wrong magic or proof is refused and counted;
 * "NXA1" (the old exchange, which sent the key) is refused with a line that
 * says so. */

#define MAGIC "NXA2"
#define MAGIC_V1 "NXA1"
#define AUTH_CTX "attach"
#define IO_TIMEOUT_MS 5000
/* Connections served at once; the rest wait in the kernel's backlog. */
#define MAX_CONNS 64
/* How long the listener rests when accept4 fails for want of descriptors
 * or memory (the socket stays readable: without a rest, the loop spins). */
#define REST_MS 100

/* `attach_lock` guards listen_fd and url_text, for nx_attach_listen and
 * nxi_attach_finalize. */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1;
static char url_text[128];
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The attacher's side (nx_attach), on the calling thread: reads or writes
 * exactly `len` bytes (a step of the exchange) within IO_TIMEOUT_MS of
 * the call, however the bytes come. */
static int io_all(int fd, void *buf, size_t len, int writing) {
  uint8_t *p = buf;
  uint64_t deadline = nxu_now_ms() + IO_TIMEOUT_MS;
  while (len > 0) {
    uint64_t now = nxu_now_ms();
    if (now >= deadline)
      return NX_ETIMEDOUT;
    struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int r = poll(&pf, 1, (int)(deadline - now));
    if (r == 0)
      return NX_ETIMEDOUT;
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return NX_EIO;
    }
    ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0)
      return NX_ECONNRESET;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
        continue;
      return NX_ECONNRESET;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The listener runs on the process layer's loop (uvloop.c): a uv_poll on
 * its socket, and per connection a uv_poll and a uv_timer. Each step of
 * the exchange (bytes to read, bytes to write) has IO_TIMEOUT_MS from its
 * start, and resumes where the last read or write stopped: a peer that
 * stalls mid-message holds nobody up, the loop serving every connection
 * at once. attach.c owns the descriptors (socket, accept4, close) and
 * closes each after the loop closed the handle watching it; libuv only
 * watches them (a libuv stream closes its descriptor with a raw system
 * call that ThreadSanitizer does not see). */
enum step { READ_MAGIC, READ_NONCE, WRITE_CHALLENGE, READ_PROOF, WRITE_ANSWER };

struct conn {
  struct conn *next;
  int fd;
  uv_poll_t poll;
  uv_timer_t timer; /* the step's deadline */
  enum step step;
  size_t done; /* the step's bytes read or written so far */
  int closing; /* handles not yet closed */
  uint8_t hello[4 + NXU_NONCE_SIZE]; /* "NXA2", the attacher's nonce */
  uint8_t ch[4 + NXU_NONCE_SIZE + NXU_MAC_SIZE]; /* "NXA2", ours, our proof */
  uint8_t proof[NXU_MAC_SIZE];                   /* the attacher's */
  uint8_t *answer; /* "NXA2", u32 length, our peer entry */
  size_t answer_len;
};

/* The loop's, but `closed`, which nxi_uvloop_set writes. */
static struct {
  int fd; /* listen_fd, once the loop watches it */
  uv_poll_t poll;
  uv_timer_t rest;
  int resting; /* accept4 failed: the listener rests REST_MS */
  int ending;  /* listen_end: it is watched no more */
  struct conn *conns;
  int nconns;
  int handles; /* not yet closed, the connections' too */
  int closed;  /* every handle closed (listen_end) */
} lst;

/* A process forked (without exec) from a listener: the loop that served
 * it is its parent's (uvloop.c forgets it), and so are the connections,
 * whose handles are that loop's (their memory and close-on-exec
 * descriptors are left alone). Its copy of the listening socket is
 * closed: it would keep the port listening after the parent's
 * nx_finalize. It listens anew if it asks. */
static void forget_listener(void) {
  pthread_mutex_init(&attach_lock, NULL);
  if (listen_fd >= 0)
    close(listen_fd);
  listen_fd = -1;
  memset(&lst, 0, sizeof(lst));
}

static void register_fork(void) { pthread_atfork(NULL, NULL, forget_listener); }

static void refuse(const char *why) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(0, "attach", "refused a connection: %s", why);
}

static void on_listen(uv_poll_t *h, int status, int events);

/* The listener is watched unless it rests, MAX_CONNS connections are
 * served, or it ends. */
static void listen_watch(void) {
  if (lst.ending)
    return;
  if (!lst.resting && lst.nconns < MAX_CONNS)
    uv_poll_start(&lst.poll, UV_READABLE, on_listen);
  else
    uv_poll_stop(&lst.poll);
}

/* A handle's close came back: once the last has, nxi_attach_finalize
 * goes on. */
static void one_closed(void) {
  if (--lst.handles == 0)
    nxi_uvloop_set(&lst.closed, 1);
}

static void handle_closed(uv_handle_t *h) {
  (void)h;
  one_closed();
}

static void conn_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  if (--c->closing == 0) {
    close(c->fd); /* no handle watches it now */
    free(c->answer);
    free(c);
  }
  one_closed();
}

/* The connection ends (its exchange is over, refused, timed out or
 * broken): its handles close, then its socket. */
static void conn_end(struct conn *c) {
  if (c->closing > 0)
    return;
  for (struct conn **pp = &lst.conns; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  lst.nconns--;
  c->closing = 2;
  uv_close((uv_handle_t *)&c->poll, conn_closed);
  uv_close((uv_handle_t *)&c->timer, conn_closed);
  listen_watch(); /* one more may come */
}

static void on_late(uv_timer_t *t) { conn_end(t->data); }

/* The current step's bytes: where they go or come from, and how many. */
static uint8_t *step_bytes(struct conn *c, size_t *len) {
  switch (c->step) {
  case READ_MAGIC: *len = 4; return c->hello;
  case READ_NONCE: *len = NXU_NONCE_SIZE; return c->hello + 4;
  case WRITE_CHALLENGE: *len = sizeof(c->ch); return c->ch;
  case READ_PROOF: *len = sizeof(c->proof); return c->proof;
  default: *len = c->answer_len; return c->answer;
  }
}

/* The current step's bytes are all in (or out): 0 once the next step is
 * set, 1 when the exchange is over (done or refused), or a negative code. */
static int step_over(struct conn *c) {
  const uint8_t *nc = c->hello + 4, *ns = c->ch + 4;
  switch (c->step) {
  case READ_MAGIC:
    if (memcmp(c->hello, MAGIC_V1, 4) == 0) {
      refuse("an older nexus (NXA1, which sends the key in clear); this one "
             "speaks NXA2: update the attaching program");
      return 1;
    }
    if (memcmp(c->hello, MAGIC, 4) != 0) {
      refuse("wrong magic");
      return 1;
    }
    c->step = READ_NONCE;
    return 0;
  case READ_NONCE:
    memcpy(c->ch, MAGIC, 4);
    if (nxu_auth_nonce(c->ch + 4) < 0 ||
        nxu_auth_mac(nxi_rt.key, NX_KEY_SIZE, "server", nc, ns,
                     (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                     c->ch + 4 + NXU_NONCE_SIZE) < 0)
      return NX_EIO;
    c->step = WRITE_CHALLENGE;
    return 0;
  case WRITE_CHALLENGE:
    /* It may go away now (or give up on our proof: its key differs). */
    c->step = READ_PROOF;
    return 0;
  case READ_PROOF: {
    if (!nxu_auth_check(nxi_rt.key, NX_KEY_SIZE, "client", nc, ns,
                        (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                        c->proof)) {
      refuse("wrong key (the attacher's proof does not match)");
      return 1;
    }
    /* Room for a descriptor more: a gateway may be added meanwhile. */
    size_t cap =
        8 + NXI_CTL_ENTRY_HEAD + nxi_rt.self_dl->len + NXI_DESC_MAX_LEN;
    c->answer = malloc(cap);
    if (c->answer == NULL)
      return NX_ENOMEM;
    memcpy(c->answer, MAGIC, 4);
    size_t len = nxi_chan_self_entry(c->answer + 8, cap - 8);
    nxu_le32(c->answer + 4, (uint32_t)len);
    c->answer_len = 8 + len;
    c->step = WRITE_ANSWER;
    return 0;
  }
  default: return 1; /* the answer is out */
  }
}

static void on_conn(uv_poll_t *h, int status, int events);

/* Goes on with the exchange as far as the socket allows without waiting,
 * and watches it for the rest. */
static void conn_run(struct conn *c) {
  for (;;) {
    size_t len;
    uint8_t *p = step_bytes(c, &len);
    int writing = c->step == WRITE_CHALLENGE || c->step == WRITE_ANSWER;
    while (c->done < len) {
      ssize_t n = writing
                      ? send(c->fd, p + c->done, len - c->done,
                             MSG_NOSIGNAL | MSG_DONTWAIT)
                      : recv(c->fd, p + c->done, len - c->done, MSG_DONTWAIT);
      if (n > 0) {
        c->done += (size_t)n;
        continue;
      }
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        uv_poll_start(&c->poll, writing ? UV_WRITABLE : UV_READABLE, on_conn);
        return;
      }
      conn_end(c); /* it closed, or the connection broke */
      return;
    }
    if (step_over(c) != 0) {
      conn_end(c);
      return;
    }
    c->done = 0;
    uv_timer_start(&c->timer, on_late, IO_TIMEOUT_MS, 0);
  }
}

static void on_conn(uv_poll_t *h, int status, int events) {
  (void)events;
  if (status < 0)
    conn_end(h->data);
  else
    conn_run(h->data);
}

/* A new connection, `fd`: its exchange begins. */
static void conn_begin(int fd) {
  uv_loop_t *loop = nxi_uvloop();
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL || uv_poll_init_socket(loop, &c->poll, fd) != 0) {
    free(c);
    close(fd);
    return;
  }
  uv_timer_init(loop, &c->timer);
  c->fd = fd;
  c->poll.data = c->timer.data = c;
  c->step = READ_MAGIC;
  c->next = lst.conns;
  lst.conns = c;
  lst.nconns++;
  lst.handles += 2;
  uv_timer_start(&c->timer, on_late, IO_TIMEOUT_MS, 0);
  conn_run(c);
}

static void on_rest(uv_timer_t *t) {
  (void)t;
  lst.resting = 0;
  listen_watch();
}

/* The listener is readable: every connection waiting is accepted, up to
 * MAX_CONNS served at once. */
static void on_listen(uv_poll_t *h, int status, int events) {
  (void)h;
  (void)events;
  int fd, rest = status != 0;
  while (!rest && lst.nconns < MAX_CONNS) {
    if ((fd = nxi_chan_accept(lst.fd, &rest)) >= 0)
      conn_begin(fd);
    else if (!rest)
      return; /* none waits */
  }
  if (lst.nconns < MAX_CONNS) {
    lst.resting = 1;
    uv_timer_start(&lst.rest, on_rest, REST_MS, 0);
  }
  listen_watch();
}

/* nxi_uvloop_call: the loop watches the listening socket `*arg`, and sets
 * *arg to 0, or to NX_EAGAIN when it cannot. */
static void listen_begin(void *arg) {
  int *r = arg;
  uv_loop_t *loop = nxi_uvloop();
  memset(&lst, 0, sizeof(lst));
  if (uv_poll_init_socket(loop, &lst.poll, *r) != 0) {
    *r = NX_EAGAIN;
    return;
  }
  uv_timer_init(loop, &lst.rest);
  lst.fd = *r;
  lst.handles = 2;
  listen_watch();
  *r = 0;
}

/* nxi_uvloop_call: no more connections; those under way end. Every
 * handle closes, and then lst.closed is set. */
static void listen_end(void *arg) {
  (void)arg;
  lst.ending = 1;
  while (lst.conns != NULL)
    conn_end(lst.conns);
  uv_close((uv_handle_t *)&lst.poll, handle_closed);
  uv_close((uv_handle_t *)&lst.rest, handle_closed);
}

/* NX_ATTACH_LISTEN: "addr" or "addr:port" ("[v6]:port"); default 127.0.0.1. */
static int listen_addr(struct sockaddr_storage *ss, socklen_t *len) {
  const char *spec = getenv("NX_ATTACH_LISTEN");
  char host[128] = "127.0.0.1", port[16] = "0";
  if (spec != NULL && spec[0] != '\0') {
    const char *colon = strrchr(spec, ':');
    if (spec[0] == '[') {
      const char *close_b = strchr(spec, ']');
      if (close_b == NULL || close_b - spec - 1 >= (long)sizeof(host))
        return NX_EINVAL;
      snprintf(host, sizeof(host), "%.*s", (int)(close_b - spec - 1), spec + 1);
      if (close_b[1] == ':')
        snprintf(port, sizeof(port), "%s", close_b + 2);
    } else if (colon != NULL && strchr(spec, ':') == colon) {
      snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
      snprintf(port, sizeof(port), "%s", colon + 1);
    } else {
      snprintf(host, sizeof(host), "%s", spec);
    }
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    return NX_EINVAL;
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

int nx_attach_listen(const char **url) {
  if (url == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  pthread_once(&fork_once, register_fork);
  pthread_mutex_lock(&attach_lock);
  if (listen_fd >= 0) {
    *url = url_text;
    pthread_mutex_unlock(&attach_lock);
    return 0;
  }
  struct sockaddr_storage ss;
  socklen_t sl;
  int r = listen_addr(&ss, &sl);
  int fd = r == 0 ? socket(ss.ss_family,
                           SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)
                  : -1;
  int one = 1;
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (r == 0 &&
      (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) < 0 ||
       listen(fd, 64) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0))
    r = errno == EADDRINUSE ? NX_EBUSY : NX_EIO;
  if (r < 0) {
    if (fd >= 0)
      close(fd);
    pthread_mutex_unlock(&attach_lock);
    return r;
  }
  char host[INET6_ADDRSTRLEN];
  unsigned port;
  if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  }
  int off =
      snprintf(url_text, sizeof(url_text),
               ss.ss_family == AF_INET6 ? "nexus://[%s]:%u/" : "nexus://%s:%u/",
               host, port);
  if ((size_t)off + 2 * NX_KEY_SIZE < sizeof(url_text))
    nxu_hex_encode(nxi_rt.key, NX_KEY_SIZE, url_text + off);
  r = fd;
  if (nxi_uvloop_call(listen_begin, &r) < 0 || r < 0) {
    close(fd);
    pthread_mutex_unlock(&attach_lock);
    return NX_EAGAIN; /* no loop thread, or it cannot watch the socket */
  }
  listen_fd = fd;
  *url = url_text;
  pthread_mutex_unlock(&attach_lock);
  return 0;
}

void nxi_attach_finalize(void) {
  pthread_mutex_lock(&attach_lock);
  if (listen_fd >= 0) {
    /* The loop runs (it watches the socket): it lets the descriptors go
     * before they are closed. */
    if (nxi_uvloop_call(listen_end, NULL) == 0)
      nxi_uvloop_wait(&lst.closed);
    close(listen_fd);
    listen_fd = -1;
  }
  pthread_mutex_unlock(&attach_lock);
}

/* A connection to `a` before `deadline` (nxu_now_ms; a host that drops
 * the packets would otherwise hold nx_attach for the kernel's two
 * minutes): the socket, non-blocking (io_all waits), or -1. */
static int connect_within(const struct addrinfo *a, uint64_t deadline) {
  int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
    return fd;
  int err = errno;
  if (err == EINPROGRESS) {
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int r = 0;
    for (;;) {
      uint64_t now = nxu_now_ms();
      if (now >= deadline)
        break;
      r = poll(&pf, 1, (int)(deadline - now));
      if (r >= 0 || errno != EINTR)
        break;
    }
    socklen_t len = sizeof(err);
    err = ETIMEDOUT;
    if (r > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
      err = errno;
    if (r > 0 && err == 0)
      return fd;
  }
  close(fd);
  return -1;
}

/* "nexus://host:port/keyhex" or "nexus://[v6]:port/keyhex". */
int nxi_attach_parse_url(const char *url, char *host, size_t hl, char *port,
                         size_t pl, uint8_t key[NX_KEY_SIZE]) {
  const char *p = url;
  if (strncmp(p, "nexus://", 8) != 0)
    return NX_EINVAL;
  p += 8;
  const char *hend;
  if (*p == '[') {
    hend = strchr(p, ']');
    if (hend == NULL || hend[1] != ':')
      return NX_EINVAL;
    if ((size_t)(hend - p - 1) >= hl)
      return NX_EINVAL;
    snprintf(host, hl, "%.*s", (int)(hend - p - 1), p + 1);
    p = hend + 2;
  } else {
    hend = strchr(p, ':');
    if (hend == NULL || (size_t)(hend - p) >= hl || hend == p)
      return NX_EINVAL;
    snprintf(host, hl, "%.*s", (int)(hend - p), p);
    p = hend + 1;
  }
  const char *slash = strchr(p, '/');
  if (slash == NULL || slash == p || (size_t)(slash - p) >= pl)
    return NX_EINVAL;
  snprintf(port, pl, "%.*s", (int)(slash - p), p);
  p = slash + 1;
  return nxu_hex_decode(p, key, NX_KEY_SIZE);
}

int nx_attach(const char *url, nx_gp_t *gp) {
  if (url == NULL || gp == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  char host[128], port[16];
  uint8_t key[NX_KEY_SIZE];
  int r =
      nxi_attach_parse_url(url, host, sizeof(host), port, sizeof(port), key);
  if (r < 0)
    return r;
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    return NX_EUNREACH;
  /* The connection has IO_TIMEOUT_MS, whichever of the host's addresses
   * it is made to. */
  int fd = -1;
  uint64_t deadline = nxu_now_ms() + IO_TIMEOUT_MS;
  for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next)
    fd = connect_within(a, deadline);
  freeaddrinfo(res);
  if (fd < 0)
    return NX_EUNREACH;
  uint8_t hello[4 + NXU_NONCE_SIZE];
  uint8_t ch[4 + NXU_NONCE_SIZE + NXU_MAC_SIZE], proof[NXU_MAC_SIZE];
  const uint8_t *nc = hello + 4, *ns = ch + 4;
  memcpy(hello, MAGIC, 4);
  r = nxu_auth_nonce(hello + 4);
  if (r == 0)
    r = io_all(fd, hello, sizeof(hello), 1);
  if (r == 0)
    r = io_all(fd, ch, sizeof(ch), 0);
  if (r == NX_ECONNRESET) {
    nxi_log(0, "attach",
            "the listener closed the connection in the handshake: an older "
            "nexus (NXA1)?");
    r = NX_EPROTO;
  }
  if (r == 0 && memcmp(ch, MAGIC, 4) != 0)
    r = NX_EPROTO;
  if (r == 0 && !nxu_auth_check(key, NX_KEY_SIZE, "server", nc, ns,
                                (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                                ch + 4 + NXU_NONCE_SIZE)) {
    nxi_log(0, "attach", "the listener's proof does not match the URL's key");
    r = NX_EACCES;
  }
  if (r == 0)
    r = nxu_auth_mac(key, NX_KEY_SIZE, "client", nc, ns,
                     (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX), proof);
  if (r == 0)
    r = io_all(fd, proof, sizeof(proof), 1);
  uint8_t head[8];
  if (r == 0)
    r = io_all(fd, head, sizeof(head), 0);
  if (r == NX_ECONNRESET)
    r = NX_EACCES; /* the listener closes on a wrong proof */
  uint32_t len = r == 0 ? nxu_rd32(head + 4) : 0;
  if (r == 0 && (memcmp(head, MAGIC, 4) != 0 || len < NXI_CTL_ENTRY_HEAD ||
                 len > NXI_CTL_MAX))
    r = NX_EPROTO;
  uint8_t *entry = r == 0 ? malloc(len) : NULL;
  if (r == 0 && entry == NULL)
    r = NX_ENOMEM;
  if (r == 0)
    r = io_all(fd, entry, len, 0);
  close(fd);
  struct nxi_ctl_peer peer;
  size_t off = 0;
  if (r == 0)
    r = nxi_ctl_parse_peer(entry, len, &off, &peer);
  if (r == 0) {
    struct nxi_dlist *dl;
    r = nxi_dlist_intern_proc(peer.blob, peer.len, nxi_ctxid_proc(peer.context),
                              &dl);
    if (r == 0) {
      /* Joining the computation: present its key from now on. */
      memcpy(nxi_rt.key, key, NX_KEY_SIZE);
      gp->context = peer.context;
      gp->address = peer.address;
      gp->protos = dl;
    }
  }
  free(entry);
  return r;
}
