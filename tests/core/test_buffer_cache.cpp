// Tests of the cache of large payload blocks in nexus/src/buffers/bufmem.c: a
// freed block serves the next payload of its size class, on any thread; the
// per-class and byte caps hold; NX_BUFFER_CACHE sets the cap or turns the
// cache off; nx_finalize frees what the cache holds; under AddressSanitizer
// a cached block stays poisoned.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "buffers/buffer_cache.h"
#include "nexus.h"
#include "runtime_guard.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace {

nxi_buffer_cache_stats stats() {
  nxi_buffer_cache_stats st;
  nxi_buffer_cache_stats_get(&st);
  return st;
}

// Sets NX_BUFFER_CACHE for one test case's nx_init.
struct cache_env {
  explicit cache_env(const char *value) { setenv("NX_BUFFER_CACHE", value, 1); }
  ~cache_env() { unsetenv("NX_BUFFER_CACHE"); }
};

nx_buffer_t *create(size_t hint) {
  nx_buffer_t *b = nullptr;
  REQUIRE(nx_buffer_create(hint, &b) == 0);
  return b;
}

const void *data_of(nx_buffer_t *b) {
  const void *d;
  size_t len;
  REQUIRE(nx_buffer_bytes(b, &d, &len) == 0);
  return d;
}

std::atomic<int> handled{0};

void on_large(nx_context_t *, void *, nx_buffer_t *buf) {
  static char out[300 * 1024];
  if (nx_get_bytes(buf, out, sizeof(out)) == 0)
    handled++;
}

} // namespace

TEST_CASE("a freed large payload serves the next one of its class",
          "[buffer][cache]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nxi_buffer_cache_stats st0 = stats();
  CHECK(st0.cap == (size_t)64 << 20);
  CHECK(st0.blocks == 0);

  nx_buffer_t *a = create(1 << 20);
  const void *block = data_of(a);
  std::vector<char> payload(1 << 20, 'x');
  REQUIRE(nx_put_bytes(a, payload.data(), payload.size() - 5) == 0);
  REQUIRE(nx_buffer_release(a) == 0);
  nxi_buffer_cache_stats st1 = stats();
  CHECK(st1.blocks == 1);
  CHECK(st1.bytes >= (size_t)1 << 20); // its class: 1 MiB and a little
  CHECK(st1.bytes < ((size_t)1 << 20) + ((size_t)1 << 18));

  // A little smaller is the same class: the same block comes back.
  nx_buffer_t *b = create((1 << 20) - 1000);
  CHECK(data_of(b) == block);
  nxi_buffer_cache_stats st2 = stats();
  CHECK(st2.blocks == 0);
  CHECK(st2.hits == st1.hits + 1);

  // Small payloads never touch it.
  nx_buffer_t *s = create(1000);
  CHECK(stats().misses == st2.misses);
  nx_buffer_release(s);
  nx_buffer_release(b);
  CHECK(stats().blocks == 1);
}

TEST_CASE("a payload grown past the inline room takes a cached block",
          "[buffer][cache]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_buffer_release(create(150 * 1024));
  REQUIRE(stats().blocks == 1);
  nx_buffer_t *b = create(64);
  std::vector<char> payload(150 * 1024, 'y');
  REQUIRE(nx_put_bytes(b, payload.data(), payload.size()) == 0);
  CHECK(stats().blocks == 0); // 150 KiB and 150 KiB + 5: both 160 + 4 KiB
  std::vector<char> back(payload.size());
  REQUIRE(nx_buffer_rewind(b) == 0);
  REQUIRE(nx_get_bytes(b, back.data(), back.size()) == 0);
  CHECK(back == payload);
  nx_buffer_release(b);
  CHECK(stats().blocks == 1);
}

TEST_CASE("blocks go back to the cache from another thread and from RSRs",
          "[buffer][cache]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  std::vector<nx_buffer_t *> made(3);
  for (auto &b : made)
    b = create(300 * 1024);
  std::thread t([&] {
    for (auto *b : made)
      nx_buffer_release(b);
  });
  t.join();
  CHECK(stats().blocks == 3);

  nx_context_t *self = nx_context_self();
  REQUIRE(nx_handler_register(self, "large", on_large, NX_HANDLER_NONTHREADED,
                              nullptr) == 0);
  nx_gp_t gp;
  REQUIRE(nx_gp_make(nullptr, &gp) == 0);
  uint64_t hits = stats().hits;
  static char payload[300 * 1024];
  for (int i = 0; i < 3; i++) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &gp, "large",
                             nx_sizeof_bytes(sizeof(payload))) == 0);
    REQUIRE(nx_put_bytes(b, payload, sizeof(payload)) == 0);
    REQUIRE(nx_rsr_send(b) == 0);
    while (handled.load() < i + 1)
      nx_poll();
  }
  // Each RSR took a cached block and gives it back once its handler has
  // returned, which may be a moment after `handled` counts it.
  CHECK(stats().hits >= hits + 3);
  for (int i = 0; i < 5000 && stats().blocks < 3; i++) {
    nx_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(stats().blocks == 3);
  nx_gp_release(&gp);
}

TEST_CASE("the cache keeps at most four blocks a class and its byte cap",
          "[buffer][cache]") {
  cache_env env("1m");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  CHECK(stats().cap == (size_t)1 << 20);
  std::vector<nx_buffer_t *> small(6);
  for (auto &b : small)
    b = create(100 * 1024); // class 96 + 4 KiB
  for (auto *b : small)
    nx_buffer_release(b);
  CHECK(stats().blocks == 4);
  CHECK(stats().bytes == 4 * 100 * 1024);

  std::vector<nx_buffer_t *> big(3);
  for (auto &b : big)
    b = create(400 * 1024); // class 448 + 4 KiB
  for (auto *b : big)
    nx_buffer_release(b);
  nxi_buffer_cache_stats st = stats();
  CHECK(st.bytes <= st.cap);
  CHECK(st.blocks == 5); // one fits beside the 400 KiB of small ones
}

TEST_CASE("NX_BUFFER_CACHE=0 turns the cache off; garbage is refused",
          "[buffer][cache]") {
  {
    cache_env env("0");
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_buffer_release(create(1 << 20));
    CHECK(stats().cap == 0);
    CHECK(stats().blocks == 0);
  }
  {
    cache_env env("12x");
    runtime_guard rt;
    CHECK(rt.init_rc() == NX_EINVAL);
  }
}

TEST_CASE("nx_finalize frees the cache; later frees go to malloc",
          "[buffer][cache]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_buffer_release(create(1 << 20));
  nx_buffer_t *kept = create(1 << 20);
  REQUIRE(stats().blocks == 0);
  nx_buffer_release(create(2 << 20));
  REQUIRE(stats().blocks == 1);
  REQUIRE(rt.finalize() == 0);
  CHECK(stats().blocks == 0);
  CHECK(stats().bytes == 0);
  // A buffer that outlives the runtime is freed, not cached.
  REQUIRE(nx_buffer_release(kept) == 0);
  CHECK(stats().blocks == 0);
}

#if defined(__SANITIZE_ADDRESS__)
TEST_CASE("a cached block is poisoned until it is reused", "[buffer][cache]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_buffer_t *b = create(1 << 20);
  const char *block = static_cast<const char *>(data_of(b));
  nx_buffer_release(b);
  CHECK(__asan_address_is_poisoned(block));
  CHECK(__asan_address_is_poisoned(block + (1 << 20) - 1));
  b = create(1 << 20);
  CHECK(data_of(b) == block);
  CHECK(!__asan_address_is_poisoned(block));
  nx_buffer_release(b);
}
#endif
