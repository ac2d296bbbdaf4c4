// Helpers of the ofi tests: the environment, whether the module loaded (a
// provider that cannot run here is skipped loudly), peer processes started
// as process contexts, and the replies only this peer sends; the rest is
// tests/common/peer_harness.h.
#ifndef NX_TESTS_OFI_HARNESS_H
#define NX_TESTS_OFI_HARNESS_H

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "nexus.h"
#include "ofi_common.h"
#include "peer_harness.h"

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
