// Zero copy: values put by reference (nx_put_*_ref) and read in place
// (nx_get_*_ptr). The release callback runs exactly once, after the last
// read, also when the RSR fails or is never sent; pointers read in place are
// aligned, converted to this machine's order, and live as long as the
// buffer. Between processes every module runs the same through the
// conformance suite ("zero copy: ...").
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nexus.h"
#include "runtime_guard.h"

namespace {

// One release callback's record.
struct released {
  std::atomic<int> calls{0};
  std::atomic<int> status{1};
  std::atomic<const void *> v{nullptr};
};

void on_release(void *arg, const void *v, int status) {
  auto *r = static_cast<released *>(arg);
  r->v = v;
  r->status = status;
  r->calls++;
}

// A local context whose handler "take" hands its buffer to the test thread:
// retained, for the test to read and release.
struct inbox {
  nx_mutex_t m;
  nx_cond_t c;
  nx_buffer_t *got = nullptr;
  inbox() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
  ~inbox() {
    nx_cond_destroy(&c);
    nx_mutex_destroy(&m);
  }
  nx_buffer_t *wait() {
    nx_mutex_lock(&m);
    while (got == nullptr)
      nx_cond_wait(&c, &m);
    nx_buffer_t *b = got;
    got = nullptr;
    nx_mutex_unlock(&m);
    return b;
  }
};

void on_take(nx_context_t *, void *addr, nx_buffer_t *b) {
  auto *in = static_cast<inbox *>(addr);
  // Catch's macros are for the test thread: a failed retain shows there as
  // a buffer the test cannot release.
  (void)nx_buffer_retain(b);
  nx_mutex_lock(&in->m);
  in->got = b;
  nx_cond_signal(&in->c);
  nx_mutex_unlock(&in->m);
}

int take_init(nx_context_t *ctx, void *) {
  return nx_handler_register(ctx, "take", on_take, NX_HANDLER_NONTHREADED,
                             nullptr);
}

struct peer {
  nx_gp_t gp = NX_GP_NULL;
  peer() { REQUIRE(nx_context_create_local(take_init, nullptr, &gp) == 0); }
  ~peer() { nx_gp_release(&gp); }
  nx_buffer_t *rsr(inbox &in) {
    nx_gp_t to = NX_GP_NULL;
    REQUIRE(nx_gp_copy(&gp, &to) == 0);
    to.address = reinterpret_cast<uint64_t>(&in);
    nx_buffer_t *b = nullptr;
    REQUIRE(nx_rsr_init_name(&b, &to, "take", 64) == 0);
    keep.push_back(to); // the gp must outlive the send (rule 9)
    return b;
  }
  std::vector<nx_gp_t> keep;
  void drop() {
    for (auto &g : keep)
      nx_gp_release(&g);
    keep.clear();
  }
};

} // namespace

TEST_CASE("zero copy in process: every type put by reference reads back in "
          "place, aligned, whatever came before it",
          "[zerocopy]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  inbox in;
  peer p;
  std::vector<double> d = {0.25, -1.5, 3e300, 7.0};
  std::vector<int16_t> s = {-3, 4, 32767};
  std::vector<uint64_t> u = {1, 0xfedcba9876543210ull};
  for (int lead = 0; lead < 9; lead++) {
    INFO("leading bytes " << lead);
    released rd, rs, ru, rb;
    nx_buffer_t *b = p.rsr(in);
    std::vector<uint8_t> pre(lead, 0x11);
    REQUIRE(nx_put_bytes(b, pre.data(), pre.size()) == 0);
    REQUIRE(nx_put_double_array_ref(b, d.data(), d.size(), on_release, &rd) ==
            0);
    REQUIRE(nx_put_char(b, 'x') == 0);
    REQUIRE(nx_put_int16_array_ref(b, s.data(), s.size(), on_release, &rs) ==
            0);
    REQUIRE(nx_put_uint64_array_ref(b, u.data(), u.size(), on_release, &ru) ==
            0);
    REQUIRE(nx_put_bytes_ref(b, "abc", 3, on_release, &rb) == 0);
    size_t len = nx_buffer_length(b);
    CHECK(len >= size_t(1 + 4 + lead + 6 + 32 + 2 + 6 + 6 + 6 + 16 + 6 + 3));
    REQUIRE(nx_rsr_send(b) == 0);
    nx_buffer_t *r = in.wait();
    CHECK(nx_buffer_length(r) == len);
    // Sent (copied once by the local module): each callback once, status 0,
    // with the memory it was given.
    for (released *x : {&rd, &rs, &ru, &rb}) {
      CHECK(x->calls == 1);
      CHECK(x->status == 0);
    }
    CHECK(rd.v == d.data());
    std::vector<uint8_t> got(lead);
    REQUIRE(nx_get_bytes(r, got.data(), got.size()) == 0);
    CHECK(got == pre);
    const double *pd = nullptr;
    REQUIRE(nx_get_double_array_ptr(r, &pd, d.size()) == 0);
    CHECK(reinterpret_cast<uintptr_t>(pd) % alignof(double) == 0);
    CHECK(std::vector<double>(pd, pd + d.size()) == d);
    char c = 0;
    REQUIRE(nx_get_char(r, &c) == 0);
    CHECK(c == 'x');
    // A copying get reads an array put by reference too.
    std::vector<int16_t> s2(s.size());
    REQUIRE(nx_get_int16_array(r, s2.data(), s2.size()) == 0);
    CHECK(s2 == s);
    const uint64_t *pu = nullptr;
    CHECK(nx_get_uint64_array_ptr(r, &pu, 3) == NX_ETYPE); // wrong count
    REQUIRE(nx_get_uint64_array_ptr(r, &pu, u.size()) == 0);
    CHECK(reinterpret_cast<uintptr_t>(pu) % alignof(uint64_t) == 0);
    CHECK(std::vector<uint64_t>(pu, pu + u.size()) == u);
    const void *pb = nullptr;
    REQUIRE(nx_get_bytes_ptr(r, &pb, 3) == 0);
    CHECK(std::memcmp(pb, "abc", 3) == 0);
    CHECK(nx_buffer_remaining(r) == 0);
    CHECK(nx_get_bytes_ptr(r, &pb, 0) == NX_ERANGE);
    CHECK(nx_buffer_release(r) == 0);
  }
  p.drop();
}

TEST_CASE("zero copy: more references than NX_BUFFER_REFS_MAX are copied, "
          "every callback still runs once",
          "[zerocopy]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  inbox in;
  peer p;
  const int n = NX_BUFFER_REFS_MAX + 5;
  std::vector<released> rel(n);
  std::vector<std::vector<int32_t>> vals(n);
  nx_buffer_t *b = p.rsr(in);
  for (int i = 0; i < n; i++) {
    vals[i].assign(i + 1, i * 1000);
    REQUIRE(nx_put_int32_array_ref(b, vals[i].data(), vals[i].size(),
                                   on_release, &rel[i]) == 0);
  }
  REQUIRE(nx_rsr_send(b) == 0);
  nx_buffer_t *r = in.wait();
  for (int i = 0; i < n; i++) {
    const int32_t *v = nullptr;
    REQUIRE(nx_get_int32_array_ptr(r, &v, i + 1) == 0);
    CHECK(std::vector<int32_t>(v, v + i + 1) == vals[i]);
    CHECK(rel[i].calls == 1);
    CHECK(rel[i].status == 0);
    // The callback gets the program's pointer back, copied or not.
    CHECK(rel[i].v == vals[i].data());
  }
  CHECK(nx_buffer_release(r) == 0);
  p.drop();
}

TEST_CASE("zero copy: a buffer released unsent or an RSR that fails calls "
          "the callback once with the error",
          "[zerocopy]") {
  int x = 0;
  nx_gp_t old = NX_GP_NULL;
  setenv("NX_PROTOCOLS", "local", 1);
  {
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    REQUIRE(nx_gp_make(&x, &old) == 0);
    inbox in;
    peer p;
    released r1;
    nx_buffer_t *b = p.rsr(in);
    REQUIRE(nx_put_bytes_ref(b, &x, sizeof(x), on_release, &r1) == 0);
    CHECK(r1.calls == 0);
    REQUIRE(nx_buffer_release(b) == 0);
    CHECK(r1.calls == 1);
    CHECK(r1.status == NX_ECANCELED);
    CHECK(r1.v == &x);
    p.drop();
  }
  {
    // `old` names a context of the earlier run: no protocol reaches it.
    runtime_guard rt;
    REQUIRE(rt.init_rc() == 0);
    released r2;
    nx_buffer_t *b = nullptr;
    REQUIRE(nx_rsr_init_name(&b, &old, "x", 0) == 0);
    REQUIRE(nx_put_int32_array_ref(b, &x, 1, on_release, &r2) == 0);
    CHECK(nx_rsr_send(b) == NX_EUNREACH);
    CHECK(r2.calls == 1);
    CHECK(r2.status == NX_EUNREACH);
    // The buffer is gone: a second send is refused, the callback not rerun.
    CHECK(nx_rsr_send(b) == NX_EINVAL);
    CHECK(r2.calls == 1);
  }
  nx_gp_release(&old);
  unsetenv("NX_PROTOCOLS");
}

TEST_CASE("zero copy: misuse is refused and the callback is not called",
          "[zerocopy]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  released r;
  int v[2] = {1, 2};
  nx_buffer_t *sa = nullptr;
  REQUIRE(nx_buffer_create(0, &sa) == 0);
  // Only RSR buffers hold references.
  CHECK(nx_put_int32_array_ref(sa, v, 2, on_release, &r) == NX_EINVAL);
  CHECK(nx_put_bytes_ref(nullptr, v, 2, on_release, &r) == NX_EINVAL);
  inbox in;
  peer p;
  nx_buffer_t *b = p.rsr(in);
  CHECK(nx_put_int32_array_ref(b, v, 2, nullptr, nullptr) == NX_EINVAL);
  CHECK(nx_put_int32_array_ref(b, nullptr, 2, on_release, &r) == NX_EINVAL);
  CHECK(nx_put_bytes_ref(b, v, (size_t)UINT32_MAX + 1, on_release, &r) ==
        NX_EINVAL);
  CHECK(nx_buffer_length(b) == 0);
  const void *ptr = nullptr;
  CHECK(nx_get_bytes_ptr(b, &ptr, 0) == NX_EINVAL); // write-only
  CHECK(nx_get_bytes_ptr(sa, nullptr, 0) == NX_EINVAL);
  // No values by reference yet: nx_buffer_bytes works; with one it cannot
  // give one piece.
  const void *data = nullptr;
  size_t len = 0;
  CHECK(nx_buffer_bytes(b, &data, &len) == 0);
  REQUIRE(nx_put_bytes_ref(b, v, sizeof(v), on_release, &r) == 0);
  CHECK(nx_buffer_bytes(b, &data, &len) == NX_EINVAL);
  CHECK(r.calls == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  nx_buffer_t *got = in.wait();
  CHECK(r.calls == 1);
  // A received buffer is read-only: no puts by reference.
  released r3;
  CHECK(nx_put_bytes_ref(got, v, 1, on_release, &r3) == NX_EINVAL);
  CHECK(r3.calls == 0);
  CHECK(nx_buffer_release(got) == 0);
  CHECK(nx_buffer_release(sa) == 0);
  p.drop();
}

TEST_CASE("zero copy: foreign byte order is converted in place, once",
          "[zerocopy][format]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  int foreign =
      nx_format_native() == NX_FORMAT_LITTLE ? NX_FORMAT_BIG : NX_FORMAT_LITTLE;
  std::vector<double> d = {1.0, -2.5, 1e-300};
  std::vector<int32_t> i = {7, -8, 0x12345678};
  std::vector<uint16_t> h = {1, 0xabcd};

  SECTION("through an RSR: the foreign buffer's puts by reference copy") {
    inbox in;
    peer p;
    released rd, ri;
    nx_buffer_t *b = p.rsr(in);
    REQUIRE(nx_buffer_set_format(b, foreign) == 0);
    REQUIRE(nx_put_uint8(b, 1) == 0);
    REQUIRE(nx_put_double_array_ref(b, d.data(), d.size(), on_release, &rd) ==
            0);
    REQUIRE(nx_put_int32_array_ref(b, i.data(), i.size(), on_release, &ri) ==
            0);
    REQUIRE(nx_rsr_send(b) == 0);
    nx_buffer_t *r = in.wait();
    CHECK(nx_buffer_format(r) == foreign);
    CHECK(rd.calls == 1);
    CHECK(ri.calls == 1);
    CHECK(rd.v == d.data()); // copied at put (converted), still given back
    CHECK(ri.v == i.data());
    uint8_t one = 0;
    REQUIRE(nx_get_uint8(r, &one) == 0);
    const double *pd = nullptr;
    REQUIRE(nx_get_double_array_ptr(r, &pd, d.size()) == 0);
    CHECK(reinterpret_cast<uintptr_t>(pd) % alignof(double) == 0);
    CHECK(std::vector<double>(pd, pd + d.size()) == d);
    const int32_t *pi = nullptr;
    REQUIRE(nx_get_int32_array_ptr(r, &pi, i.size()) == 0);
    CHECK(std::vector<int32_t>(pi, pi + i.size()) == i);
    // Read again from the start: converted once, right both ways.
    REQUIRE(nx_buffer_rewind(r) == 0);
    REQUIRE(nx_get_uint8(r, &one) == 0);
    const double *pd2 = nullptr;
    REQUIRE(nx_get_double_array_ptr(r, &pd2, d.size()) == 0);
    CHECK(pd2 == pd);
    CHECK(std::vector<double>(pd2, pd2 + d.size()) == d);
    std::vector<int32_t> i2(i.size());
    REQUIRE(nx_get_int32_array(r, i2.data(), i2.size()) == 0);
    CHECK(i2 == i);
    CHECK(nx_buffer_release(r) == 0);
    p.drop();
  }

  SECTION("arrays a copying put wrote, aligned or not") {
    nx_buffer_t *w = nullptr;
    REQUIRE(nx_buffer_create(0, &w) == 0);
    REQUIRE(nx_buffer_set_format(w, foreign) == 0);
    REQUIRE(nx_put_uint16_array(w, h.data(), h.size()) == 0); // at 5: odd
    REQUIRE(nx_put_double_array(w, d.data(), d.size()) == 0); // at 14
    REQUIRE(nx_put_bytes(w, "xyz", 3) == 0);
    const void *bytes = nullptr;
    size_t len = 0;
    REQUIRE(nx_buffer_bytes(w, &bytes, &len) == 0);
    nx_buffer_t *r = nullptr;
    REQUIRE(nx_buffer_from_bytes(bytes, len, foreign, &r) == 0);
    for (int pass = 0; pass < 2; pass++) {
      INFO("pass " << pass);
      const uint16_t *ph = nullptr;
      REQUIRE(nx_get_uint16_array_ptr(r, &ph, h.size()) == 0);
      CHECK(reinterpret_cast<uintptr_t>(ph) % alignof(uint16_t) == 0);
      CHECK(std::vector<uint16_t>(ph, ph + h.size()) == h);
      const double *pd = nullptr;
      REQUIRE(nx_get_double_array_ptr(r, &pd, d.size()) == 0);
      CHECK(reinterpret_cast<uintptr_t>(pd) % alignof(double) == 0);
      CHECK(std::vector<double>(pd, pd + d.size()) == d);
      const char *pc = nullptr;
      REQUIRE(nx_get_char_array_ptr(r, &pc, 3) == NX_ETYPE); // bytes
      const void *pb = nullptr;
      REQUIRE(nx_get_bytes_ptr(r, &pb, 3) == 0);
      CHECK(std::memcmp(pb, "xyz", 3) == 0);
      REQUIRE(nx_buffer_rewind(r) == 0);
    }
    // The copying gets still read the converted arrays right.
    std::vector<uint16_t> h2(h.size());
    REQUIRE(nx_get_uint16_array(r, h2.data(), h2.size()) == 0);
    CHECK(h2 == h);
    std::vector<double> d2(d.size());
    REQUIRE(nx_get_double_array(r, d2.data(), d2.size()) == 0);
    CHECK(d2 == d);
    CHECK(nx_buffer_release(r) == 0);
    CHECK(nx_buffer_release(w) == 0);
  }
}

TEST_CASE("zero copy: a pointer read in place lives as long as the retained "
          "buffer",
          "[zerocopy]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  inbox in;
  peer p;
  std::vector<uint8_t> big(1 << 20);
  for (size_t k = 0; k < big.size(); k++)
    big[k] = (uint8_t)(k * 7);
  released rb;
  nx_buffer_t *b = p.rsr(in);
  REQUIRE(nx_put_bytes_ref(b, big.data(), big.size(), on_release, &rb) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  nx_buffer_t *r = in.wait(); // retained by the handler, which returned
  const void *pb = nullptr;
  REQUIRE(nx_get_bytes_ptr(r, &pb, big.size()) == 0);
  // One more reference: the pointer stays valid past the first release.
  REQUIRE(nx_buffer_retain(r) == 0);
  CHECK(nx_buffer_release(r) == 0);
  CHECK(std::memcmp(pb, big.data(), big.size()) == 0);
  CHECK(nx_buffer_release(r) == 0);
  // Reading `pb` now would be a use after free: tests/core/zc_misuse.c
  // expects AddressSanitizer's report for exactly that.
  CHECK(rb.calls == 1);
  p.drop();
}
