// A raw TCP client for the handshake tests: connect to a loopback port,
// send and receive exactly, and tell when the other side closed.
#ifndef NX_TESTS_RAW_CLIENT_H
#define NX_TESTS_RAW_CLIENT_H

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace raw {

inline uint64_t ms() {
  using namespace std::chrono;
  return (uint64_t)duration_cast<milliseconds>(
             steady_clock::now().time_since_epoch())
      .count();
}

inline int connect_lo(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in in = {};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

inline bool send_all(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

inline bool send_all(int fd, const std::vector<uint8_t> &v) {
  return send_all(fd, v.data(), v.size());
}

// Waits for exactly `n` bytes; false on timeout, EOF or error.
inline bool recv_exact(int fd, uint8_t *p, size_t n, int timeout_ms = 5000) {
  uint64_t end = ms() + (uint64_t)timeout_ms;
  while (n > 0) {
    uint64_t now = ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
      continue;
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

// True when the other side closes (EOF or reset) within the time, having
// sent nothing more.
inline bool closed_within(int fd, int timeout_ms = 5000) {
  uint64_t end = ms() + (uint64_t)timeout_ms;
  for (;;) {
    uint64_t now = ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
      continue;
    char c;
    ssize_t r = recv(fd, &c, 1, 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
      return true;
    if (r > 0)
      return false; // it answered
  }
}

inline std::vector<uint8_t> random_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (auto &b : v)
    b = (uint8_t)std::rand();
  return v;
}

// Whether `needle` occurs in `hay`.
inline bool contains(const std::vector<uint8_t> &hay,
                     const std::vector<uint8_t> &needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); i++)
    if (std::equal(needle.begin(), needle.end(), hay.begin() + (long)i))
      return true;
  return false;
}

} // namespace raw

#endif // NX_TESTS_RAW_CLIENT_H
