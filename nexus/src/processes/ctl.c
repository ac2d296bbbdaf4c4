/* The control channel's messages on a socket, and their encoding (ctl.h); pure,
 * so that nxrun links it too. */
#include "processes/ctl.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "nexus/errors.h"
#include "nxu_wire.h"

int nxi_ctl_send(int fd, const void *msg, size_t len) {
  ssize_t n;
  do
    n = send(fd, msg, len, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == EPIPE || errno == ECONNRESET ? NX_EPEERDEAD : NX_EIO;
  return (size_t)n == len ? 0 : NX_EIO;
}

/* Waits at most timeout_ms (-1: forever) for `fd` to be readable: 0,
 * NX_ETIMEDOUT or NX_EIO. */
static int wait_readable(int fd, int timeout_ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r;
  do
    r = poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0 ? 0 : r == 0 ? NX_ETIMEDOUT : NX_EIO;
}

long nxi_ctl_recv(int fd, uint8_t *buf, int timeout_ms) {
  int r = wait_readable(fd, timeout_ms);
  if (r < 0)
    return r;
  ssize_t n;
  do
    n = recv(fd, buf, NXI_CTL_MAX, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return errno == ECONNRESET ? 0 : NX_EIO;
  return n;
}

int nxi_ctl_send_stream(int fd, const void *msg, size_t len) {
  if (len > NXI_CTL_MAX)
    return NX_EINVAL;
  uint8_t head[4];
  nxu_le32(head, (uint32_t)len);
  struct iovec iov[2] = {{head, 4}, {(void *)msg, len}};
  size_t left = 4 + len;
  while (left > 0) {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      if (poll(&p, 1, 10000) <= 0)
        return NX_EIO;
      continue;
    }
    if (n < 0)
      return errno == EPIPE || errno == ECONNRESET ? NX_EPEERDEAD : NX_EIO;
    left -= (size_t)n;
    for (int i = 0; i < 2 && n > 0; i++) {
      size_t k = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
      iov[i].iov_base = (uint8_t *)iov[i].iov_base + k;
      iov[i].iov_len -= k;
      n -= (ssize_t)k;
    }
  }
  return 0;
}

/* Reads exactly `len` bytes, waiting at most `ms` for each part. Returns
 * 1, 0 at end of file, or a negative code. */
static int read_full(int fd, uint8_t *p, size_t len, int ms) {
  while (len > 0) {
    int r = wait_readable(fd, ms);
    if (r < 0)
      return r;
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return 0;
    if (n < 0)
      return NX_EIO;
    p += n;
    len -= (size_t)n;
  }
  return 1;
}

long nxi_ctl_recv_stream(int fd, uint8_t *buf, size_t cap, int timeout_ms) {
  int r = wait_readable(fd, timeout_ms);
  if (r < 0)
    return r;
  int rest_ms = timeout_ms < 0 ? 10000 : timeout_ms;
  uint8_t head[4];
  r = read_full(fd, head, 4, rest_ms);
  if (r <= 0)
    return r;
  uint32_t len = nxu_rd32(head);
  if (len > NXI_CTL_MAX || len > cap)
    return NX_EPROTO;
  if (len == 0)
    return NX_EPROTO; /* no message is empty */
  r = read_full(fd, buf, len, rest_ms);
  if (r == 0)
    return NX_EPROTO; /* cut short */
  return r < 0 ? r : (long)len;
}

long nxi_ctl_recv_stream_part(int fd, uint8_t *rx, size_t *have) {
  for (;;) {
    size_t want = 4;
    if (*have >= 4) {
      uint32_t len = nxu_rd32(rx);
      if (len == 0 || len > NXI_CTL_MAX)
        return NX_EPROTO; /* no message is empty or that long */
      want = 4 + (size_t)len;
      if (*have == want) {
        *have = 0;
        return (long)len;
      }
    }
    ssize_t n = recv(fd, rx + *have, want - *have, MSG_DONTWAIT);
    if (n > 0) {
      *have += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return NX_EAGAIN;
    if (n == 0 || errno == ECONNRESET)
      return *have == 0 ? 0 : NX_EPROTO; /* closed, or cut short */
    return NX_EIO;
  }
}

size_t nxi_ctl_put_peer(uint8_t *p, size_t cap, uint64_t context,
                        uint64_t address, const uint8_t *blob, size_t len) {
  if (cap < NXI_CTL_ENTRY_HEAD || cap - NXI_CTL_ENTRY_HEAD < len ||
      len > UINT32_MAX)
    return 0;
  nxu_le64(p, context);
  nxu_le64(p + 8, address);
  nxu_le32(p + 16, (uint32_t)len);
  memcpy(p + NXI_CTL_ENTRY_HEAD, blob, len);
  return NXI_CTL_ENTRY_HEAD + len;
}

int nxi_ctl_parse_peer(const uint8_t *msg, size_t len, size_t *off,
                       struct nxi_ctl_peer *out) {
  if (len < *off || len - *off < NXI_CTL_ENTRY_HEAD)
    return NX_EPROTO;
  const uint8_t *p = msg + *off;
  out->context = nxu_rd64(p);
  out->address = nxu_rd64(p + 8);
  out->len = nxu_rd32(p + 16);
  if (len - *off - NXI_CTL_ENTRY_HEAD < out->len || out->context == 0)
    return NX_EPROTO;
  out->blob = p + NXI_CTL_ENTRY_HEAD;
  *off += NXI_CTL_ENTRY_HEAD + out->len;
  return 0;
}

int nxi_ctl_parse_ready(const uint8_t *msg, size_t len,
                        struct nxi_ctl_peer *out) {
  size_t off = 1;
  if (len < 1 || msg[0] != NXI_CTL_READY)
    return NX_EPROTO;
  return nxi_ctl_parse_peer(msg, len, &off, out);
}

int nxi_ctl_parse_join(const uint8_t *msg, size_t len,
                       struct nxi_ctl_peer *out) {
  size_t off = 1;
  if (len < 1 || msg[0] != NXI_CTL_JOIN)
    return NX_EPROTO;
  int r = nxi_ctl_parse_peer(msg, len, &off, out);
  return r == 0 && off != len ? NX_EPROTO : r;
}

void nxi_ctl_put_peers_head(uint8_t *buf, uint32_t rank, uint32_t count) {
  buf[0] = NXI_CTL_PEERS;
  nxu_le32(buf + 1, rank);
  nxu_le32(buf + 5, count);
}

int nxi_ctl_parse_peers_head(const uint8_t *msg, size_t len, uint32_t *rank,
                             uint32_t *count) {
  if (len < NXI_CTL_PEERS_HEAD || msg[0] != NXI_CTL_PEERS)
    return NX_EPROTO;
  *rank = nxu_rd32(msg + 1);
  *count = nxu_rd32(msg + 5);
  return 0;
}

void nxi_ctl_put_peer_dead(uint8_t *buf, uint64_t context) {
  buf[0] = NXI_CTL_PEER_DEAD;
  nxu_le64(buf + 1, context);
}

int nxi_ctl_parse_peer_dead(const uint8_t *msg, size_t len, uint64_t *context) {
  if (len < NXI_CTL_PEER_DEAD_LEN || msg[0] != NXI_CTL_PEER_DEAD)
    return NX_EPROTO;
  *context = nxu_rd64(msg + 1);
  return 0;
}
