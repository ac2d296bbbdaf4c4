// Helpers of the tcp tests: the environment every process of a test
// shares and peer processes (started with posix_spawn, always killed and
// reaped); the client side of the peer's handlers is peer_harness.h's.
#ifndef NX_TESTS_TCP_HARNESS_H
#define NX_TESTS_TCP_HARNESS_H

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "nexus.h"
#include "peer_harness.h"
#include "tcp_common.h"

extern char **environ;

namespace tcp_test {

using namespace nx_test;

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

// The common reply handlers ("echoed", "stats", "stalled").
using client_scope = reply_scope;

// A case's start: setup_env, the runtime, client_scope.
using session = test_session<setup_env, client_scope>;

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
