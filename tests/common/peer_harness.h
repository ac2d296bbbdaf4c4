// The test process's side of the module tests (tests/tcp, tests/ucx,
// tests/ofi): clocks, the replies peers send back (recorded by handlers,
// checked by the test), the requests every peer serves ("echo", "stall",
// "stats"; see peer_handlers.h), peers started as process contexts, and
// then one part per module. A test file names the module part it needs
// before including this (the modules' peers disagree on the layout of
// their counters, so at most one part can be in a program):
//   #define NX_HARNESS_TCP  // or NX_HARNESS_UCX, NX_HARNESS_OFI
//   #include "peer_harness.h"
#ifndef NX_TESTS_PEER_HARNESS_H
#define NX_TESTS_PEER_HARNESS_H

#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "child_pid.h"
#include "latch.h"
#include "nexus.h"
#include "pattern.h"
#include "pipe_io.h"
#include "runtime_guard.h"

namespace nx_test {

inline void sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

// No child of this process is left, running or unreaped (child_pid.h).
inline bool no_children() { return nxt_no_children() != 0; }

// --- this process's handlers ------------------------------------------------

// The most counters a peer's counters reply carries.
const int PEER_STATS_MAX = 16;

// Replies from peers. Handlers run on whichever thread drives progress,
// where Catch2 may not assert: they record, the test checks. A module's
// part below adds the handlers of replies only its peer sends.
struct client_state {
  latch echoed;  // "echoed" replies
  latch stats_n; // "stats" replies
  latch stalled; // "stalled" replies
  latch pid_n;   // "pid" replies (ucx)
  latch deaths;  // lost processes reported to the error callback (ucx)
  latch hello;   // "hello" replies (ofi)
  latch seq;     // "seq" RSRs the peer sends (ofi)
  std::mutex m;
  std::vector<uint64_t> tags; // echoed tags in arrival order
  std::atomic<long> echo_bad{0};
  uint64_t stats[PEER_STATS_MAX] = {};
  uint64_t pid = 0;
  nx_gp_t pid_gp = NX_GP_NULL;
  std::atomic<uint64_t> dead_context{0};
  std::string proto, info;    // from "hello"
  std::vector<uint64_t> seqs; // "seq" indices, in arrival order
  std::atomic<long> seq_bad{0};
};

inline client_state the_client;

// "echoed": u64 tag, u64 n, bytes[n], the pattern of tag.
inline void on_echoed(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t tag = 0, n = 0;
  bool ok = nx_get_uint64(buf, &tag) == 0 && nx_get_uint64(buf, &n) == 0 &&
            n <= ((uint64_t)1 << 32);
  if (ok) {
    std::vector<uint8_t> data(n);
    ok = (n == 0 || nx_get_bytes(buf, data.data(), n) == 0) &&
         pattern_check(data.data(), n, tag) == n;
  }
  if (!ok)
    the_client.echo_bad++;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.push_back(tag);
  }
  the_client.echoed.add();
}

// "stats": u64[up to PEER_STATS_MAX], the peer's counters.
inline void on_stats(nx_context_t *, void *, nx_buffer_t *buf) {
  // The array carries its count, which a read must name: try each.
  uint64_t s[PEER_STATS_MAX] = {};
  for (size_t n = PEER_STATS_MAX; n > 0; n--)
    if (nx_get_uint64_array(buf, s, n) == 0)
      break;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    std::memcpy(the_client.stats, s, sizeof(s));
  }
  the_client.stats_n.add();
}

inline void on_stalled(nx_context_t *, void *, nx_buffer_t *) {
  the_client.stalled.add();
}

struct handler_entry {
  const char *name;
  nx_handler_fn fn;
};

// Registers the reply handlers in this process's initial context ("echoed",
// "stats", "stalled", then `extra`), sets `error_cb`
// when given, and makes the gp replies go to. nx_init first. Each module's
// part names its own as client_scope.
class reply_scope {
public:
  explicit reply_scope(std::initializer_list<handler_entry> extra = {},
                       nx_error_cb error_cb = nullptr)
      : error_cb_(error_cb) {
    nx_context_t *self = nx_context_self();
    ok_ = self != nullptr;
    const handler_entry common[] = {
        {"echoed", on_echoed}, {"stats", on_stats}, {"stalled", on_stalled}};
    for (const handler_entry &h : common)
      ok_ = ok_ && nx_handler_register(self, h.name, h.fn,
                                       NX_HANDLER_NONTHREADED, nullptr) == 0;
    for (const handler_entry &h : extra)
      ok_ = ok_ && nx_handler_register(self, h.name, h.fn,
                                       NX_HANDLER_NONTHREADED, nullptr) == 0;
    if (error_cb_ != nullptr)
      ok_ = ok_ && nx_error_cb_set(error_cb_, nullptr) == 0;
    ok_ = ok_ && nx_gp_make(&the_client, &me) == 0;
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.clear();
    the_client.seqs.clear();
    the_client.echo_bad = 0;
    the_client.seq_bad = 0;
  }
  ~reply_scope() {
    if (error_cb_ != nullptr)
      nx_error_cb_set(nullptr, nullptr);
    std::lock_guard<std::mutex> g(the_client.m);
    nx_gp_release(&the_client.pid_gp);
    nx_gp_release(&me);
  }
  reply_scope(const reply_scope &) = delete;
  reply_scope &operator=(const reply_scope &) = delete;
  bool ok() const { return ok_; }
  nx_gp_t me = NX_GP_NULL;

private:
  nx_error_cb error_cb_;
  bool ok_ = false;
};

// What most cases start with, as a Catch2 fixture (TEST_CASE_METHOD): the
// module's environment (Setup, before nx_init), the runtime and the reply
// handlers (Scope, the module's client_scope). Each module's part names
// its own as session.
template <void (*Setup)(), class Scope> class test_session {
  struct env {
    env() { Setup(); }
  } env_;

protected:
  test_session() {
    REQUIRE(rt.init_rc() == 0);
    REQUIRE(cs.ok());
  }
  runtime_guard rt;
  Scope cs;
};

// --- requests every peer serves ---------------------------------------------

// Sends "echo" with `n` pattern bytes seeded by `tag`. Returns
// nx_rsr_send_flags's result (or the first failing call's).
inline int send_echo(const nx_gp_t &peer, const nx_gp_t &me, uint64_t tag,
                     size_t n, unsigned flags = 0) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "echo",
                           nx_sizeof_gp(&me) + 2 * nx_sizeof_int64(1) +
                               nx_sizeof_bytes(n));
  if (r != 0)
    return r;
  std::vector<uint8_t> data(n);
  pattern_fill(data.data(), n, tag);
  if ((r = nx_put_gp(b, &me)) != 0 || (r = nx_put_uint64(b, tag)) != 0 ||
      (r = nx_put_uint64(b, n)) != 0 ||
      (r = nx_put_bytes(b, data.data(), n)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, flags);
}

// One round trip: true when the echo of `tag` came back intact within
// `seconds`.
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

// Sends `handler` with the gp `me` as its only argument.
inline int send_with_gp(const nx_gp_t &peer, const char *handler,
                        const nx_gp_t &me) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, handler, nx_sizeof_gp(&me));
  if (r != 0)
    return r;
  if ((r = nx_put_gp(b, &me)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

// Sends "stall": the peer answers "stalled", then its driver sleeps `ms`.
inline int send_stall(const nx_gp_t &peer, const nx_gp_t &me, uint32_t ms) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "stall",
                           nx_sizeof_gp(&me) + nx_sizeof_int32(1));
  if (r != 0)
    return r;
  if ((r = nx_put_gp(b, &me)) != 0 || (r = nx_put_uint32(b, ms)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

// Asks the peer for its N counters ("stats"); false if no answer within
// `seconds`.
template <size_t N>
inline bool peer_stats(const nx_gp_t &peer, const nx_gp_t &me,
                       uint64_t (&out)[N], int seconds = 20) {
  static_assert(N <= PEER_STATS_MAX, "more counters than a reply carries");
  long before = the_client.stats_n.get();
  if (send_with_gp(peer, "stats", me) != 0 ||
      the_client.stats_n.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  std::memcpy(out, the_client.stats, sizeof(out));
  return true;
}

// --- peers started as process contexts --------------------------------------

// A peer program started on this host by nx_context_create (which waits for
// it under a timeout). The destructor destroys it, which kills and reaps it
// if need be.
class context_peer {
public:
  explicit context_peer(const char *path) : path_(path) {}
  ~context_peer() { destroy(); }
  context_peer(const context_peer &) = delete;
  context_peer &operator=(const context_peer &) = delete;

  // Starts the program with `arg` (if any) as argv[1]. Returns 0 or
  // nx_context_create's error.
  int start(const char *arg = nullptr) {
    nx_node_t node;
    int r = nx_nodes_acquire("localhost", 1, &node);
    if (r != 0)
      return r;
    char *const argv[] = {(char *)path_, (char *)arg, nullptr};
    return nx_context_create(&node, path_, argv, &gp);
  }

  void destroy() {
    if (!nx_gp_is_null(&gp))
      nx_context_destroy(&gp);
    nx_gp_release(&gp);
  }

  nx_gp_t gp = NX_GP_NULL;

private:
  const char *path_;
};

} // namespace nx_test

// --- tcp: peers started with posix_spawn (always killed and reaped) that
// hand their gp over a pipe; the environment every process of a test shares.
#ifdef NX_HARNESS_TCP

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

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

// CLOCK_REALTIME in ns (the peer's "blast" starts at such a time).
inline uint64_t realtime_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// "introduce": `other` becomes the target of `to`'s "blast".
inline int introduce(const nx_gp_t &to, const nx_gp_t &other) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &to, "introduce", nx_sizeof_gp(&other));
  if (r != 0)
    return r;
  if ((r = nx_put_gp(b, &other)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

// "blast": from `start` (realtime_ns), `to`'s main thread sends `count`
// "seq" RSRs to its target.
inline int blast(const nx_gp_t &to, uint32_t count, uint64_t start) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &to, "blast",
                           nx_sizeof_int32(1) + nx_sizeof_int64(1));
  if (r != 0)
    return r;
  if ((r = nx_put_uint32(b, count)) != 0 ||
      (r = nx_put_uint64(b, start)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send(b);
}

} // namespace tcp_test

#endif // NX_HARNESS_TCP

// --- ucx: peer processes (process contexts running ucx_peer, always
// destroyed) and the replies only this peer sends.
#ifdef NX_HARNESS_UCX

#include <cstdlib>

#include "ucx_common.h"

namespace ucx_test {

using namespace nx_test;

// Call before nx_init: this process, and the peers it creates (they
// inherit the environment), reach each other over ucx only.
inline void setup_env() {
  setenv("NX_PROTOCOLS", "ucx,local", 1);
  unsetenv("NX_UCX_QUEUE_MAX");
}

// --- this process's handlers ------------------------------------------------

inline void on_pid(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t pid = 0;
  nx_gp_t gp = NX_GP_NULL;
  nx_get_uint64(buf, &pid);
  nx_get_gp(buf, &gp);
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.pid = pid;
    nx_gp_release(&the_client.pid_gp);
    the_client.pid_gp = gp;
  }
  the_client.pid_n.add();
}

// A lost process is reported with handler 0.
inline void on_error(int err, uint64_t context, uint32_t handler, void *) {
  if (err == NX_EPEERDEAD && handler == 0) {
    the_client.dead_context = context;
    the_client.deaths.add();
  }
}

// The common reply handlers, "pid", and the error callback.
class client_scope : public reply_scope {
public:
  client_scope() : reply_scope({{"pid", on_pid}}, on_error) {}
};

// A case's start: setup_env, the runtime, client_scope.
using session = test_session<setup_env, client_scope>;

// Sends "seq" number `index` of `stream` with `n` pattern bytes.
inline int send_seq(const nx_gp_t &peer, uint32_t stream, uint64_t index,
                    size_t n, unsigned flags = 0) {
  nx_buffer_t *b;
  int r = nx_rsr_init_name(&b, &peer, "seq",
                           nx_sizeof_int32(1) + 2 * nx_sizeof_int64(1) +
                               nx_sizeof_bytes(n));
  if (r != 0)
    return r;
  std::vector<uint8_t> data(n);
  pattern_fill(data.data(), n, seq_seed(stream, index));
  if ((r = nx_put_uint32(b, stream)) != 0 ||
      (r = nx_put_uint64(b, index)) != 0 || (r = nx_put_uint64(b, n)) != 0 ||
      (r = nx_put_bytes(b, data.data(), n)) != 0) {
    nx_buffer_release(b);
    return r;
  }
  return nx_rsr_send_flags(b, flags);
}

// Asks the peer for its pid and a gp ("pid"); false without an answer.
inline bool peer_pid(const nx_gp_t &peer, const nx_gp_t &me, uint64_t *pid,
                     nx_gp_t *gp, int seconds = 20) {
  long before = the_client.pid_n.get();
  if (send_with_gp(peer, "pid", me) != 0 ||
      the_client.pid_n.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  *pid = the_client.pid;
  return nx_gp_copy(&the_client.pid_gp, gp) == 0;
}

// --- peer processes ---------------------------------------------------------

// A ucx_peer process context: start() serves, start("parent") first starts
// a second peer of its own (see ucx_common.h).
class peer_process : public context_peer {
public:
  peer_process() : context_peer(UCX_PEER_PATH) {}
};

} // namespace ucx_test

#endif // NX_HARNESS_UCX

// --- ofi: whether the module loaded (a provider that cannot run here makes
// the whole test a skip), peers started as process contexts, and the
// replies only this peer sends.
#ifdef NX_HARNESS_OFI

#include <cstdio>
#include <cstdlib>

#include "ofi_common.h"

namespace ofi_test {

using namespace nx_test;

// Call before nx_init: RSRs between processes go over ofi (the peer
// inherits the environment), inside this process over local.
inline void setup_env() {
  setenv("NX_PROTOCOLS", "ofi,local", 1);
  unsetenv("NX_OFI_QUEUE_MAX");
  unsetenv("NX_OFI_EAGER_MAX");
  unsetenv("NX_OFI_FRAG_MAX");
}

// The provider that should carry RSRs to a peer on this host: FI_PROVIDER
// when set, else shm.
inline std::string expected_provider() {
  const char *p = std::getenv("FI_PROVIDER");
  return p != nullptr && p[0] != '\0' ? p : "shm";
}

// Whether the ofi module loaded; if not, why.
inline bool module_loaded(std::string *why) {
  int n = nx_module_count();
  for (int i = 0; i < n; i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) != 0 || std::strcmp(info.name, "ofi") != 0)
      continue;
    if (!info.loaded)
      *why = info.reason;
    return info.loaded != 0;
  }
  *why = "no libnx_proto_ofi.so found";
  return false;
}

// --- this process's handlers ------------------------------------------------

inline void on_hello(nx_context_t *, void *, nx_buffer_t *buf) {
  uint32_t pid = 0;
  char proto[16] = {0}, info[128] = {0};
  nx_get_uint32(buf, &pid);
  nx_get_char_array(buf, proto, sizeof(proto));
  nx_get_char_array(buf, info, sizeof(info));
  proto[sizeof(proto) - 1] = info[sizeof(info) - 1] = '\0';
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.pid = pid;
    the_client.proto = proto;
    the_client.info = info;
  }
  the_client.hello.add();
}

inline void on_seq(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t index = 0, n = 0;
  if (nx_get_uint64(buf, &index) != 0 || nx_get_uint64(buf, &n) != 0 ||
      n != seq_size(index)) {
    the_client.seq_bad++;
  } else {
    std::vector<uint8_t> data(n);
    if ((n > 0 && nx_get_bytes(buf, data.data(), n) != 0) ||
        pattern_check(data.data(), n, index) != n)
      the_client.seq_bad++;
  }
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.seqs.push_back(index);
  }
  the_client.seq.add();
}

// The common reply handlers, "hello" and "seq".
class client_scope : public reply_scope {
public:
  client_scope() : reply_scope({{"hello", on_hello}, {"seq", on_seq}}) {}
};

// A case's start: setup_env, the runtime, client_scope (then
// OFI_SKIP_UNLESS_LOADED).
using session = test_session<setup_env, client_scope>;

// Asks the peer who it is; false if no answer within `seconds`.
inline bool peer_hello(const nx_gp_t &peer, const nx_gp_t &me,
                       int seconds = 20) {
  long before = the_client.hello.get();
  return send_with_gp(peer, "hello", me) == 0 &&
         the_client.hello.wait_for(before + 1, seconds) >= before + 1;
}

// --- the peer ---------------------------------------------------------------

// An ofi_peer process, started as a process context; destroyed (and so
// reaped) by the destructor.
class peer_context : public context_peer {
public:
  peer_context() : context_peer(OFI_PEER) {}
};

} // namespace ofi_test

// Ends the test as a skip (meson's 77), with the reason, when the ofi
// module did not load (the provider of this run cannot work here): every
// case of an ofi test needs it, so none of the rest could run either.
// After nx_init.
#define OFI_SKIP_UNLESS_LOADED()                                               \
  do {                                                                         \
    std::string why_;                                                          \
    if (!ofi_test::module_loaded(&why_)) {                                     \
      std::printf("SKIP: the ofi module did not load with FI_PROVIDER=%s: "    \
                  "%s\n",                                                      \
                  ofi_test::expected_provider().c_str(), why_.c_str());        \
      std::fflush(stdout);                                                     \
      std::_Exit(77);                                                          \
    }                                                                          \
  } while (0)

#endif // NX_HARNESS_OFI

#endif // NX_TESTS_PEER_HARNESS_H
