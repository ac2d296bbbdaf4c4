// Whole reads and writes on the pipes that hand a peer's gp to its test
// (tests/tcp, tests/fallback): the peer writes, the test reads under a
// deadline. No Catch2, no nexus: peers include it too.
#ifndef NX_TEST_PIPE_IO_H
#define NX_TEST_PIPE_IO_H

#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace nx_test {

inline uint64_t now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

// Writes all `n` bytes; false on an error or a closed pipe.
inline bool write_all(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

// Reads exactly `n` bytes before `end` (now_ms()); false on time out, an
// error or an early end.
inline bool read_exact(int fd, void *p, size_t n, uint64_t end) {
  char *c = static_cast<char *>(p);
  while (n > 0) {
    uint64_t now = now_ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    int pr = poll(&pfd, 1, (int)(end - now));
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      return false;
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    c += r;
    n -= (size_t)r;
  }
  return true;
}

} // namespace nx_test

#endif // NX_TEST_PIPE_IO_H
