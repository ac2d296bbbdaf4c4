/* Addresses of the tcp module: the NX_TCP_LISTEN setting, the listening
 * sockets, and the descriptor that tells peers where they are. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "tcp_addr.h"

int tcp_status_to_nx(int status) {
  switch (status) {
  case 0: return 0;
  case -EAGAIN: return NX_EAGAIN;
  case -ENOMEM:
  case -ENOBUFS: return NX_ENOMEM;
  case -EINVAL: return NX_EINVAL;
  case -EACCES:
  case -EPERM: return NX_EACCES;
  case -EADDRINUSE: return NX_EBUSY;
  case -EADDRNOTAVAIL:
  case -EAFNOSUPPORT:
  case -EPROTONOSUPPORT:
  case -ENETUNREACH:
  case -EHOSTUNREACH: return NX_EUNREACH;
  case -ETIMEDOUT: return NX_ETIMEDOUT;
  case -ECONNRESET: return NX_ECONNRESET;
  case -EPIPE:
  case -ECONNREFUSED:
  case -ECONNABORTED:
  case -ENOTCONN: return NX_EPEERDEAD;
  case -EMFILE:
  case -ENFILE: return NX_EAGAIN;
  default: return NX_EIO;
  }
}

/* What to listen on: an address (a wildcard one stands for every address
 * of its family) and a port (0: any). */
struct listen_req {
  struct tcp_addr addr;
  int wildcard;
  int optional; /* a default that this host may lack (::1) */
};

static int is_zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0)
      return 0;
  return 1;
}

static int is_v4_mapped(const uint8_t *b) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(b, prefix, 12) == 0;
}

static int is_loopback(const struct tcp_addr *a) {
  if (a->family == AF_INET)
    return a->bytes[0] == 127;
  static const uint8_t one[16] = {0, 0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 0, 0, 0, 0, 0, 1};
  return memcmp(a->bytes, one, 16) == 0 ||
         (is_v4_mapped(a->bytes) && a->bytes[12] == 127);
}

/* Addresses nobody can connect to, or only with a scope we do not carry. */
static int is_unusable(const struct tcp_addr *a) {
  if (a->family == AF_INET)
    return is_zero(a->bytes, 4) || a->bytes[0] >= 224; /* multicast, class E */
  return is_zero(a->bytes, 16) || a->bytes[0] == 0xff ||
         (a->bytes[0] == 0xfe && (a->bytes[1] & 0xc0) == 0x80);
}

socklen_t tcp_addr_sockaddr(const struct tcp_addr *a,
                            struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  if (a->family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(a->port);
    memcpy(&in->sin_addr, a->bytes, 4);
    return sizeof(*in);
  }
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(a->port);
  memcpy(&in6->sin6_addr, a->bytes, 16);
  return sizeof(*in6);
}

/* Fills `a` from a socket address; returns 0, or -1 for another family. */
static int addr_from_sockaddr(const struct sockaddr *sa, struct tcp_addr *a) {
  memset(a, 0, sizeof(*a));
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    a->family = AF_INET;
    a->port = ntohs(in->sin_port);
    memcpy(a->bytes, &in->sin_addr, 4);
    return 0;
  }
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    a->family = AF_INET6;
    a->port = ntohs(in6->sin6_port);
    memcpy(a->bytes, &in6->sin6_addr, 16);
    return 0;
  }
  return -1;
}

void tcp_addr_format(const struct tcp_addr *a, char *buf, size_t len) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(a->family, a->bytes, text, sizeof(text));
  if (a->family == AF_INET6)
    snprintf(buf, len, "[%s]:%u", text, (unsigned)a->port);
  else
    snprintf(buf, len, "%s:%u", text, (unsigned)a->port);
}

/* NX_TCP_LISTEN parsing. */

static int parse_port(const char *s, uint16_t *port) {
  if (s[0] < '0' || s[0] > '9' || strlen(s) > 5)
    return -1;
  char *end;
  unsigned long v = strtoul(s, &end, 10);
  if (*end != '\0' || v > 65535)
    return -1;
  *port = (uint16_t)v;
  return 0;
}

static int add_req(struct listen_req *reqs, int *n, const struct tcp_addr *a,
                   int wildcard, char *why, size_t why_len) {
  if (*n == TCP_MAX_ADDRS) {
    snprintf(why, why_len, "NX_TCP_LISTEN: more than %d addresses",
             TCP_MAX_ADDRS);
    return NX_EINVAL;
  }
  reqs[*n].addr = *a;
  reqs[*n].wildcard = wildcard;
  reqs[*n].optional = 0;
  (*n)++;
  return 0;
}

/* An interface name: every address it has (IPv6 link-local ones need a
 * scope our descriptor does not carry, so they are left out). */
static int add_interface(const char *name, uint16_t port,
                         struct listen_req *reqs, int *n, char *why,
                         size_t why_len) {
  struct ifaddrs *list;
  if (getifaddrs(&list) < 0) {
    snprintf(why, why_len, "NX_TCP_LISTEN: getifaddrs: %s", strerror(errno));
    return tcp_status_to_nx(-errno);
  }
  int found = 0, r = 0;
  for (struct ifaddrs *i = list; i != NULL && r == 0; i = i->ifa_next) {
    struct tcp_addr a;
    if (i->ifa_addr == NULL || strcmp(i->ifa_name, name) != 0 ||
        addr_from_sockaddr(i->ifa_addr, &a) < 0 || is_unusable(&a))
      continue;
    a.port = port;
    r = add_req(reqs, n, &a, 0, why, why_len);
    found++;
  }
  freeifaddrs(list);
  if (r == 0 && found == 0) {
    snprintf(why, why_len,
             "NX_TCP_LISTEN: '%s' is neither an address nor an interface "
             "with a usable address",
             name);
    r = NX_EINVAL;
  }
  return r;
}

/* One item: addr, addr:port, [v6], [v6]:port, v6 (bare), ifname,
 * ifname:port. */
static int parse_item(const char *item, struct listen_req *reqs, int *n,
                      char *why, size_t why_len) {
  char host[128];
  const char *port_text = NULL;
  uint16_t port = 0;
  struct tcp_addr a;
  memset(&a, 0, sizeof(a));
  size_t len = strlen(item);
  if (len == 0 || len >= sizeof(host)) {
    snprintf(why, why_len, "NX_TCP_LISTEN: %s item",
             len ? "overlong" : "empty");
    return NX_EINVAL;
  }
  if (item[0] == '[') {
    const char *close = strchr(item, ']');
    if (close == NULL || (close[1] != '\0' && close[1] != ':'))
      goto bad;
    memcpy(host, item + 1, (size_t)(close - item - 1));
    host[close - item - 1] = '\0';
    if (close[1] == ':')
      port_text = close + 2;
    if (inet_pton(AF_INET6, host, a.bytes) != 1)
      goto bad;
    a.family = AF_INET6;
  } else if (inet_pton(AF_INET, item, a.bytes) == 1) {
    a.family = AF_INET;
  } else if (inet_pton(AF_INET6, item, a.bytes) == 1) {
    a.family = AF_INET6;
  } else {
    memcpy(host, item, len + 1);
    char *colon = strrchr(host, ':');
    if (colon != NULL) {
      *colon = '\0';
      port_text = colon + 1;
    }
    if (port_text != NULL && parse_port(port_text, &port) < 0)
      goto bad;
    if (inet_pton(AF_INET, host, a.bytes) == 1) {
      a.family = AF_INET;
      port_text = NULL;
    } else {
      if (host[0] == '\0' || strlen(host) >= IF_NAMESIZE)
        goto bad;
      return add_interface(host, port, reqs, n, why, why_len);
    }
  }
  if (port_text != NULL && parse_port(port_text, &port) < 0)
    goto bad;
  a.port = port;
  size_t alen = a.family == AF_INET ? 4 : 16;
  int wildcard = is_zero(a.bytes, alen);
  if (!wildcard && is_unusable(&a))
    goto bad;
  return add_req(reqs, n, &a, wildcard, why, why_len);
bad:
  snprintf(why, why_len,
           "NX_TCP_LISTEN: cannot use '%s' (expected addr, addr:port, "
           "[v6]:port or an interface name, comma-separated)",
           item);
  return NX_EINVAL;
}

static int parse_listen(const char *spec, struct listen_req *reqs, int *n,
                        char *why, size_t why_len) {
  char *copy = strdup(spec);
  if (copy == NULL)
    return NX_ENOMEM;
  int r = 0;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item != NULL && r == 0;
       item = strtok_r(NULL, ",", &save)) {
    while (*item == ' ' || *item == '\t')
      item++;
    size_t len = strlen(item);
    while (len > 0 && (item[len - 1] == ' ' || item[len - 1] == '\t'))
      item[--len] = '\0';
    r = parse_item(item, reqs, n, why, why_len);
  }
  free(copy);
  if (r == 0 && *n == 0) {
    snprintf(why, why_len, "NX_TCP_LISTEN is set but names no address");
    r = NX_EINVAL;
  }
  return r;
}

/* Listening sockets. */

static int open_listener(struct tcp *t, const struct listen_req *req,
                         struct tcp_listener *l) {
  int fd =
      socket(req->addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (req->addr.family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  struct sockaddr_storage ss;
  socklen_t sl = tcp_addr_sockaddr(&req->addr, &ss);
  if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, SOMAXCONN) < 0)
    goto err;
  sl = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
    goto err;
  memset(l, 0, sizeof(*l));
  l->src.kind = TCP_SRC_LISTENER;
  l->fd = fd;
  l->t = t;
  l->wildcard = req->wildcard;
  addr_from_sockaddr((struct sockaddr *)&ss, &l->addr);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
  if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
    goto err;
  return 0;
err:;
  int err = -errno;
  close(fd);
  return err;
}

static void advertise(struct tcp *t, const struct tcp_addr *a) {
  for (int i = 0; i < t->nadvert; i++)
    if (memcmp(&t->advert[i], a, sizeof(*a)) == 0)
      return;
  if (t->nadvert == TCP_MAX_ADDRS) {
    char text[64];
    tcp_addr_format(a, text, sizeof(text));
    TCP_LOG(t, 1, "more than %d addresses: %s left out of the descriptor",
            TCP_MAX_ADDRS, text);
    return;
  }
  t->advert[t->nadvert++] = *a;
}

/* A wildcard listener is reachable at every address of its family. */
static void advertise_wildcard(struct tcp *t, const struct tcp_listener *l) {
  struct ifaddrs *list;
  if (getifaddrs(&list) < 0) {
    TCP_LOG(t, 0, "getifaddrs: %s; advertising loopback only", strerror(errno));
    struct tcp_addr a = {.family = l->addr.family, .port = l->addr.port};
    if (a.family == AF_INET)
      a.bytes[0] = 127, a.bytes[3] = 1;
    else
      a.bytes[15] = 1;
    advertise(t, &a);
    return;
  }
  for (struct ifaddrs *i = list; i != NULL; i = i->ifa_next) {
    struct tcp_addr a;
    if (i->ifa_addr == NULL || addr_from_sockaddr(i->ifa_addr, &a) < 0 ||
        a.family != l->addr.family || is_unusable(&a))
      continue;
    a.port = l->addr.port;
    advertise(t, &a);
  }
  freeifaddrs(list);
}

int tcp_listeners_open(struct tcp *t, char *why, size_t why_len) {
  struct listen_req reqs[TCP_MAX_ADDRS];
  int n = 0;
  const char *spec = getenv("NX_TCP_LISTEN");
  if (spec != NULL && spec[0] != '\0') {
    int r = parse_listen(spec, reqs, &n, why, why_len);
    if (r < 0)
      return r;
  } else {
    memset(reqs, 0, 2 * sizeof(reqs[0]));
    reqs[0].addr.family = AF_INET;
    reqs[0].addr.bytes[0] = 127;
    reqs[0].addr.bytes[3] = 1;
    reqs[1].addr.family = AF_INET6;
    reqs[1].addr.bytes[15] = 1;
    reqs[1].optional = 1;
    n = 2;
  }
  for (int i = 0; i < n; i++) {
    struct tcp_listener *l = &t->listen[t->nlisten];
    int r = open_listener(t, &reqs[i], l);
    if (r < 0 && reqs[i].optional) {
      TCP_LOG(t, 1, "not listening on ::1: %s", strerror(-r));
      continue;
    }
    if (r < 0) {
      char text[64];
      tcp_addr_format(&reqs[i].addr, text, sizeof(text));
      snprintf(why, why_len, "cannot listen on %s: %s", text, strerror(-r));
      return tcp_status_to_nx(r);
    }
    t->nlisten++;
    if (l->wildcard)
      advertise_wildcard(t, l);
    else
      advertise(t, &l->addr);
  }
  if (t->nadvert == 0) {
    snprintf(why, why_len, "no address to advertise");
    return NX_EUNREACH;
  }
  return 0;
}

void tcp_listeners_close(struct tcp *t) {
  for (int i = 0; i < t->nlisten; i++) {
    if (t->listen[i].fd < 0)
      continue; /* failed and closed (tcp.c, listener_failed) */
    epoll_ctl(t->epfd, EPOLL_CTL_DEL, t->listen[i].fd, NULL);
    close(t->listen[i].fd);
  }
  t->nlisten = 0;
}

/* The descriptor. */

void tcp_desc_encode(const struct tcp *t, struct nx_desc_buf *out) {
  out->scope_len = TCP_UUID_SIZE;
  memcpy(out->scope, t->core->host_uuid, TCP_UUID_SIZE);
  uint8_t *p = out->data;
  p[0] = TCP_DESC_VERSION;
  p[1] = 0;
  memcpy(p + 2, t->core->process_uuid, TCP_UUID_SIZE);
  p[18] = (uint8_t)t->nadvert;
  size_t off = TCP_DESC_HEAD;
  for (int i = 0; i < t->nadvert; i++) {
    const struct tcp_addr *a = &t->advert[i];
    size_t alen = a->family == AF_INET ? 4 : 16;
    p[off] = a->family == AF_INET ? 4 : 6;
    p[off + 1] = (uint8_t)(a->port >> 8);
    p[off + 2] = (uint8_t)a->port;
    memcpy(p + off + 3, a->bytes, alen);
    off += 3 + alen;
  }
  out->data_len = (uint16_t)off;
}

int tcp_desc_decode(const struct tcp *t, const struct nx_desc *d,
                    struct tcp_desc *out) {
  if (d->scope_len != TCP_UUID_SIZE || d->scope == NULL || d->data == NULL ||
      d->data_len < TCP_DESC_HEAD)
    return NX_EUNREACH;
  const uint8_t *p = d->data;
  size_t len = d->data_len;
  unsigned count = p[18];
  if (p[0] != TCP_DESC_VERSION || count == 0 || count > TCP_MAX_ADDRS)
    return NX_EUNREACH;
  int same_host = memcmp(d->scope, t->core->host_uuid, TCP_UUID_SIZE) == 0;
  memcpy(out->uuid, p + 2, TCP_UUID_SIZE);
  out->naddr = 0;
  struct tcp_addr others[TCP_MAX_ADDRS];
  int nothers = 0;
  size_t off = TCP_DESC_HEAD;
  for (unsigned i = 0; i < count; i++) {
    if (len - off < 3)
      return NX_EUNREACH;
    struct tcp_addr a;
    memset(&a, 0, sizeof(a));
    size_t alen;
    if (p[off] == 4)
      a.family = AF_INET, alen = 4;
    else if (p[off] == 6)
      a.family = AF_INET6, alen = 16;
    else
      return NX_EUNREACH;
    a.port = (uint16_t)(p[off + 1] << 8 | p[off + 2]);
    if (len - off - 3 < alen || a.port == 0)
      return NX_EUNREACH;
    memcpy(a.bytes, p + off + 3, alen);
    off += 3 + alen;
    /* Loopback addresses lead to this host: only for a peer on it. */
    if (is_unusable(&a) || (is_loopback(&a) && !same_host) ||
        (a.family == AF_INET && !t->ipv4_ok) ||
        (a.family == AF_INET6 && !t->ipv6_ok))
      continue;
    if (is_loopback(&a))
      out->addr[out->naddr++] = a; /* on this host: loopback first */
    else
      others[nothers++] = a;
  }
  if (off != len)
    return NX_EUNREACH;
  for (int i = 0; i < nothers; i++)
    out->addr[out->naddr++] = others[i];
  return out->naddr > 0 ? 0 : NX_EUNREACH;
}
