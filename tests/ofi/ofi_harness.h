// Helpers of the ofi tests: the environment, whether the module loaded (a
// provider that cannot run here is skipped loudly), peer processes started
// as process contexts, and this process's side of the peer's handlers.
#ifndef NX_TESTS_OFI_HARNESS_H
#define NX_TESTS_OFI_HARNESS_H

#include <catch2/catch.hpp>

#include <errno.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "ofi_common.h"

namespace ofi_test {

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

// No child of this process is left, running or unreaped.
inline bool no_children() {
  errno = 0;
  return waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

// --- this process's handlers ------------------------------------------------

// Handlers run on whichever thread drives progress, where Catch2 may not
// assert: they record, the test checks.
struct client_state {
  latch echoed, hello, report, seq;
  std::mutex m;
  std::vector<uint64_t> tags; // echoed tags, in arrival order
  std::atomic<long> echo_bad{0};
  uint32_t pid = 0;
  std::string proto, info;
  uint64_t report_v[REPORT_COUNT] = {};
  std::vector<uint64_t> seqs; // "seq" indices, in arrival order
  std::atomic<long> seq_bad{0};
};

inline client_state the_client;

inline void on_echoed(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t tag = 0, n = 0;
  uint32_t ok = 0;
  if (nx_get_uint64(buf, &tag) != 0 || nx_get_uint32(buf, &ok) != 0 ||
      nx_get_uint64(buf, &n) != 0 || n > ((uint64_t)1 << 30)) {
    the_client.echo_bad++;
    the_client.echoed.add();
    return;
  }
  std::vector<uint8_t> data(n);
  if (!ok || (n > 0 && nx_get_bytes(buf, data.data(), n) != 0) ||
      !ofi_pattern_ok(data.data(), n, tag))
    the_client.echo_bad++;
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.push_back(tag);
  }
  the_client.echoed.add();
}

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

inline void on_report(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t v[REPORT_COUNT] = {};
  nx_get_uint64_array(buf, v, REPORT_COUNT);
  {
    std::lock_guard<std::mutex> g(the_client.m);
    std::memcpy(the_client.report_v, v, sizeof(v));
  }
  the_client.report.add();
}

inline void on_seq(nx_context_t *, void *, nx_buffer_t *buf) {
  uint64_t index = 0, n = 0;
  if (nx_get_uint64(buf, &index) != 0 || nx_get_uint64(buf, &n) != 0 ||
      n != seq_size(index)) {
    the_client.seq_bad++;
  } else {
    std::vector<uint8_t> data(n);
    if ((n > 0 && nx_get_bytes(buf, data.data(), n) != 0) ||
        !ofi_pattern_ok(data.data(), n, index))
      the_client.seq_bad++;
  }
  {
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.seqs.push_back(index);
  }
  the_client.seq.add();
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
          nx_handler_register(self, "hello", on_hello, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_handler_register(self, "report", on_report, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_handler_register(self, "seq", on_seq, NX_HANDLER_NONTHREADED,
                              nullptr) == 0 &&
          nx_gp_make(&the_client, &me) == 0;
    std::lock_guard<std::mutex> g(the_client.m);
    the_client.tags.clear();
    the_client.seqs.clear();
    the_client.echo_bad = 0;
    the_client.seq_bad = 0;
  }
  ~client_scope() { nx_gp_release(&me); }
  client_scope(const client_scope &) = delete;
  client_scope &operator=(const client_scope &) = delete;
  bool ok() const { return ok_; }
  nx_gp_t me = NX_GP_NULL;

private:
  bool ok_ = false;
};

// --- the peer ---------------------------------------------------------------

// An ofi_peer process, started as a process context; destroyed (and so
// reaped) by the destructor.
class peer_context {
public:
  peer_context() = default;
  ~peer_context() {
    if (!nx_gp_is_null(&gp))
      nx_context_destroy(&gp);
    nx_gp_release(&gp);
  }
  peer_context(const peer_context &) = delete;
  peer_context &operator=(const peer_context &) = delete;

  int create() {
    nx_node_t node;
    int r = nx_nodes_acquire("localhost", 1, &node);
    if (r != 0)
      return r;
    char *const argv[] = {(char *)"ofi_peer", nullptr};
    return nx_context_create(&node, OFI_PEER, argv, &gp);
  }

  nx_gp_t gp = NX_GP_NULL;
};

// Sends "echo" with `n` pattern bytes seeded by `tag`.
inline int send_echo(const nx_gp_t &peer, const nx_gp_t &me, uint64_t tag,
                     size_t n) {
  std::vector<uint8_t> data(n);
  ofi_pattern_fill(data.data(), n, tag);
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

// Sends a handler whose only argument is the gp `me`.
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

// Asks the peer who it is; false if no answer within `seconds`.
inline bool peer_hello(const nx_gp_t &peer, const nx_gp_t &me,
                       int seconds = 20) {
  long before = the_client.hello.get();
  return send_with_gp(peer, "hello", me) == 0 &&
         the_client.hello.wait_for(before + 1, seconds) >= before + 1;
}

// Asks the peer for its counters; false if no answer within `seconds`.
inline bool peer_report(const nx_gp_t &peer, const nx_gp_t &me,
                        uint64_t (&out)[REPORT_COUNT], int seconds = 20) {
  long before = the_client.report.get();
  if (send_with_gp(peer, "report", me) != 0 ||
      the_client.report.wait_for(before + 1, seconds) < before + 1)
    return false;
  std::lock_guard<std::mutex> g(the_client.m);
  std::memcpy(out, the_client.report_v, sizeof(out));
  return true;
}

} // namespace ofi_test

// Skips the rest of a test case, loudly, when the ofi module did not load
// (the provider of this run cannot work here). After nx_init.
#define OFI_SKIP_UNLESS_LOADED()                                               \
  do {                                                                         \
    std::string why_;                                                          \
    if (!ofi_test::module_loaded(&why_)) {                                     \
      WARN("SKIPPED: the ofi module did not load with FI_PROVIDER="            \
           << ofi_test::expected_provider() << ": " << why_);                  \
      return;                                                                  \
    }                                                                          \
  } while (0)

#endif // NX_TESTS_OFI_HARNESS_H
