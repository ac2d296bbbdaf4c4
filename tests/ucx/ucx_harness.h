// Helpers of the ucx tests: the environment every process of a test shares,
// peer processes (process contexts running ucx_peer, always destroyed), and
// the replies only this peer sends; the rest is tests/common/peer_harness.h.
#ifndef NX_TESTS_UCX_HARNESS_H
#define NX_TESTS_UCX_HARNESS_H

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "nexus.h"
#include "peer_harness.h"
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

#endif // NX_TESTS_UCX_HARNESS_H
