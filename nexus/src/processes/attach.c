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
#include "modules/dlist.h"
#include "nxu_auth.h"
#include "nxu_key.h"

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
static pthread_t acceptor;
static char url_text[128];

/* Reads or writes exactly `len` bytes within the timeout. */
static int io_all(int fd, void *buf, size_t len, int writing) {
  uint8_t *p = buf;
  while (len > 0) {
    struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int r = poll(&pf, 1, IO_TIMEOUT_MS);
    if (r == 0)
      return NX_ETIMEDOUT;
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return NX_EIO;
    }
    ssize_t n = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (n == 0)
      return NX_ECONNRESET;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return NX_ECONNRESET;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static void refuse(const char *why) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(0, "attach", "refused a connection: %s", why);
}

static void serve_one(int fd) {
  uint8_t hello[4 + NXU_NONCE_SIZE];
  if (io_all(fd, hello, 4, 0) < 0)
    return;
  if (memcmp(hello, MAGIC_V1, 4) == 0) {
    refuse("an older nexus (NXA1, which sends the key in clear); this one "
           "speaks NXA2: update the attaching program");
    return;
  }
  if (memcmp(hello, MAGIC, 4) != 0) {
    refuse("wrong magic");
    return;
  }
  uint8_t ch[4 + NXU_NONCE_SIZE + NXU_MAC_SIZE], proof[NXU_MAC_SIZE];
  const uint8_t *nc = hello + 4, *ns = ch + 4;
  memcpy(ch, MAGIC, 4);
  if (io_all(fd, hello + 4, NXU_NONCE_SIZE, 0) < 0 ||
      nxu_auth_nonce(ch + 4) < 0 ||
      nxu_auth_mac(nxi_rt.key, NX_KEY_SIZE, "server", nc, ns,
                   (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX),
                   ch + 4 + NXU_NONCE_SIZE) < 0 ||
      io_all(fd, ch, sizeof(ch), 1) < 0 ||
      io_all(fd, proof, sizeof(proof), 0) < 0)
    return; /* it went away (or gave up on our proof: its key differs) */
  if (!nxu_auth_check(nxi_rt.key, NX_KEY_SIZE, "client", nc, ns,
                      (const uint8_t *)AUTH_CTX, strlen(AUTH_CTX), proof)) {
    refuse("wrong key (the attacher's proof does not match)");
    return;
  }
  /* Room for a descriptor more: a gateway may be added meanwhile. */
  size_t cap = 8 + NXI_CTL_ENTRY_HEAD + nxi_rt.self_dl->len + NXI_DESC_MAX_LEN;
  uint8_t *msg = malloc(cap);
  if (msg == NULL)
    return;
  memcpy(msg, MAGIC, 4);
  size_t len = nxi_chan_self_entry(msg + 8, cap - 8);
  nxu_le32(msg + 4, (uint32_t)len);
  io_all(fd, msg, 8 + len, 1);
  free(msg);
}

static void *accept_main(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE ||
          errno == ENFILE)
        continue;
      break; /* shut down */
    }
    serve_one(fd);
    close(fd);
  }
  return NULL;
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
  if (pthread_create(&acceptor, NULL, accept_main, NULL) != 0) {
    close(fd);
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
    shutdown(listen_fd, SHUT_RDWR); /* ends accept() */
    pthread_join(acceptor, NULL);
    close(listen_fd);
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
