// This process's side of the module tests (tests/tcp, tests/ucx, tests/ofi):
// clocks, the replies peers send back (recorded by handlers, checked by the
// test), the requests every peer serves ("echo", "stall", "stats"; see
// peer_handlers.h) and peers started as process contexts. What only one module
// needs stays in its <module>_harness.h.
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

#include "latch.h"
#include "nexus.h"
#include "pattern.h"
#include "runtime_guard.h"

namespace nx_test {

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

// No child of this process is left, running or unreaped.
inline bool no_children() {
  errno = 0;
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

// --- this process's handlers ------------------------------------------------

// The most counters a peer's counters reply carries.
const int PEER_STATS_MAX = 16;

// Replies from peers. Handlers run on whichever thread drives progress,
// where Catch2 may not assert: they record, the test checks. A module's
// harness adds the handlers of replies only its peer sends.
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
// harness names its own as client_scope.
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
// handlers (Scope, the module's client_scope). Each module's harness names
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

#endif // NX_TESTS_PEER_HARNESS_H
