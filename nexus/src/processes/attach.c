/* Attach: a running computation accepts programs started separately (on this
 * host or another); they join it through a URL carrying its address and key. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include "nxu_wire.h"

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

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static int listen_fd = -1;
static char url_text[128];

/* The exchange runs on the process layer's loop (uvloop.c), on both sides:
 * a connection is a uv_tcp_t and a timer, and each step (bytes to send,
 * bytes to receive) must complete within IO_TIMEOUT_MS, so a peer that
 * stalls mid-message times out (NX_ETIMEDOUT) and one that closes is
 * NX_ECONNRESET. The listener serves every connection at once: one that
 * stalls delays no other. */
struct conn {
  uv_tcp_t tcp;
  uv_timer_t timer;
  uv_write_t wr[2]; /* each side writes twice */
  uint8_t *out[2];  /* what they write, kept until written */
  int writes;
  uint8_t *in; /* what came, `have` of `want` bytes */
  size_t have, want;
  int (*next)(struct conn *c); /* once `want` bytes are in */
  int close_after_write;
  int closing;
  int result;
  struct conn *link; /* the listener's connections */
  /* The attacher's side: */
  int fd;    /* its socket, until the loop has it */
  int stage; /* 1 the challenge, 2 the answer's head, 3 its entry */
  uint8_t key[NX_KEY_SIZE]; /* the URL's */
  int done;                 /* nxi_uvloop_set: the exchange is over */
};

static uv_tcp_t *listener; /* the loop's */
static struct conn *serving;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* A process forked (without exec) from a listener: the listener, its
 * socket and the loop that served it are its parent's (uvloop.c forgets
 * the loop). It listens anew if it asks. */
static void forget_listener(void) {
  pthread_mutex_init(&attach_lock, NULL);
  listen_fd = -1;
  listener = NULL;
  serving = NULL;
}

static void register_fork(void) { pthread_atfork(NULL, NULL, forget_listener); }

static void conn_closed(uv_handle_t *h) {
  struct conn *c = h->data;
  if (--c->closing > 0)
    return;
  if (c->stage > 0) {
    nxi_uvloop_set(&c->done, 1); /* the attacher frees it */
    return;
  }
  free(c->in);
  free(c->out[0]);
  free(c->out[1]);
  free(c);
}

/* The exchange is over (`result`): the connection closes. */
static void conn_end(struct conn *c, int result) {
  if (c->closing > 0)
    return;
  c->result = result;
  for (struct conn **pp = &serving; *pp != NULL; pp = &(*pp)->link)
    if (*pp == c) {
      *pp = c->link;
      break;
    }
  c->closing = 2;
  uv_close((uv_handle_t *)&c->timer, conn_closed);
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void conn_late(uv_timer_t *t) { conn_end(t->data, NX_ETIMEDOUT); }

static void conn_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  (void)hint;
  struct conn *c = h->data;
  *buf = uv_buf_init((char *)c->in + c->have, (unsigned)(c->want - c->have));
}

static void conn_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  struct conn *c = s->data;
  if (n < 0) {
    conn_end(c, NX_ECONNRESET);
    return;
  }
  c->have += (size_t)n;
  if (c->have < c->want)
    return;
  uv_read_stop(s);
  uv_timer_stop(&c->timer);
  int r = c->next(c);
  if (r != 0)
    conn_end(c, r > 0 ? 0 : r);
}

/* The next `len` bytes, then next(c): 0 to go on, 1 when the exchange is
 * over, or a negative code. */
static int expect(struct conn *c, size_t len, int (*next)(struct conn *)) {
  uint8_t *in = realloc(c->in, c->want + len);
  if (in == NULL)
    return NX_ENOMEM;
  c->in = in;
  c->want += len;
  c->next = next;
  uv_timer_start(&c->timer, conn_late, IO_TIMEOUT_MS, 0);
  return uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_read) == 0
             ? 0
             : NX_ECONNRESET;
}

static void conn_written(uv_write_t *w, int status) {
  struct conn *c = w->data;
  if (status < 0)
    conn_end(c, NX_ECONNRESET);
  else if (c->close_after_write && w == &c->wr[1])
    conn_end(c, 0); /* the answer is out */
}

/* Sends `len` bytes of `msg`, a malloc'ed buffer the connection keeps
 * (and frees) from here (NX_ENOMEM for NULL). */
static int put(struct conn *c, uint8_t *msg, size_t len) {
  if (msg == NULL)
    return NX_ENOMEM;
  if (c->writes == 2) {
    free(msg);
    return NX_EIO;
  }
  int i = c->writes++;
  c->out[i] = msg;
  c->wr[i].data = c;
  uv_buf_t b = uv_buf_init((char *)msg, (unsigned)len);
  uv_timer_start(&c->timer, conn_late, IO_TIMEOUT_MS, 0);
  return uv_write(&c->wr[i], (uv_stream_t *)&c->tcp, &b, 1, conn_written) == 0
             ? 0
             : NX_ECONNRESET;
}

/* A connection's handles, on the loop. */
static void conn_init(struct conn *c) {
  uv_tcp_init(nxi_uvloop(), &c->tcp);
  uv_timer_init(nxi_uvloop(), &c->timer);
  c->tcp.data = c->timer.data = c;
}

static void refuse(const char *why) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(0, "attach", "refused a connection: %s", why);
}

/* The listener's side. c->in: "NXA2", the attacher's nonce, its proof;
 * c->out: "NXA2", our nonce, our proof, then the answer. */
#define IN_NONCE 4
#define IN_PROOF (4 + NXU_NONCE_SIZE)

static int served_proof(struct conn *c) {
  const uint8_t *nc = c->in + IN_NONCE, *ns = c->out[0] + 4;
  if (!nxu_auth_check(nxi_rt.key, NX_KEY_SIZE, "client", nc, ns,
                      (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                      c->in + IN_PROOF)) {
    refuse("wrong key (the attacher's proof does not match)");
    return 1;
  }
  /* Room for a descriptor more: a gateway may be added meanwhile. */
  size_t cap = 8 + NXI_CTL_ENTRY_HEAD + nxi_rt.self_dl->len + NXI_DESC_MAX_LEN;
  uint8_t *msg = malloc(cap);
  if (msg == NULL)
    return NX_ENOMEM;
  memcpy(msg, MAGIC, 4);
  size_t len = nxi_chan_self_entry(msg + 8, cap - 8);
  nxu_le32(msg + 4, (uint32_t)len);
  c->close_after_write = 1;
  return put(c, msg, 8 + len);
}

static int served_nonce(struct conn *c) {
  size_t len = 4 + NXU_NONCE_SIZE + NXU_MAC_SIZE;
  uint8_t *ch = malloc(len);
  if (ch == NULL)
    return NX_ENOMEM;
  memcpy(ch, MAGIC, 4);
  if (nxu_auth_nonce(ch + 4) < 0 ||
      nxu_auth_mac(nxi_rt.key, NX_KEY_SIZE, "server", c->in + IN_NONCE, ch + 4,
                   (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                   ch + 4 + NXU_NONCE_SIZE) < 0) {
    free(ch);
    return NX_EIO;
  }
  int r = put(c, ch, len);
  /* It may go away now (or give up on our proof: its key differs). */
  return r < 0 ? r : expect(c, NXU_MAC_SIZE, served_proof);
}

static int served_magic(struct conn *c) {
  if (memcmp(c->in, MAGIC_V1, 4) == 0) {
    refuse("an older nexus (NXA1, which sends the key in clear); this one "
           "speaks NXA2: update the attaching program");
    return 1;
  }
  if (memcmp(c->in, MAGIC, 4) != 0) {
    refuse("wrong magic");
    return 1;
  }
  return expect(c, NXU_NONCE_SIZE, served_nonce);
}

static void on_connection(uv_stream_t *l, int status) {
  struct conn *c = status == 0 ? calloc(1, sizeof(*c)) : NULL;
  if (c == NULL)
    return;
  conn_init(c);
  c->link = serving;
  serving = c;
  if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0 ||
      expect(c, 4, served_magic) < 0)
    conn_end(c, NX_ECONNRESET);
}

static void listener_closed(uv_handle_t *h) { free(h); }

/* nxi_uvloop_call: the listener on listen_fd, which it owns from here
 * (and closes if it fails); `arg` gets 0 or NX_EAGAIN. */
static void listen_begin(void *arg) {
  int *r = arg;
  listener = malloc(sizeof(*listener));
  if (listener == NULL) {
    *r = NX_EAGAIN;
    return;
  }
  uv_tcp_init(nxi_uvloop(), listener);
  listener->data = NULL;
  *r = 0;
  if (uv_tcp_open(listener, listen_fd) != 0) {
    close(listen_fd);
    *r = NX_EAGAIN;
  } else if (uv_listen((uv_stream_t *)listener, 64, on_connection) != 0) {
    *r = NX_EAGAIN; /* closing the handle closes the socket */
  }
  if (*r < 0) {
    uv_close((uv_handle_t *)listener, listener_closed);
    listener = NULL;
  }
}

/* nxi_uvloop_call: no more connections; those under way end. */
static void listen_end(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)listener, listener_closed); /* closes listen_fd */
  listener = NULL;
  while (serving != NULL)
    conn_end(serving, NX_ECONNRESET);
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
  int fd = r == 0 ? socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
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
  listen_fd = fd;
  if (nxi_uvloop_call(listen_begin, &r) < 0) {
    close(fd);
    r = NX_EAGAIN;
  }
  if (r < 0) {
    listen_fd = -1;
    pthread_mutex_unlock(&attach_lock);
    return NX_EAGAIN;
  }
  *url = url_text;
  pthread_mutex_unlock(&attach_lock);
  return 0;
}

void nxi_attach_finalize(void) {
  pthread_mutex_lock(&attach_lock);
  if (listen_fd >= 0) {
    nxi_uvloop_call(listen_end, NULL); /* running: it listens */
    listen_fd = -1;
  }
  pthread_mutex_unlock(&attach_lock);
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

/* The attacher's side. c->in: "NXA2", the listener's nonce and proof;
 * then "NXA2", the answer's length, its peer entry. c->out: "NXA2" and our
 * nonce, then our proof. */
#define CHALLENGE_LEN (4 + NXU_NONCE_SIZE + NXU_MAC_SIZE)

static int attach_entry(struct conn *c) {
  (void)c;
  return 1; /* the exchange is over */
}

static int attach_head(struct conn *c) {
  const uint8_t *head = c->in + CHALLENGE_LEN;
  uint32_t len = nxu_rd32(head + 4);
  if (memcmp(head, MAGIC, 4) != 0 || len < NXI_CTL_ENTRY_HEAD ||
      len > NXI_CTL_MAX)
    return NX_EPROTO;
  c->stage = 3;
  return expect(c, len, attach_entry);
}

static int attach_challenge(struct conn *c) {
  const uint8_t *nc = c->out[0] + 4, *ns = c->in + 4;
  if (memcmp(c->in, MAGIC, 4) != 0)
    return NX_EPROTO;
  if (!nxu_auth_check(c->key, NX_KEY_SIZE, "server", nc, ns,
                      (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                      c->in + 4 + NXU_NONCE_SIZE)) {
    nxi_log(0, "attach", "the listener's proof does not match the URL's key");
    return NX_EACCES;
  }
  uint8_t *proof = malloc(NXU_MAC_SIZE);
  if (proof == NULL ||
      nxu_auth_mac(c->key, NX_KEY_SIZE, "client", nc, ns,
                   (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX), proof) < 0) {
    free(proof);
    return NX_EIO;
  }
  c->stage = 2;
  int r = put(c, proof, NXU_MAC_SIZE);
  return r < 0 ? r : expect(c, 8, attach_head);
}

/* nxi_uvloop_call: the exchange on the connected socket c->fd, which it
 * owns from here; the attacher waits for c->done. */
static void attach_begin(void *arg) {
  struct conn *c = arg;
  conn_init(c);
  c->stage = 1;
  if (uv_tcp_open(&c->tcp, c->fd) != 0) {
    close(c->fd);
    conn_end(c, NX_EIO);
    return;
  }
  uint8_t *hello = malloc(4 + NXU_NONCE_SIZE);
  int r = hello != NULL ? 0 : NX_ENOMEM;
  if (r == 0) {
    memcpy(hello, MAGIC, 4);
    r = nxu_auth_nonce(hello + 4) < 0 ? NX_EIO : 0;
    r = r == 0 ? put(c, hello, 4 + NXU_NONCE_SIZE) : (free(hello), r);
  }
  if (r == 0)
    r = expect(c, CHALLENGE_LEN, attach_challenge);
  if (r < 0)
    conn_end(c, r);
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
  if (nxi_uvloop_here())
    return NX_EBUSY; /* the exchange needs this thread */
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    return NX_EUNREACH;
  int fd = -1;
  for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0)
    return NX_EUNREACH;
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    close(fd);
    return NX_ENOMEM;
  }
  c->fd = fd;
  memcpy(c->key, key, NX_KEY_SIZE);
  if (nxi_uvloop_call(attach_begin, c) < 0) {
    close(fd);
    free(c);
    return NX_EIO;
  }
  nxi_uvloop_wait(&c->done);
  r = c->result;
  if (r == NX_ECONNRESET && c->stage == 1) {
    nxi_log(0, "attach",
            "the listener closed the connection in the handshake: an older "
            "nexus (NXA1)?");
    r = NX_EPROTO;
  }
  if (r == NX_ECONNRESET && c->stage == 2)
    r = NX_EACCES; /* the listener closes on a wrong proof */
  /* The answer's entry, after the challenge and the answer's head. */
  const uint8_t *entry = r == 0 ? c->in + CHALLENGE_LEN + 8 : NULL;
  size_t len = r == 0 ? c->have - CHALLENGE_LEN - 8 : 0;
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
  free(c->in);
  free(c->out[0]);
  free(c->out[1]);
  free(c);
  return r;
}
