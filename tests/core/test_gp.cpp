// Tests of nexus/src/contexts/gp.c: making, copying, comparing and releasing
// global pointers, and carrying them in buffers (nx_put_gp/nx_get_gp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nexus.h"
#include "runtime_guard.h"

namespace {

// Owns one gp reference.
struct gp_ref {
  nx_gp_t gp = NX_GP_NULL;
  gp_ref() = default;
  ~gp_ref() { nx_gp_release(&gp); }
  gp_ref(const gp_ref &) = delete;
  gp_ref &operator=(const gp_ref &) = delete;
  nx_gp_t *operator&() { return &gp; }
};

struct buffer_ref {
  nx_buffer_t *b = nullptr;
  explicit buffer_ref(int format = 0) {
    REQUIRE(nx_buffer_create(64, &b) == 0);
    if (format != 0)
      REQUIRE(nx_buffer_set_format(b, format) == 0);
  }
  ~buffer_ref() {
    if (b != nullptr)
      nx_buffer_release(b);
  }
  buffer_ref(const buffer_ref &) = delete;
  buffer_ref &operator=(const buffer_ref &) = delete;
  operator nx_buffer_t *() const { return b; }
};

std::string protocol_of(const nx_gp_t *gp) {
  const char *p = nx_gp_protocol(gp);
  return p != nullptr ? p : "(null)";
}

bool is_all_null(const nx_gp_t &gp) {
  return gp.context == 0 && gp.address == 0 && gp.protos == nullptr;
}

} // namespace

TEST_CASE("without the runtime there is no context and no gp", "[gp]") {
  CHECK(nx_context_self() == nullptr);
  int x = 0;
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_gp_make(&x, &gp) == NX_ENOTINIT);
  CHECK(is_all_null(gp)); // not written on error
}

TEST_CASE("nx_gp_make names an address in the current context", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    nx_context_t *self = nx_context_self();
    REQUIRE(self != nullptr);
    int x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);
    CHECK_FALSE(nx_gp_is_null(&gp));
    CHECK(nx_gp_context(&gp) == nx_context_id(self));
    CHECK(nx_gp_context(&gp) != 0); // 0 is reserved for a null gp
    CHECK(nx_gp_address(&gp) == static_cast<void *>(&x));
    CHECK(protocol_of(&gp) == "local");
    CHECK(nx_gp_equal(&gp, &gp) == 1);

    // Two gps to the same address are equal; to another address, not.
    int y = 0;
    gp_ref same, other;
    REQUIRE(nx_gp_make(&x, &same) == 0);
    REQUIRE(nx_gp_make(&y, &other) == 0);
    CHECK(nx_gp_equal(&gp, &same) == 1);
    CHECK(nx_gp_equal(&same, &gp) == 1);
    CHECK(nx_gp_equal(&gp, &other) == 0);
    CHECK(nx_gp_equal(&other, &gp) == 0);
    CHECK(nx_gp_address(&other) == static_cast<void *>(&y));
    CHECK(nx_gp_context(&other) == nx_gp_context(&gp));
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("the address round-trips for many kinds of addresses", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    static int global_int;
    std::vector<char> heap(100);
    void *addrs[] = {&global_int, heap.data(), heap.data() + 99,
                     reinterpret_cast<void *>(uintptr_t{1}),
                     reinterpret_cast<void *>(~uintptr_t{0} - 7)};
    for (void *a : addrs) {
      INFO("address " << a);
      gp_ref gp;
      REQUIRE(nx_gp_make(a, &gp) == 0);
      CHECK(nx_gp_address(&gp) == a);
    }
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("copy, equal and release", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    double x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);

    nx_gp_t copy = NX_GP_NULL;
    REQUIRE(nx_gp_copy(&gp, &copy) == 0);
    CHECK(nx_gp_equal(&gp, &copy) == 1);
    CHECK(nx_gp_context(&copy) == nx_gp_context(&gp));
    CHECK(nx_gp_address(&copy) == static_cast<void *>(&x));
    CHECK(protocol_of(&copy) == "local");

    // Releasing the copy nulls it and leaves the original intact.
    CHECK(nx_gp_release(&copy) == 0);
    CHECK(nx_gp_is_null(&copy) == 1);
    CHECK(is_all_null(copy));
    CHECK(nx_gp_context(&copy) == 0);
    CHECK(nx_gp_is_null(&gp) == 0);
    CHECK(protocol_of(&gp) == "local");
    CHECK(nx_gp_address(&gp) == static_cast<void *>(&x));

    // Releasing a released (null) gp is allowed and does nothing.
    CHECK(nx_gp_release(&copy) == 0);
    CHECK(nx_gp_is_null(&copy) == 1);

    // A copy outlives its original.
    nx_gp_t a = NX_GP_NULL, b = NX_GP_NULL;
    REQUIRE(nx_gp_make(&x, &a) == 0);
    REQUIRE(nx_gp_copy(&a, &b) == 0);
    CHECK(nx_gp_release(&a) == 0);
    CHECK(nx_gp_is_null(&a) == 1);
    CHECK(nx_gp_equal(&b, &gp) == 1);
    CHECK(protocol_of(&b) == "local");
    CHECK(nx_gp_release(&b) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("null gps", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    nx_gp_t null_gp = NX_GP_NULL;
    CHECK(nx_gp_is_null(&null_gp) == 1);
    CHECK(nx_gp_context(&null_gp) == 0);
    CHECK(nx_gp_protocol(&null_gp) ==
          nullptr); // names nothing, so nothing reaches it
    CHECK(nx_gp_release(&null_gp) == 0);
    CHECK(nx_gp_is_null(&null_gp) == 1);

    int x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);
    CHECK(nx_gp_equal(&gp, &null_gp) == 0);
    CHECK(nx_gp_equal(&null_gp, &gp) == 0);

    // Copying a null gp gives a null gp.
    nx_gp_t dst = NX_GP_NULL;
    CHECK(nx_gp_copy(&null_gp, &dst) == 0);
    CHECK(nx_gp_is_null(&dst) == 1);
    CHECK(nx_gp_release(&dst) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("gp calls reject NULL arguments", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    int x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);
    nx_gp_t dst = NX_GP_NULL;
    CHECK(nx_gp_make(&x, nullptr) == NX_EINVAL);
    CHECK(nx_gp_copy(nullptr, &dst) == NX_EINVAL);
    CHECK(is_all_null(dst));
    CHECK(nx_gp_copy(&gp, nullptr) == NX_EINVAL);
    CHECK(nx_gp_release(nullptr) == NX_EINVAL);
    // The refused calls left gp alone.
    CHECK(nx_gp_address(&gp) == static_cast<void *>(&x));
    CHECK(protocol_of(&gp) == "local");
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("many gps, copies and releases", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    const int N = 1000;
    std::vector<int> targets(N);
    std::vector<nx_gp_t> gps(N, nx_gp_t NX_GP_NULL),
        copies(N, nx_gp_t NX_GP_NULL);
    int failures = 0;
    for (int i = 0; i < N; i++) {
      failures += nx_gp_make(&targets[static_cast<size_t>(i)],
                             &gps[static_cast<size_t>(i)]) != 0;
      failures += nx_gp_copy(&gps[static_cast<size_t>(i)],
                             &copies[static_cast<size_t>(i)]) != 0;
    }
    REQUIRE(failures == 0);
    for (int i = 0; i < N; i++) {
      size_t k = static_cast<size_t>(i);
      failures += nx_gp_equal(&gps[k], &copies[k]) != 1;
      failures += nx_gp_address(&copies[k]) != &targets[k];
      if (i > 0)
        failures += nx_gp_equal(&gps[k], &gps[k - 1]) != 0;
    }
    CHECK(failures == 0);
    for (int i = 0; i < N; i++) {
      size_t k = static_cast<size_t>(i);
      failures += nx_gp_release(&gps[k]) != 0;
      failures += protocol_of(&copies[k]) != "local";
      failures += nx_gp_release(&copies[k]) != 0;
      failures += !nx_gp_is_null(&gps[k]) || !nx_gp_is_null(&copies[k]);
    }
    CHECK(failures == 0);
  }
  CHECK(rt.finalize() == 0);
}

namespace {
int set_data_init(nx_context_t *ctx, void *arg) {
  return nx_context_set_data(ctx, arg);
}
} // namespace

TEST_CASE("gps to another local context differ from gps here", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    int data = 0;
    gp_ref other;
    REQUIRE(nx_context_create_local(set_data_init, &data, &other) == 0);
    gp_ref here;
    REQUIRE(nx_gp_make(&data, &here) == 0);
    CHECK(nx_gp_address(&other) == static_cast<void *>(&data));
    CHECK(nx_gp_context(&other) != 0);
    CHECK(nx_gp_context(&other) != nx_gp_context(&here));
    // Same address, different context: not equal.
    CHECK(nx_gp_equal(&other, &here) == 0);
    CHECK(protocol_of(&other) == "local");
    CHECK(nx_context_destroy(&other) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("a gp travels through a buffer", "[gp][buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    const int format = GENERATE(as<int>{}, 0, NX_FORMAT_LITTLE, NX_FORMAT_BIG);
    INFO("format " << format << " (0: the default)");
    long x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);

    buffer_ref b(format);
    REQUIRE(nx_put_int32(b, 1111) == 0);
    size_t before = nx_buffer_length(b);
    REQUIRE(nx_put_gp(b, &gp) == 0);
    size_t grew = nx_buffer_length(b) - before;
    CHECK(grew > 0);
    CHECK(nx_sizeof_gp(&gp) >= grew);
    REQUIRE(nx_put_int32(b, 2222) == 0);
    REQUIRE(nx_put_gp(b, &gp) == 0);

    REQUIRE(nx_buffer_rewind(b) == 0);
    int32_t v = 0;
    REQUIRE(nx_get_int32(b, &v) == 0);
    CHECK(v == 1111);
    size_t rem = nx_buffer_remaining(b);
    gp_ref got;
    REQUIRE(nx_get_gp(b, &got) == 0);
    CHECK(rem - nx_buffer_remaining(b) == grew); // consumes what the put added
    CHECK(nx_gp_equal(&got, &gp) == 1);
    CHECK(nx_gp_context(&got) == nx_gp_context(&gp));
    CHECK(nx_gp_address(&got) == static_cast<void *>(&x));
    CHECK(protocol_of(&got) == "local");
    REQUIRE(nx_get_int32(b, &v) == 0);
    CHECK(v == 2222);

    // The buffer's copy does not depend on the original staying alive.
    REQUIRE(nx_gp_release(&gp) == 0);
    gp_ref second;
    REQUIRE(nx_get_gp(b, &second) == 0);
    CHECK(nx_gp_equal(&second, &got) == 1);
    CHECK(protocol_of(&second) == "local");
    CHECK(nx_buffer_remaining(b) == 0);

    // Read it again after a rewind.
    REQUIRE(nx_buffer_rewind(b) == 0);
    REQUIRE(nx_get_int32(b, &v) == 0);
    gp_ref third;
    REQUIRE(nx_get_gp(b, &third) == 0);
    CHECK(nx_gp_equal(&third, &got) == 1);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("a gp to another local context travels through a buffer",
          "[gp][buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    int data = 0;
    gp_ref other;
    REQUIRE(nx_context_create_local(set_data_init, &data, &other) == 0);
    buffer_ref b;
    REQUIRE(nx_put_gp(b, &other) == 0);
    CHECK(nx_sizeof_gp(&other) >= nx_buffer_length(b));
    REQUIRE(nx_buffer_rewind(b) == 0);
    gp_ref got;
    REQUIRE(nx_get_gp(b, &got) == 0);
    CHECK(nx_gp_equal(&got, &other) == 1);
    CHECK(nx_gp_context(&got) == nx_gp_context(&other));
    CHECK(protocol_of(&got) == "local");
    CHECK(nx_context_destroy(&other) == 0);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("nx_put_gp and nx_get_gp reject NULL arguments", "[gp][buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    int x = 0;
    gp_ref gp;
    REQUIRE(nx_gp_make(&x, &gp) == 0);
    buffer_ref b;
    CHECK(nx_put_gp(nullptr, &gp) == NX_EINVAL);
    CHECK(nx_put_gp(b, nullptr) == NX_EINVAL);
    CHECK(nx_buffer_length(b) == 0);
    REQUIRE(nx_put_gp(b, &gp) == 0);
    REQUIRE(nx_buffer_rewind(b) == 0);
    size_t rem = nx_buffer_remaining(b);
    gp_ref got;
    CHECK(nx_get_gp(b, nullptr) == NX_EINVAL);
    CHECK(nx_get_gp(nullptr, &got) == NX_EINVAL);
    CHECK(nx_buffer_remaining(b) == rem);
    REQUIRE(nx_get_gp(b, &got) == 0);
    CHECK(nx_gp_equal(&got, &gp) == 1);
  }
  CHECK(rt.finalize() == 0);
}

TEST_CASE("nx_get_gp refuses what is not a gp, without crashing",
          "[gp][buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  {
    SECTION("an empty buffer") {
      buffer_ref b;
      nx_gp_t got = NX_GP_NULL;
      CHECK(nx_get_gp(b, &got) == NX_ERANGE);
      CHECK(is_all_null(got));
    }

    SECTION("garbage bytes") {
      std::mt19937 rng(12345);
      for (size_t n : {size_t{1}, size_t{4}, size_t{8}, size_t{16}, size_t{24},
                       size_t{32}, size_t{64}, size_t{256}, size_t{4096}}) {
        for (int trial = 0; trial < 20; trial++) {
          std::vector<unsigned char> junk(n);
          for (auto &c : junk)
            c = static_cast<unsigned char>(rng());
          if (trial == 0)
            std::fill(junk.begin(), junk.end(), 0xff);
          if (trial == 1)
            std::fill(junk.begin(), junk.end(), 0x00);
          INFO("garbage of " << n << " bytes, trial " << trial);
          buffer_ref b;
          REQUIRE(nx_put_bytes(b, junk.data(), n) == 0);
          REQUIRE(nx_buffer_rewind(b) == 0);
          size_t rem = nx_buffer_remaining(b);
          nx_gp_t got = NX_GP_NULL;
          int rc = nx_get_gp(b, &got);
          CHECK((rc == NX_ETYPE || rc == NX_EPROTO));
          CHECK(is_all_null(got)); // written only on success
          CHECK(nx_buffer_remaining(b) == rem);
          // Nothing was consumed: the bytes are still there to read.
          std::vector<unsigned char> back(n);
          REQUIRE(nx_get_bytes(b, back.data(), n) == 0);
          CHECK(back == junk);
          if (rc == 0)
            nx_gp_release(&got);
        }
      }
    }

    SECTION("values of other types") {
      std::mt19937_64 rng(777);
      for (int trial = 0; trial < 50; trial++) {
        INFO("trial " << trial);
        buffer_ref b;
        uint64_t words[6];
        for (auto &w : words)
          w = rng();
        switch (trial % 5) {
        case 0: REQUIRE(nx_put_uint64(b, words[0]) == 0); break;
        case 1: REQUIRE(nx_put_uint64_array(b, words, 6) == 0); break;
        case 2:
          REQUIRE(nx_put_int64_array(b, reinterpret_cast<int64_t *>(words),
                                     3) == 0);
          break;
        case 3:
          REQUIRE(nx_put_char_array(b, reinterpret_cast<char *>(words),
                                    sizeof words) == 0);
          break;
        case 4:
          REQUIRE(nx_put_uint8_array(b, reinterpret_cast<uint8_t *>(words),
                                     sizeof words) == 0);
          break;
        }
        for (int i = 0; i < 4; i++) // more data after it
          REQUIRE(nx_put_uint64(b, rng()) == 0);
        REQUIRE(nx_buffer_rewind(b) == 0);
        size_t rem = nx_buffer_remaining(b);
        nx_gp_t got = NX_GP_NULL;
        int rc = nx_get_gp(b, &got);
        CHECK((rc == NX_ETYPE || rc == NX_EPROTO));
        CHECK(is_all_null(got));
        CHECK(nx_buffer_remaining(b) == rem);
        if (rc == 0)
          nx_gp_release(&got);
      }
    }

    SECTION("a gp where another type is expected") {
      int x = 0;
      gp_ref gp;
      REQUIRE(nx_gp_make(&x, &gp) == 0);
      buffer_ref b;
      REQUIRE(nx_put_gp(b, &gp) == 0);
      REQUIRE(nx_buffer_rewind(b) == 0);
      size_t rem = nx_buffer_remaining(b);
      uint64_t u = 0;
      unsigned char raw[8];
      CHECK(nx_get_uint64(b, &u) == NX_ETYPE);
      CHECK(nx_get_bytes(b, raw, 8) == NX_ETYPE);
      CHECK(nx_buffer_remaining(b) == rem);
      gp_ref got;
      REQUIRE(nx_get_gp(b, &got) == 0);
      CHECK(nx_gp_equal(&got, &gp) == 1);
    }
  }
  CHECK(rt.finalize() == 0);
}

// A gp made in one run, kept across nx_finalize and nx_init with
// NX_PROTOCOLS=`protocols`: its descriptors name endpoints of the earlier
// run (tcp's a closed port, ofi's a shm name libfabric crashed on), none
// of which may be tried.
static void kept_across_restart(const char *protocols) {
  setenv("NX_PROTOCOLS", protocols, 1);
  nx_gp_t kept = NX_GP_NULL, copy = NX_GP_NULL;
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    int x = 0;
    REQUIRE(nx_gp_make(&x, &kept) == 0);
    REQUIRE(nx_gp_copy(&kept, &copy) == 0);
  }
  // The runtime is gone; the gps still own their descriptor lists.
  CHECK(nx_gp_release(&copy) == 0);
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    // It names a context of the earlier run: no protocol reaches it now.
    CHECK(nx_gp_protocol(&kept) == nullptr);
    nx_buffer_t *b = nullptr;
    REQUIRE(nx_rsr_init_name(&b, &kept, "x", 0) == 0);
    CHECK(nx_rsr_send(b) == NX_EUNREACH);
  }
  CHECK(nx_gp_release(&kept) == 0);
  CHECK(nx_gp_is_null(&kept));
  unsetenv("NX_PROTOCOLS");
}

TEST_CASE("a gp may be released after nx_finalize, and outlive a restart",
          "[gp]") {
  setenv("NX_PROTOCOLS", "local", 1);
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    nx_gp_t gp;
    REQUIRE(nx_gp_make(nullptr, &gp) == 0);
    CHECK(std::string(nx_gp_protocol(&gp)) == "local");
    nx_gp_release(&gp);
  }
  kept_across_restart("local");
}

#if NX_TEST_HAVE_TCP
TEST_CASE("a gp kept across a restart reaches nothing over tcp", "[gp]") {
  kept_across_restart("tcp");
}
#endif

#if NX_TEST_HAVE_UCX
TEST_CASE("a gp kept across a restart reaches nothing over ucx", "[gp]") {
  kept_across_restart("ucx");
}
#endif

#if NX_TEST_HAVE_OFI
TEST_CASE("a gp kept across a restart reaches nothing over ofi", "[gp]") {
  kept_across_restart("ofi");
}
#endif

TEST_CASE("nx_gp_protocol_info names the module when it says no more", "[gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t gp;
  REQUIRE(nx_gp_make(nullptr, &gp) == 0);
  char buf[64];
  CHECK(nx_gp_protocol_info(&gp, buf, sizeof(buf)) == NX_ENOTSUP);
  CHECK(std::string(buf) == "local");
  CHECK(nx_gp_protocol_info(&gp, nullptr, 8) == NX_EINVAL);
  nx_gp_t null_gp = NX_GP_NULL;
  CHECK(nx_gp_protocol_info(&null_gp, buf, sizeof(buf)) == NX_EUNREACH);
  nx_gp_release(&gp);
}

// Needs the tcp module (its descriptor's scope is the host id): compiled
// only when it is built (NX_TEST_HAVE_TCP), so a build without tcp lists no
// such case rather than passing it unchecked.
#if NX_TEST_HAVE_TCP
TEST_CASE("NX_HOST_ID sets the host identity in the descriptors", "[gp]") {
  std::string scope[3];
  const char *ids[3] = {"alpha", "beta", "alpha"};
  for (int i = 0; i < 3; i++) {
    setenv("NX_HOST_ID", ids[i], 1);
    setenv("NX_PROTOCOLS", "tcp,local", 1);
    runtime_guard rt;
    unsetenv("NX_HOST_ID");
    unsetenv("NX_PROTOCOLS");
    REQUIRE(rt.init_rc() == 0);
    for (int m = 0; m < nx_module_count(); m++) {
      nx_module_info_t info;
      REQUIRE(nx_module_info(m, &info) == 0);
      if (std::string(info.name) == "tcp" && info.loaded)
        scope[i] = info.descriptor; // scope= is the host id for tcp
    }
  }
  REQUIRE(!scope[0].empty()); // tcp is built: it must load
  CHECK(scope[0].substr(0, 38) != scope[1].substr(0, 38));
  CHECK(scope[0].substr(0, 38) == scope[2].substr(0, 38));
}
#endif
