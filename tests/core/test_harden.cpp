// Tests of a new user's first mistakes (issue 16): a typo in NX_PROTOCOLS
// fails nx_init and names the modules there are; an RSR buffer sent twice
// is refused before any module sees it, and so is a release of a buffer
// the program no longer holds (sent, released); nx_finalize runs the RSRs
// already sent to this process before it tears down.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <dlfcn.h>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

#include "nexus.h"
#include "nexus/protocol.h"
#include "capture_stderr.h"
#include "runtime_guard.h"

namespace {

struct env_guard {
  explicit env_guard(const char *protocols, const char *progress = nullptr) {
    setenv("NX_PROTO_PATH", FIXTURE_DIR, 1);
    setenv("NX_PROTOCOLS", protocols, 1);
    if (progress != nullptr)
      setenv("NX_PROGRESS", progress, 1);
  }
  ~env_guard() {
    unsetenv("NX_PROTO_PATH");
    unsetenv("NX_PROTOCOLS");
    unsetenv("NX_PROGRESS");
  }
};

std::atomic<int> hits{0};

void on_hit(nx_context_t *, void *, nx_buffer_t *) { hits++; }

int hit_init(nx_context_t *ctx, void *) {
  int r =
      nx_handler_register(ctx, "hit", on_hit, NX_HANDLER_NONTHREADED, nullptr);
  return r < 0 ? r
               : nx_handler_register(ctx, "hit_threaded", on_hit,
                                     NX_HANDLER_THREADED, nullptr);
}

} // namespace

TEST_CASE("NX_PROTOCOLS with an unknown or malformed name fails nx_init, "
          "naming the modules there are",
          "[harden][loader]") {
  struct bad {
    const char *list, *word, *name;
  } cases[] = {
      {"local,tpc", "unknown", "\"tpc\""},
      {"local, fixture", "malformed", "\" fixture\""},
      {"local,,fixture", "malformed", "\"\""},
      {"local,", "malformed", "\"\""},
      {"nosuchmodule", "unknown", "\"nosuchmodule\""},
  };
  for (const bad &c : cases) {
    INFO("NX_PROTOCOLS=" << c.list);
    env_guard env(c.list);
    int rc = 0;
    std::string err = capture_stderr([&] {
      rc = nx_init(nullptr, nullptr);
      if (rc == 0)
        nx_finalize();
    });
    INFO(err);
    CHECK(rc == NX_EINVAL);
    CHECK(err.find(std::string(c.word) + " module name " + c.name) !=
          std::string::npos);
    // The modules there are: the build tree's and the fixtures.
    size_t known = err.find("known modules: ");
    REQUIRE(known != std::string::npos);
    CHECK(err.find("local", known) != std::string::npos);
    CHECK(err.find("fixture", known) != std::string::npos);
  }
  // Good lists still work, also a listed module whose backend is missing.
  env_guard env("fixture,local,initfail");
  runtime_guard rt;
  CHECK(rt.init_rc() == 0);
}

TEST_CASE("an RSR buffer sent twice is refused before any module sees it",
          "[harden][rsr]") {
  // fixture first: a module that copies the frame and frees the sent
  // buffer, as the wire modules do; local hands the buffer itself over.
  for (const char *list : {"fixture,local", "local"}) {
    INFO("NX_PROTOCOLS=" << list);
    env_guard env(list);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_gp_t gp;
    REQUIRE(nx_context_create_local(hit_init, nullptr, &gp) == 0);
    CHECK(std::string(nx_gp_protocol(&gp)) ==
          (list[0] == 'f' ? "fixture" : "local"));
    hits = 0;
    for (int i = 0; i < 100; i++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
      REQUIRE(nx_put_int32(b, i) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
      // The buffer is the runtime's now (maybe freed): refused by address.
      CHECK(nx_rsr_send(b) == NX_EINVAL);
      CHECK(nx_rsr_send_flags(b, NX_RSR_NONBLOCK) == NX_EINVAL);
    }
    // A released, never sent RSR is not the program's either.
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
    REQUIRE(nx_buffer_release(b) == 0);
    CHECK(nx_rsr_send(b) == NX_EINVAL);
    nx_gp_release(&gp);
    REQUIRE(rt.finalize() == 0);
    CHECK(hits.load() == 100); // each sent once, none twice
  }
}

TEST_CASE("a buffer sent twice at once, by two threads, goes out once",
          "[harden][rsr]") {
  // The check is one compare-and-swap on the buffer's slot (type-stable
  // memory, docs/design.md rule 10): of two racing sends exactly one wins,
  // for payloads inside the slot and apart from it (malloc, large block).
  env_guard env("fixture,local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, nullptr, &gp) == 0);
  hits = 0;
  int sent = 0;
  for (size_t size : {size_t(8), size_t(1000), size_t(100000)}) {
    INFO("payload " << size);
    for (int i = 0; i < 50; i++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "hit", size) == 0);
      REQUIRE(nx_put_int32(b, i) == 0);
      std::vector<char> pad(size, 'x');
      REQUIRE(nx_put_bytes(b, pad.data(), pad.size()) == 0);
      std::atomic<int> go{0};
      int rc[2] = {-1, -1};
      std::thread other([&] {
        while (go.load() == 0) {
        }
        rc[1] = nx_rsr_send(b);
      });
      go = 1;
      rc[0] = nx_rsr_send(b);
      other.join();
      CHECK(((rc[0] == 0 && rc[1] == NX_EINVAL) ||
             (rc[1] == 0 && rc[0] == NX_EINVAL)));
      sent++;
    }
  }
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (hits.load() < sent && std::chrono::steady_clock::now() < end)
    nx_poll();
  nx_gp_release(&gp);
  REQUIRE(rt.finalize() == 0);
  CHECK(hits.load() == sent); // each once, none twice
}

TEST_CASE("a buffer the program no longer holds is refused by "
          "nx_buffer_release, never read",
          "[harden][rsr][buffer]") {
  // Before, nx_buffer_release read the buffer to decide: after the module
  // freed a sent one, that was a use after free (AddressSanitizer), and a
  // release of a freed stand-alone buffer one too.
  for (const char *list : {"fixture,local", "local"}) {
    INFO("NX_PROTOCOLS=" << list);
    env_guard env(list);
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_gp_t gp;
    REQUIRE(nx_context_create_local(hit_init, nullptr, &gp) == 0);
    hits = 0;
    for (int i = 0; i < 100; i++) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &gp, "hit", 8) == 0);
      REQUIRE(nx_put_int32(b, i) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
      CHECK(nx_buffer_release(b) == NX_EINVAL); // queued, or freed already
      // Once its handler ran, the runtime frees it.
      auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (hits.load() <= i && std::chrono::steady_clock::now() < end)
        nx_poll();
      REQUIRE(hits.load() == i + 1);
      CHECK(nx_buffer_release(b) == NX_EINVAL);
      CHECK(nx_rsr_send(b) == NX_EINVAL);
    }
    // Released twice: the second is refused.
    nx_buffer_t *s;
    REQUIRE(nx_buffer_create(64, &s) == 0);
    REQUIRE(nx_buffer_retain(s) == 0);
    CHECK(nx_buffer_release(s) == 0);
    CHECK(nx_buffer_release(s) == 0);
    CHECK(nx_buffer_release(s) == NX_EINVAL);
    nx_buffer_t *u;
    REQUIRE(nx_rsr_init_name(&u, &gp, "hit", 8) == 0);
    CHECK(nx_buffer_release(u) == 0);
    CHECK(nx_buffer_release(u) == NX_EINVAL);
    // A stand-alone buffer is not an RSR: send leaves it to the program.
    REQUIRE(nx_buffer_create(64, &s) == 0);
    CHECK(nx_rsr_send(s) == NX_EINVAL);
    CHECK(nx_buffer_release(s) == 0);
    nx_gp_release(&gp);
    REQUIRE(rt.finalize() == 0);
    CHECK(hits.load() == 100);
  }
}

TEST_CASE("nx_finalize runs the RSRs already sent to this process",
          "[harden][lifecycle]") {
  for (const char *progress : {"thread", "poll"})
    for (const char *handler : {"hit", "hit_threaded"}) {
      INFO("NX_PROGRESS=" << progress << ", handler " << handler);
      for (int round = 0; round < 10; round++) {
        env_guard env("local", progress);
        REQUIRE(nx_init(nullptr, nullptr) == 0);
        nx_gp_t gp;
        REQUIRE(nx_context_create_local(hit_init, nullptr, &gp) == 0);
        hits = 0;
        const int n = 200;
        for (int i = 0; i < n; i++) {
          nx_buffer_t *b;
          REQUIRE(nx_rsr_init_name(&b, &gp, handler, 8) == 0);
          REQUIRE(nx_put_int32(b, i) == 0);
          REQUIRE(nx_rsr_send(b) == 0);
        }
        nx_gp_release(&gp);
        REQUIRE(nx_finalize() == 0); // at once: no wait for the handlers
        REQUIRE(hits.load() == n);
      }
    }
}

namespace {
int plain_init(nx_context_t *, void *) { return 0; }
} // namespace

TEST_CASE("a drop report names the handler when this process knows the name",
          "[harden][badinput]") {
  env_guard env("local");
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  // "hit_threaded" is registered in one context, sent to another that
  // lacks it: the receiver knows the name.
  nx_gp_t knows, lacks;
  REQUIRE(nx_context_create_local(hit_init, nullptr, &knows) == 0);
  REQUIRE(nx_context_create_local(plain_init, nullptr, &lacks) == 0);
  std::string err = capture_stderr([&] {
    for (const char *h : {"hit_threaded", "never_registered_anywhere"}) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &lacks, h, 0) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
    }
    nx_stats_t s{};
    for (int i = 0; i < 500 && s.drop_no_handler < 2; i++) {
      nx_poll();
      usleep(1000);
      REQUIRE(nx_stats_get(&s) == 0);
    }
    CHECK(s.drop_no_handler == 2);
  });
  INFO(err);
  char hash[16];
  snprintf(hash, sizeof(hash), "%#x", nx_handler_id("hit_threaded"));
  CHECK(err.find(std::string("handler \"hit_threaded\" (") + hash + ")") !=
        std::string::npos);
  snprintf(hash, sizeof(hash), "%#x",
           nx_handler_id("never_registered_anywhere"));
  CHECK(err.find(std::string("handler ") + hash + ":") != std::string::npos);
  nx_gp_release(&knows);
  nx_gp_release(&lacks);
}

TEST_CASE("NX_DEBUG=1 says which module each destination's route takes",
          "[harden][gp]") {
  env_guard env("local");
  setenv("NX_DEBUG", "1", 1);
  std::string err = capture_stderr([&] {
    runtime_guard rt;
    unsetenv("NX_DEBUG");
    REQUIRE(rt.init_rc() == 0);
    nx_gp_t gp;
    REQUIRE(nx_context_create_local(plain_init, nullptr, &gp) == 0);
    REQUIRE(nx_gp_protocol(&gp) != nullptr);
    nx_gp_release(&gp);
  });
  unsetenv("NX_DEBUG");
  INFO(err);
  CHECK(err.find("local: route to process ") != std::string::npos);
  CHECK(err.find(": local (1 of 1 candidates)") != std::string::npos);
}

TEST_CASE("NX_FRAME_MAX bounds what a peer may announce in one frame",
          "[harden][badinput]") {
  env_guard env("fixture,local");
  setenv("NX_FRAME_MAX", "1k", 1);
  runtime_guard rt;
  unsetenv("NX_FRAME_MAX");
  REQUIRE(rt.init_rc() == 0);
  void *h =
      dlopen(FIXTURE_DIR "/libnx_proto_fixture.so", RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  using inject_fn = int (*)(const void *, const void *, size_t);
  auto inject = reinterpret_cast<inject_fn>(dlsym(h, "nx_fixture_inject"));
  REQUIRE(inject != nullptr);
  nx_gp_t gp;
  REQUIRE(nx_context_create_local(hit_init, nullptr, &gp) == 0);
  hits = 0;
  std::vector<uint8_t> payload(2048, 0);
  for (uint64_t len : {(uint64_t)1024, (uint64_t)1025, (uint64_t)1 << 40}) {
    uint8_t hdr[NX_FRAME_HDR_SIZE] = {0};
    uint32_t magic = NX_FRAME_MAGIC, handler = nx_handler_id("hit");
    uint64_t ctx = nx_gp_context(&gp);
    std::memcpy(hdr, &magic, 4);
    hdr[4] = NX_FRAME_VERSION;
    hdr[5] = NX_FORMAT_LITTLE;
    std::memcpy(hdr + 8, &handler, 4);
    std::memcpy(hdr + 16, &ctx, 8);
    std::memcpy(hdr + 32, &len, 8);
    INFO("announced " << len);
    CHECK(inject(hdr, payload.data(), len <= 1024 ? (size_t)len : 0) ==
          (len <= 1024 ? 0 : NX_EPROTO));
  }
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.drop_bad_frame == 2);
  for (int i = 0; i < 1000 && hits.load() < 1; i++)
    usleep(1000);
  CHECK(hits.load() == 1);
  nx_gp_release(&gp);
}
