// Helpers of the ucx tests: the environment every process of a test shares,
// peer processes (process contexts running ucx_peer, always destroyed), and
// this process's side of the peer's handlers.
#ifndef NX_TESTS_UCX_HARNESS_H
#define NX_TESTS_UCX_HARNESS_H

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "ucx_common.h"

namespace ucx_test {

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

// Call before nx_init: this process, and the peers it creates (they
// inherit the environment), reach each other over ucx only.
inline void setup_env() {
  setenv("NX_PROTOCOLS", "ucx,local", 1);
  unsetenv("NX_UCX_QUEUE_MAX");
}

// No child of this process is left, running or unreaped.
inline bool no_children() {
  errno = 0;
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

// --- this process's handlers ------------------------------------------------

// Replies from peers. Handlers run on whichever thread drives progress,
// where Catch2 may not assert: they record, the test checks.
struct client_state {
  latch echoed;
  latch stats_n;
  latch pid_n;
  latch stalled;
  latch deaths;
  std::mutex m;
  std::vector<uint64_t> tags; // echoed tags in arrival order
  std::atomic<long> echo_bad{0};
  uint64_t stats[STAT_COUNT] = {};
  uint64_t pid = 0;
  nx_gp_t pid_gp = NX_GP_NULL;
  std::atomic<uint64_t> dead_context{0};
};

inline client_state the_client;

inline void on_echoed(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t tag = 0, n = 0;
  bool ok = nx_get_uint64(buf, &tag) == 0 && nx_get_uint64(buf, &n) == 0 &&
            n <= ((uint64_t)1 << 30);
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

inline void on_stats(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t s[STAT_COUNT] = {};
  nx_get_uint64_array(buf, s, STAT_COUNT);
  {
    std::lock_guard<std::mutex> g(the_client.m);
    std::memcpy(the_client.stats, s, sizeof(s));
  }
  the_client.stats_n.add();
}

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

inline void on_stalled(nx_context_t *, void *, nx_buffer_t *) {
  the_client.stalled.add();
}

// A lost process is reported with handler 0.
inline void on_error(int err, uint64_t context, uint32_t handler, void *) {
  if (err == NX_EPEERDEAD && handler == 0) {
    the_client.dead_context = context;
    the_client.deaths.add();
  }
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
          nx_handler_register(self, "pid", on_pid, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_handler_register(self, "stalled", on_stalled,
                              NX_HANDLER_NONTHREADED, nullptr) == 0 &&
          nx_error_cb_set(on_error, nullptr) == 0 &&
          nx_gp_make(nullptr, &me) == 0;
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.clear();
    the_client.echo_bad = 0;
  }
  ~client_scope() {
    nx_error_cb_set(nullptr, nullptr);
    std::lock_guard<std::mutex> g(the_client.m);
    nx_gp_release(&the_client.pid_gp);
    nx_gp_release(&me);
  }
  client_scope(const client_scope &) = delete;
  client_scope &operator=(const client_scope &) = delete;
  bool ok() const { return ok_; }
  nx_gp_t me = NX_GP_NULL;

private:
  bool ok_ = false;
};

// Sends "echo" with `n` pattern bytes seeded by `tag`.
inline int send_echo(const nx_gp_t &peer, const nx_gp_t &me, uint64_t tag,
                     size_t n) {
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
  return nx_rsr_send(b);
}

// One round trip: true when the echo of `tag` came back intact within
// `seconds`.
inline bool echo_round_trip(const nx_gp_t &peer, const nx_gp_t &me,
                            uint64_t tag, size_t n, int seconds = 20) {
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

// Asks the peer for its pid and a gp ("pid"); false without an answer.
inline bool peer_pid(const nx_gp_t &peer, const nx_gp_t &me, uint64_t *pid,
                     nx_gp_t *gp, int seconds = 20) {
  long before = the_client.pid_n.get();
  nx_buffer_t *b;
  if (nx_rsr_init_name(&b, &peer, "pid", nx_sizeof_gp(&me)) != 0)
    return false;
  if (nx_put_gp(b, &me) != 0 || nx_rsr_send(b) != 0)
    return false;
  if (the_client.pid_n.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  *pid = the_client.pid;
  return nx_gp_copy(&the_client.pid_gp, gp) == 0;
}

// --- peer processes ---------------------------------------------------------

// A ucx_peer process context. The destructor destroys it (which kills and
// reaps it if need be).
class peer_process {
public:
  peer_process() = default;
  ~peer_process() { destroy(); }
  peer_process(const peer_process &) = delete;
  peer_process &operator=(const peer_process &) = delete;

  // Returns 0 or nx_context_create's error.
  int start(const char *mode = "serve") {
    nx_node_t node;
    int r = nx_nodes_acquire("localhost", 1, &node);
    if (r != 0)
      return r;
    char *const argv[] = {(char *)UCX_PEER_PATH, (char *)mode, nullptr};
    return nx_context_create(&node, UCX_PEER_PATH, argv, &gp);
  }

  void destroy() {
    if (!nx_gp_is_null(&gp)) {
      nx_context_destroy(&gp);
      nx_gp_release(&gp);
    }
  }

  nx_gp_t gp = NX_GP_NULL;
};

} // namespace ucx_test

#endif // NX_TESTS_UCX_HARNESS_H
