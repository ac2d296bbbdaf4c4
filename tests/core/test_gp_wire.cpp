// Global pointers that arrive from the wire with descriptors of modules this
// process lacks: they are interned and shared, an RSR through them fails
// with NX_EUNREACH, and many threads may intern and release them at once.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <thread>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "nexus/protocol.h"
#include "runtime_guard.h"

namespace {

using inject_fn = int (*)(const void *, const void *, size_t);

// The payload of a frame holding one gp whose only descriptor names "tcp"
// (not loaded here), in the layout of docs/design.md.
std::vector<uint8_t> foreign_gp_payload(uint64_t ctx, uint8_t salt) {
  std::vector<uint8_t> p;
  auto le = [&](uint64_t v, int n) {
    for (int i = 0; i < n; i++)
      p.push_back((uint8_t)(v >> (8 * i)));
  };
  p.push_back(13); // gp tag
  le(ctx, 8);
  le(0x1000, 8);  // address
  p.push_back(1); // one descriptor
  p.push_back(3);
  p.insert(p.end(), {'t', 'c', 'p'});
  le(1, 2);        // wire version
  p.push_back(16); // scope
  for (int i = 0; i < 16; i++)
    p.push_back((uint8_t)(salt + i));
  le(6, 2); // module bytes
  p.insert(p.end(), {127, 0, 0, 1, 0x1f, 0x90});
  return p;
}

struct store {
  std::mutex m;
  std::vector<nx_buffer_t *> kept;
  latch got;
};

void on_keep(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *s = static_cast<store *>(nx_context_data(ctx));
  nx_buffer_retain(b);
  {
    std::lock_guard<std::mutex> g(s->m);
    s->kept.push_back(b);
  }
  s->got.add();
}

} // namespace

TEST_CASE("gps naming a module this process lacks", "[gp][wire]") {
  setenv("NX_PROTO_PATH", FIXTURE_DIR, 1);
  setenv("NX_PROTOCOLS", "local,fixture", 1);
  runtime_guard rt;
  unsetenv("NX_PROTO_PATH");
  unsetenv("NX_PROTOCOLS");
  REQUIRE(rt.init_rc() == 0);
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto inject = reinterpret_cast<inject_fn>(dlsym(h, "nx_fixture_inject"));
  REQUIRE(inject != nullptr);

  store st;
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "keep", on_keep,
                                           NX_HANDLER_NONTHREADED, nullptr);
              },
              &st, &gp) == 0);
  const int frames = 8;
  const uint64_t far_ctx = 0x1234567800000001ull;
  std::vector<uint8_t> payload = foreign_gp_payload(far_ctx, 0x40);
  for (int i = 0; i < frames; i++) {
    uint8_t hdr[NX_FRAME_HDR_SIZE] = {0};
    uint32_t magic = NX_FRAME_MAGIC, handler = nx_handler_id("keep");
    uint64_t ctx = nx_gp_context(&gp), len = payload.size();
    std::memcpy(hdr, &magic, 4);
    hdr[4] = NX_FRAME_VERSION;
    hdr[5] = NX_FORMAT_LITTLE;
    std::memcpy(hdr + 8, &handler, 4);
    std::memcpy(hdr + 16, &ctx, 8);
    std::memcpy(hdr + 32, &len, 8);
    REQUIRE(inject(hdr, payload.data(), payload.size()) == 0);
  }
  REQUIRE(st.got.wait_for(frames) == frames);

  SECTION("no loaded module reaches it: the RSR fails, nothing is misused") {
    nx_buffer_t *b = st.kept[0];
    nx_gp_t far = NX_GP_NULL;
    REQUIRE(nx_get_gp(b, &far) == 0);
    CHECK(nx_gp_context(&far) == far_ctx);
    CHECK(nx_gp_protocol(&far) == nullptr);
    nx_buffer_t *out;
    REQUIRE(nx_rsr_init_name(&out, &far, "anything", 0) == 0);
    CHECK(nx_rsr_send(out) == NX_EUNREACH);
    // Two copies of one encoding share one interned list.
    nx_gp_t again = NX_GP_NULL;
    REQUIRE(nx_buffer_rewind(b) == 0);
    REQUIRE(nx_get_gp(b, &again) == 0);
    CHECK(again.protos == far.protos);
    nx_gp_release(&again);
    nx_gp_release(&far);
  }

  SECTION("8 threads intern and release the same list concurrently") {
    // Each thread owns one buffer; the list's count keeps dropping to zero
    // and coming back, racing lookups against frees.
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < frames; t++)
      threads.emplace_back([&, t] {
        nx_buffer_t *b = st.kept[t];
        for (int i = 0; i < 20000; i++) {
          nx_gp_t g = NX_GP_NULL;
          if (nx_buffer_rewind(b) != 0 || nx_get_gp(b, &g) != 0 ||
              nx_gp_context(&g) != far_ctx)
            errors++;
          nx_gp_release(&g);
        }
      });
    for (auto &th : threads)
      th.join();
    CHECK(errors == 0);
  }

  for (nx_buffer_t *b : st.kept)
    REQUIRE(nx_buffer_release(b) == 0);
  nx_gp_release(&gp);
  dlclose(h);
}
