// Helpers of the tcp tests: the environment every process of a test
// shares, peer processes (started with posix_spawn, always killed and
// reaped), and this process's side of the peer's handlers.
#ifndef NX_TESTS_TCP_HARNESS_H
#define NX_TESTS_TCP_HARNESS_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "tcp_common.h"

extern char **environ;

namespace tcp_test {

inline uint64_t now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

inline void sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

// The key of this test's computation (random per test process), as hex.
inline const std::string &key_hex() {
  static std::string key;
  if (key.empty()) {
    uint8_t raw[16] = {};
    FILE *f = std::fopen("/dev/urandom", "rb");
    if (f == nullptr || std::fread(raw, 1, sizeof(raw), f) != sizeof(raw))
      for (unsigned i = 0; i < sizeof(raw); i++)
        raw[i] = (uint8_t)(i * 37 + (unsigned)getpid());
    if (f != nullptr)
      std::fclose(f);
    char hex[33];
    for (unsigned i = 0; i < 16; i++)
      std::snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    key = hex;
  }
  return key;
}

// Call before nx_init: this process speaks tcp only, with the test's key.
inline void setup_env() {
  setenv("NX_KEY", key_hex().c_str(), 1);
  setenv("NX_PROTOCOLS", "tcp", 1);
  unsetenv("NX_TCP_LISTEN");
  unsetenv("NX_TCP_QUEUE_MAX");
  unsetenv("NX_TCP_HANDSHAKE_MS");
}

// --- this process's handlers ------------------------------------------------

// Replies from peers. Handlers run on whichever thread drives progress,
// where Catch2 may not assert: they record, the test checks.
struct client_state {
  latch echoed;
  latch stats_n;
  latch stalled;
  std::mutex m;
  std::vector<uint64_t> tags; // echoed tags in arrival order
  std::atomic<long> echo_bad{0};
  uint64_t stats[STAT_COUNT] = {};
};

inline client_state the_client;

inline void on_echoed(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t tag = 0, n = 0;
  if (nx_get_uint64(buf, &tag) != 0 || nx_get_uint64(buf, &n) != 0 ||
      n > ((uint64_t)1 << 32)) {
    the_client.echo_bad++;
    the_client.echoed.add();
    return;
  }
  std::vector<uint8_t> data(n);
  if ((n > 0 && nx_get_bytes(buf, data.data(), n) != 0) ||
      pattern_check(data.data(), n, tag) != n)
    the_client.echo_bad++;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.push_back(tag);
  }
  the_client.echoed.add();
}

inline void on_stats(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t s[STAT_COUNT] = {};
  nx_get_uint64_array(buf, s, STAT_COUNT);
  {
    std::lock_guard<std::mutex> g(the_client.m);
    std::memcpy(the_client.stats, s, sizeof(s));
  }
  the_client.stats_n.add();
}

inline void on_stalled(nx_context_t *, void *, nx_buffer_t *) {
  the_client.stalled.add();
}

// Registers the reply handlers in this process's initial context and makes
// the gp replies go to. nx_init first.
class client_scope {
public:
  client_scope() {
    nx_context_t *self = nx_context_self();
    ok_ = self != nullptr &&
          nx_handler_register(self, "echoed", on_echoed, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_handler_register(self, "stats", on_stats, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_handler_register(self, "stalled", on_stalled,
                              NX_HANDLER_NONTHREADED, nullptr) == 0 &&
          nx_gp_make(&the_client, &me) == 0;
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.clear();
    the_client.echo_bad = 0;
  }
  ~client_scope() { nx_gp_release(&me); }
  client_scope(const client_scope &) = delete;
  client_scope &operator=(const client_scope &) = delete;
  bool ok() const { return ok_; }
  nx_gp_t me = NX_GP_NULL;

private:
  bool ok_ = false;
};

// Sends "echo" with `n` pattern bytes seeded by `tag`. Returns
// nx_rsr_send's result (or the first failing call's).
inline int send_echo(const nx_gp_t &peer, const nx_gp_t &me, uint64_t tag,
                     size_t n, unsigned flags = 0) {
  std::vector<uint8_t> data(n);
  pattern_fill(data.data(), n, tag);
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "echo",
                           nx_sizeof_gp(&me) + 2 * nx_sizeof_int64(1) +
                               nx_sizeof_bytes(n));
  if (r != 0)
    return r;
  if ((r = nx_put_gp(b, &me)) != 0 || (r = nx_put_uint64(b, tag)) != 0 ||
      (r = nx_put_uint64(b, n)) != 0 ||
      (r = nx_put_bytes(b, data.data(), n)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, flags);
}

// One round trip: returns true when the echo of `tag` came back intact
// within `seconds`.
inline bool echo_round_trip(const nx_gp_t &peer, const nx_gp_t &me,
                            uint64_t tag, size_t n, int seconds = 30) {
  long before = the_client.echoed.get();
  long bad = the_client.echo_bad;
  if (send_echo(peer, me, tag, n) != 0)
    return false;
  if (the_client.echoed.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  return the_client.echo_bad == bad && !the_client.tags.empty() &&
         the_client.tags.back() == tag;
}

// Asks the peer for its counters; false if no answer within `seconds`.
inline bool peer_stats(const nx_gp_t &peer, const nx_gp_t &me,
                       uint64_t (&out)[STAT_COUNT], int seconds = 20) {
  long before = the_client.stats_n.get();
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &peer, "stats", nx_sizeof_gp(&me)) != 0)
    return false;
  if (nx_put_gp(b, &me) != 0 || nx_rsr_send(b) != 0)
    return false;
  if (the_client.stats_n.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  std::memcpy(out, the_client.stats, sizeof(out));
  return true;
}

// Sends a handler with no arguments.
inline int send_plain(const nx_gp_t &peer, const char *handler) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, handler, 0);
  return r != 0 ? r : nx_rsr_send(b);
}

// --- peer processes ---------------------------------------------------------

// A tcp_peer process. The destructor kills and reaps it if it still runs.
class peer_process {
public:
  peer_process() = default;
  ~peer_process() {
    kill_now();
    nx_gp_release(&gp);
  }
  peer_process(const peer_process &) = delete;
  peer_process &operator=(const peer_process &) = delete;

  // Starts the peer with extra NAME=value settings and reads its gp.
  // Returns "" or what went wrong.
  std::string start(const std::vector<std::string> &extra = {},
                    int timeout_s = 60) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
      return "pipe2 failed";
    const int child_fd = fds[1] == 100 ? 101 : 100;
    std::vector<std::string> env;
    const char *own[] = {"NX_KEY", "NX_PROTOCOLS", nullptr};
    for (char **e = environ; *e != nullptr; e++) {
      bool skip = false;
      for (const char **o = own; *o != nullptr; o++)
        if (std::strncmp(*e, *o, std::strlen(*o)) == 0 &&
            (*e)[std::strlen(*o)] == '=')
          skip = true;
      for (const std::string &x : extra)
        if (std::strncmp(*e, x.c_str(), x.find('=') + 1) == 0)
          skip = true;
      if (!skip)
        env.push_back(*e);
    }
    env.push_back("NX_KEY=" + key_hex());
    env.push_back("NX_PROTOCOLS=tcp");
    for (const std::string &x : extra)
      env.push_back(x);
    std::vector<char *> envp;
    for (std::string &s : env)
      envp.push_back(&s[0]);
    envp.push_back(nullptr);
    std::string fd_arg = std::to_string(child_fd);
    std::string parent_arg = std::to_string(getpid());
    std::string path = TCP_PEER_PATH;
    char *argv[] = {&path[0], &fd_arg[0], &parent_arg[0], nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], child_fd);
    int r = posix_spawn(&pid, path.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (r != 0) {
      pid = -1;
      close(fds[0]);
      return std::string("posix_spawn: ") + std::strerror(r);
    }
    std::string err = read_hello(fds[0], timeout_s);
    close(fds[0]);
    return err;
  }

  // Sends "quit" and waits for the exit. Returns the exit status, or -1
  // (after killing it) if it did not exit within `timeout_s`.
  int quit(int timeout_s = 30) {
    if (pid <= 0)
      return -1;
    send_plain(gp, "quit");
    uint64_t end = now_ms() + (uint64_t)timeout_s * 1000u;
    while (now_ms() < end) {
      int st;
      pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      sleep_ms(5);
    }
    kill_now();
    return -1;
  }

  void kill_now() {
    if (pid <= 0)
      return;
    kill(pid, SIGKILL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
      ;
    pid = -1;
  }

  pid_t pid = -1;
  nx_gp_t gp = NX_GP_NULL;
  uint16_t port = 0; // its IPv4 listening port

private:
  static bool read_exact(int fd, void *p, size_t n, uint64_t end) {
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

  std::string read_hello(int fd, int timeout_s) {
    uint64_t end = now_ms() + (uint64_t)timeout_s * 1000u;
    peer_hello h;
    if (!read_exact(fd, &h, sizeof(h), end) || h.magic != PEER_HELLO_MAGIC ||
        h.len > 65536)
      return "no gp from the peer";
    std::vector<uint8_t> bytes(h.len);
    if (!read_exact(fd, bytes.data(), h.len, end))
      return "truncated gp from the peer";
    port = (uint16_t)h.port;
    nx_buffer_t *b;
    if (nx_buffer_from_bytes(bytes.data(), bytes.size(), (int)h.format, &b) !=
        0)
      return "nx_buffer_from_bytes failed";
    int r = nx_get_gp(b, &gp);
    nx_buffer_release(b);
    return r == 0 ? "" : "nx_get_gp failed";
  }
};

} // namespace tcp_test

#endif // NX_TESTS_TCP_HARNESS_H
