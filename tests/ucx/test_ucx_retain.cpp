// Received buffers kept past their handler over ucx: from 1 KiB up to the
// largest eager size the module leaves the payload in UCX's memory
// (frame_wrap, UCP_AM_FLAG_PERSISTENT_DATA) and gives it back when the
// buffer is freed. A handler retains every reply; another thread reads each
// (nx_get_*, a get in place, nx_buffer_bytes) and releases it, or the
// program still holds them at nx_finalize, reads them after it and releases
// them then. Under AddressSanitizer a payload given back twice, read after
// it went back, or never freed fails the run.
#include <catch2/catch.hpp>

#include <condition_variable>
#include <deque>
#include <thread>

#include "runtime_guard.h"
#define NX_HARNESS_UCX
#include "peer_harness.h"

using namespace ucx_test;

namespace {

// The replies the handler kept, for the reader.
struct keeper {
  std::mutex m;
  std::condition_variable cv;
  std::deque<nx_buffer_t *> q;
  int kept = 0;
  int bad = 0; // retains that failed
};

keeper kept;

void on_keep(nx_context_t *, void *, nx_buffer_t *buf) {
  std::lock_guard<std::mutex> g(kept.m);
  if (nx_buffer_retain(buf) != 0) {
    kept.bad++;
    return;
  }
  kept.q.push_back(buf);
  kept.kept++;
  kept.cv.notify_all();
}

int keep_init(nx_context_t *ctx, void *) {
  return nx_handler_register(ctx, "echoed", on_keep, NX_HANDLER_NONTHREADED,
                             nullptr);
}

// Waits at most `seconds` for the next kept buffer; nullptr on timeout.
nx_buffer_t *next_kept(int seconds) {
  std::unique_lock<std::mutex> g(kept.m);
  if (!kept.cv.wait_for(g, std::chrono::seconds(seconds),
                        [] { return !kept.q.empty(); }))
    return nullptr;
  nx_buffer_t *b = kept.q.front();
  kept.q.pop_front();
  return b;
}

const size_t sizes[] = {8, 1024, 4096, 8000, 100000};
const int nsizes = sizeof(sizes) / sizeof(sizes[0]);

// An "echoed" reply: u64 tag, u64 n, n pattern bytes of tag, n the size
// the tag asked for. Reads it twice (the whole payload, then a get in
// place), and says whether it was right and whether its payload lay in
// UCX's memory (8 past a 16-aligned address: the core's start 16-aligned).
bool reply_ok(nx_buffer_t *b, uint64_t *tag, bool *in_ucx) {
  const void *all;
  size_t len;
  uint64_t n;
  const void *bytes;
  if (nx_buffer_bytes(b, &all, &len) != 0 || nx_get_uint64(b, tag) != 0 ||
      nx_get_uint64(b, &n) != 0 || nx_get_bytes_ptr(b, &bytes, n) != 0)
    return false;
  *in_ucx = ((uintptr_t)all & 15) == 8;
  if (n != sizes[*tag % nsizes])
    return false;
  const uint8_t *p = static_cast<const uint8_t *>(bytes);
  return p >= all && p + n <= static_cast<const uint8_t *>(all) + len &&
         pattern_check(p, n, *tag) == n;
}

} // namespace

TEST_CASE("Replies retained in the handler are read and released on another "
          "thread",
          "[ucx]") {
  setup_env();
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t keep = NX_GP_NULL;
  REQUIRE(nx_context_create_local(keep_init, nullptr, &keep) == 0);
  const int count = 200;
  int good = 0, in_ucx = 0;
  {
    peer_process peer;
    REQUIRE(peer.start() == 0);
    // The reader releases as it goes, while the handler keeps retaining.
    std::thread reader([&] {
      for (int i = 0; i < count; i++) {
        nx_buffer_t *b = next_kept(30);
        if (b == nullptr)
          return;
        uint64_t tag;
        bool ucx;
        if (reply_ok(b, &tag, &ucx) && nx_buffer_release(b) == 0)
          good++;
        in_ucx += ucx;
      }
    });
    for (int i = 0; i < count; i++)
      REQUIRE(send_echo(peer.gp, keep, (uint64_t)i, sizes[i % nsizes]) == 0);
    reader.join();
  }
  INFO("payloads read in UCX's memory: " << in_ucx);
  CHECK(good == count);
  CHECK(kept.bad == 0);
  nx_gp_release(&keep);
}

TEST_CASE("Replies still retained at nx_finalize read right after it",
          "[ucx]") {
  setup_env();
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t keep = NX_GP_NULL;
  REQUIRE(nx_context_create_local(keep_init, nullptr, &keep) == 0);
  const int count = 20;
  std::vector<nx_buffer_t *> held;
  {
    peer_process peer;
    REQUIRE(peer.start() == 0);
    for (int i = 0; i < count; i++)
      REQUIRE(send_echo(peer.gp, keep, (uint64_t)i, sizes[i % nsizes]) == 0);
    for (int i = 0; i < count; i++) {
      nx_buffer_t *b = next_kept(30);
      REQUIRE(b != nullptr);
      held.push_back(b);
    }
  }
  nx_gp_release(&keep);
  REQUIRE(rt.finalize() == 0);
  // The modules are gone: what UCX held was copied out at nx_finalize.
  int good = 0;
  for (nx_buffer_t *b : held) {
    uint64_t tag;
    bool ucx;
    if (reply_ok(b, &tag, &ucx) && !ucx && nx_buffer_release(b) == 0)
      good++;
  }
  CHECK(good == count);
  CHECK(kept.bad == 0);
}
