// Tests of nexus/src/rsr/rsr.c and the local module: RSR ping-pong between
// in-process contexts, every type through an RSR (native and foreign
// format), global pointers carried in RSRs and used by the receiver.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>
#include <cstdint>
#include <cstring>
#include <vector>

#include "latch.h"
#include "nexus.h"
#include "runtime_guard.h"

namespace {

// --- ping-pong --------------------------------------------------------------

// Handlers run on runtime threads, where Catch2 may not assert: they count
// failures, and the test checks the count.
std::atomic<int> handler_failures{0};

struct pong_state {
  latch done;
  int32_t last = -1;
};

void on_pong(nx_context_t *, void *addr, nx_buffer_t *buf) {
  auto *st = static_cast<pong_state *>(addr);
  int32_t v = 0;
  if (nx_get_int32(buf, &v) != 0)
    handler_failures++;
  st->last = v;
  st->done.add();
}

// Replies to the gp in the buffer with the counter + 1.
void on_ping(nx_context_t *, void *, nx_buffer_t *buf) {
  int32_t v = 0;
  nx_gp_t reply = NX_GP_NULL;
  nx_buffer_t *out;
  if (nx_get_int32(buf, &v) != 0 || nx_get_gp(buf, &reply) != 0 ||
      nx_rsr_init_name(&out, &reply, "pong", 16) != 0) {
    handler_failures++;
    return;
  }
  if (nx_put_int32(out, v + 1) != 0 || nx_rsr_send(out) != 0)
    handler_failures++;
  nx_gp_release(&reply);
}

int register_ping(nx_context_t *ctx, void *arg) {
  int kind = *static_cast<int *>(arg);
  return nx_handler_register(ctx, "ping", on_ping, kind, nullptr);
}

void ping_pong(int ping_kind, int pong_kind) {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  pong_state st;
  REQUIRE(nx_handler_register(nx_context_self(), "pong", on_pong, pong_kind,
                              nullptr) == 0);
  nx_gp_t me, peer;
  REQUIRE(nx_gp_make(&st, &me) == 0);
  REQUIRE(nx_context_create_local(register_ping, &ping_kind, &peer) == 0);
  CHECK(std::string(nx_gp_protocol(&peer)) == "local");
  const int rounds = 2000;
  for (int i = 0; i < rounds; i++) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &peer, "ping",
                             nx_sizeof_int32(1) + nx_sizeof_gp(&me)) == 0);
    REQUIRE(nx_put_int32(b, i) == 0);
    REQUIRE(nx_put_gp(b, &me) == 0);
    REQUIRE(nx_rsr_send(b) == 0);
    REQUIRE(st.done.wait_for(i + 1) == i + 1);
    REQUIRE(st.last == i + 1);
  }
  CHECK(handler_failures == 0);
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  CHECK(s.rsr_sent >= 2 * rounds);
  CHECK(s.rsr_handled >= 2 * rounds);
  CHECK(s.drop_no_handler == 0);
  REQUIRE(nx_context_destroy(&peer) == 0);
  nx_gp_release(&peer);
  nx_gp_release(&me);
}

} // namespace

TEST_CASE("RSR ping-pong between two in-process contexts", "[rsr]") {
  SECTION("non-threaded handlers") {
    ping_pong(NX_HANDLER_NONTHREADED, NX_HANDLER_NONTHREADED);
  }
  SECTION("threaded handlers") {
    ping_pong(NX_HANDLER_THREADED, NX_HANDLER_THREADED);
  }
  SECTION("mixed") { ping_pong(NX_HANDLER_THREADED, NX_HANDLER_NONTHREADED); }
  SECTION("new-thread handlers") {
    ping_pong(NX_HANDLER_NEW_THREAD, NX_HANDLER_NONTHREADED);
  }
}

// --- every type through an RSR ----------------------------------------------

namespace {

struct typed_result {
  latch done;
  int failures = 0;
  int checked = 0;
};

const int8_t i8 = INT8_MIN;
const uint8_t u8 = UINT8_MAX;
const int16_t i16 = -12345;
const uint16_t u16 = 54321;
const int32_t i32 = INT32_MIN + 7;
const uint32_t u32 = 0xdeadbeefu;
const int64_t i64 = INT64_MIN + 11;
const uint64_t u64 = 0x0123456789abcdefull;
const float f32 = -1.5e-30f;
const double f64 = 6.02214076e23;
const char ch = 'Z';

const int8_t ai8[] = {-1, 2, -3};
const uint8_t au8[] = {1, 200, 255};
const int16_t ai16[] = {-300, 301, 0x1234};
const uint16_t au16[] = {65535, 1, 0xabcd};
const int32_t ai32[] = {-70000, 70000, 0x12345678};
const uint32_t au32[] = {4000000000u, 1, 0x89abcdefu};
const int64_t ai64[] = {-(1ll << 40), 1ll << 50, 0x0102030405060708ll};
const uint64_t au64[] = {~0ull, 3, 0x8877665544332211ull};
const float af32[] = {1.25f, -0.0f, 3.4e38f};
const double af64[] = {-2.5, 1e-300, 1.7976931348623157e308};
const char ach[] = {'n', 'x', '!'};
const unsigned char bytes[] = {0x00, 0xff, 0x10, 0x01};

void put_everything(nx_buffer_t *b, const nx_gp_t *gp) {
  REQUIRE(nx_put_int8(b, i8) == 0);
  REQUIRE(nx_put_uint8(b, u8) == 0);
  REQUIRE(nx_put_int16(b, i16) == 0);
  REQUIRE(nx_put_uint16(b, u16) == 0);
  REQUIRE(nx_put_int32(b, i32) == 0);
  REQUIRE(nx_put_uint32(b, u32) == 0);
  REQUIRE(nx_put_int64(b, i64) == 0);
  REQUIRE(nx_put_uint64(b, u64) == 0);
  REQUIRE(nx_put_float(b, f32) == 0);
  REQUIRE(nx_put_double(b, f64) == 0);
  REQUIRE(nx_put_char(b, ch) == 0);
  REQUIRE(nx_put_int8_array(b, ai8, 3) == 0);
  REQUIRE(nx_put_uint8_array(b, au8, 3) == 0);
  REQUIRE(nx_put_int16_array(b, ai16, 3) == 0);
  REQUIRE(nx_put_uint16_array(b, au16, 3) == 0);
  REQUIRE(nx_put_int32_array(b, ai32, 3) == 0);
  REQUIRE(nx_put_uint32_array(b, au32, 3) == 0);
  REQUIRE(nx_put_int64_array(b, ai64, 3) == 0);
  REQUIRE(nx_put_uint64_array(b, au64, 3) == 0);
  REQUIRE(nx_put_float_array(b, af32, 3) == 0);
  REQUIRE(nx_put_double_array(b, af64, 3) == 0);
  REQUIRE(nx_put_char_array(b, ach, 3) == 0);
  REQUIRE(nx_put_bytes(b, bytes, sizeof(bytes)) == 0);
  REQUIRE(nx_put_gp(b, gp) == 0);
}

// Runs in the receiver; counts mismatches instead of throwing on a runtime
// thread.
void on_typed(nx_context_t *, void *addr, nx_buffer_t *b) {
  auto *res = static_cast<typed_result *>(addr);
  int bad = 0;
#define GET_ONE(fn, T, want)                                                   \
  do {                                                                         \
    T v{};                                                                     \
    if (fn(b, &v) != 0 || std::memcmp(&v, &want, sizeof(T)) != 0)              \
      bad++;                                                                   \
  } while (0)
#define GET_ARR(fn, T, want)                                                   \
  do {                                                                         \
    T v[3]{};                                                                  \
    if (fn(b, v, 3) != 0 || std::memcmp(v, want, sizeof(v)) != 0)              \
      bad++;                                                                   \
  } while (0)
  GET_ONE(nx_get_int8, int8_t, i8);
  GET_ONE(nx_get_uint8, uint8_t, u8);
  GET_ONE(nx_get_int16, int16_t, i16);
  GET_ONE(nx_get_uint16, uint16_t, u16);
  GET_ONE(nx_get_int32, int32_t, i32);
  GET_ONE(nx_get_uint32, uint32_t, u32);
  GET_ONE(nx_get_int64, int64_t, i64);
  GET_ONE(nx_get_uint64, uint64_t, u64);
  GET_ONE(nx_get_float, float, f32);
  GET_ONE(nx_get_double, double, f64);
  GET_ONE(nx_get_char, char, ch);
  GET_ARR(nx_get_int8_array, int8_t, ai8);
  GET_ARR(nx_get_uint8_array, uint8_t, au8);
  GET_ARR(nx_get_int16_array, int16_t, ai16);
  GET_ARR(nx_get_uint16_array, uint16_t, au16);
  GET_ARR(nx_get_int32_array, int32_t, ai32);
  GET_ARR(nx_get_uint32_array, uint32_t, au32);
  GET_ARR(nx_get_int64_array, int64_t, ai64);
  GET_ARR(nx_get_uint64_array, uint64_t, au64);
  GET_ARR(nx_get_float_array, float, af32);
  GET_ARR(nx_get_double_array, double, af64);
  GET_ARR(nx_get_char_array, char, ach);
#undef GET_ONE
#undef GET_ARR
  unsigned char by[4];
  if (nx_get_bytes(b, by, 4) != 0 || std::memcmp(by, bytes, 4) != 0)
    bad++;
  nx_gp_t gp = NX_GP_NULL;
  if (nx_get_gp(b, &gp) != 0 || nx_gp_address(&gp) != addr)
    bad++;
  nx_gp_release(&gp);
  if (nx_buffer_remaining(b) != 0)
    bad++;
  res->failures += bad;
  res->checked++;
  res->done.add();
}

} // namespace

TEST_CASE("every type survives an RSR, in native and foreign format", "[rsr]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  typed_result res;
  nx_gp_t peer;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "typed", on_typed,
                                           NX_HANDLER_NONTHREADED, nullptr);
              },
              &res, &peer) == 0);
  REQUIRE(nx_gp_address(&peer) == &res);
  for (int format : {NX_FORMAT_LITTLE, NX_FORMAT_BIG}) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &peer, "typed", 256) == 0);
    REQUIRE(nx_buffer_set_format(b, format) == 0);
    put_everything(b, &peer);
    REQUIRE(nx_rsr_send(b) == 0);
  }
  REQUIRE(res.done.wait_for(2) == 2);
  CHECK(res.checked == 2);
  CHECK(res.failures == 0);
  nx_gp_release(&peer);
}

// --- global pointers passed along -------------------------------------------

namespace {

struct counter_ctx {
  latch hits;
};

void on_count(nx_context_t *ctx, void *, nx_buffer_t *) {
  static_cast<counter_ctx *>(nx_context_data(ctx))->hits.add();
}

struct forwarder {
  latch forwarded;
  // Threaded handlers may run at the same time (on the progress thread and
  // on a thread waiting in nexus): `proto` is written under forwarded.m.
  std::string proto;
};

// B: receives a gp to C and sends C an RSR through it.
void on_forward(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *self = static_cast<forwarder *>(nx_context_data(ctx));
  nx_gp_t c = NX_GP_NULL;
  if (nx_get_gp(b, &c) == 0) {
    const char *p = nx_gp_protocol(&c);
    nx_mutex_lock(&self->forwarded.m);
    self->proto = p ? p : "(none)";
    nx_mutex_unlock(&self->forwarded.m);
    nx_buffer_t *out;
    if (nx_rsr_init_name(&out, &c, "count", 0) == 0 && nx_rsr_send(out) == 0)
      self->forwarded.add();
  }
  nx_gp_release(&c);
}

} // namespace

TEST_CASE("a gp handed over in a buffer reaches its context", "[rsr][gp]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  counter_ctx cdata;
  forwarder bdata;
  nx_gp_t b, c;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "count", on_count,
                                           NX_HANDLER_NONTHREADED, nullptr);
              },
              &cdata, &c) == 0);
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "forward", on_forward,
                                           NX_HANDLER_THREADED, nullptr);
              },
              &bdata, &b) == 0);
  for (int i = 0; i < 10; i++) {
    nx_buffer_t *buf;
    REQUIRE(nx_rsr_init_name(&buf, &b, "forward", nx_sizeof_gp(&c)) == 0);
    REQUIRE(nx_put_gp(buf, &c) == 0);
    REQUIRE(nx_rsr_send(buf) == 0);
  }
  REQUIRE(bdata.forwarded.wait_for(10) == 10);
  REQUIRE(cdata.hits.wait_for(10) == 10);
  nx_mutex_lock(&bdata.forwarded.m);
  CHECK(bdata.proto == "local");
  nx_mutex_unlock(&bdata.forwarded.m);
  REQUIRE(nx_context_destroy(&b) == 0);
  REQUIRE(nx_context_destroy(&c) == 0);
  nx_gp_release(&b);
  nx_gp_release(&c);
}

// --- a handler keeps its buffer ---------------------------------------------

namespace {
struct keeper {
  latch got;
  nx_buffer_t *kept = nullptr;
};
void on_keep(nx_context_t *ctx, void *, nx_buffer_t *b) {
  auto *k = static_cast<keeper *>(nx_context_data(ctx));
  if (nx_buffer_retain(b) == 0)
    k->kept = b;
  k->got.add();
}
} // namespace

TEST_CASE("a handler may keep its buffer past return without a copy",
          "[rsr][buffer]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  keeper k;
  nx_gp_t peer;
  REQUIRE(nx_context_create_local(
              [](nx_context_t *ctx, void *arg) {
                nx_context_set_data(ctx, arg);
                return nx_handler_register(ctx, "keep", on_keep,
                                           NX_HANDLER_NONTHREADED, nullptr);
              },
              &k, &peer) == 0);
  std::vector<double> data(10000);
  for (size_t i = 0; i < data.size(); i++)
    data[i] = i * 0.5;
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &peer, "keep", nx_sizeof_double(data.size())) ==
          0);
  REQUIRE(nx_put_double_array(b, data.data(), data.size()) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(k.got.wait_for(1) == 1);
  REQUIRE(k.kept != nullptr);
  // The handler returned long ago; the buffer is still ours to read.
  std::vector<double> back(data.size());
  REQUIRE(nx_get_double_array(k.kept, back.data(), back.size()) == 0);
  CHECK(back == data);
  CHECK(nx_put_int32(k.kept, 1) == NX_EINVAL); // received buffers are read-only
  REQUIRE(nx_buffer_release(k.kept) == 0);
  nx_gp_release(&peer);
}

// --- a handler's burst to contexts of this process ---------------------------

namespace {

// A handler's sends to contexts of this process wait on the driver's own
// queue (docs/design.md, "The driver lock"); what is left on it when the
// driver lets go (a batch's end, a threaded handler started) moves to the
// receive queue. Every RSR of a burst longer than a batch runs once.
const int burst = 300;

struct burst_state {
  latch done;
  std::atomic<int> seen[burst];
  std::atomic<int> bad{0};
  burst_state() {
    for (auto &s : seen)
      s = 0;
  }
};

void on_leaf(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *st = static_cast<burst_state *>(nx_context_data(ctx));
  int32_t i = -1;
  if (nx_get_int32(buf, &i) != 0 || i < 0 || i >= burst)
    st->bad++;
  else
    st->seen[i]++;
  st->done.add();
}

// Sends `burst` RSRs to the gp in its buffer, before it returns.
void on_fan(nx_context_t *ctx, void *, nx_buffer_t *buf) {
  auto *st = static_cast<burst_state *>(nx_context_data(ctx));
  nx_gp_t to = NX_GP_NULL;
  if (nx_get_gp(buf, &to) != 0) {
    st->bad++;
    return;
  }
  for (int32_t i = 0; i < burst; i++) {
    nx_buffer_t *out;
    if (nx_rsr_init_name(&out, &to, "leaf", nx_sizeof_int32(1)) != 0 ||
        nx_put_int32(out, i) != 0 || nx_rsr_send(out) != 0)
      st->bad++;
  }
  nx_gp_release(&to);
}

struct burst_setup {
  burst_state *st;
  int leaf_kind;
};

int register_burst(nx_context_t *ctx, void *arg) {
  auto *su = static_cast<burst_setup *>(arg);
  nx_context_set_data(ctx, su->st);
  int r =
      nx_handler_register(ctx, "fan", on_fan, NX_HANDLER_NONTHREADED, nullptr);
  return r != 0 ? r
                : nx_handler_register(ctx, "leaf", on_leaf, su->leaf_kind,
                                      nullptr);
}

// Sends "fan" to a new context, its burst going to a second one; with
// `finalize_at_once`, nx_finalize follows the send (it runs what is queued
// before it ends), else the test waits for the burst.
void fan_out(int leaf_kind, bool finalize_at_once) {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  burst_state st;
  burst_setup su{&st, leaf_kind};
  nx_gp_t fan, leaves;
  REQUIRE(nx_context_create_local(register_burst, &su, &fan) == 0);
  REQUIRE(nx_context_create_local(register_burst, &su, &leaves) == 0);
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &fan, "fan", nx_sizeof_gp(&leaves)) == 0);
  REQUIRE(nx_put_gp(b, &leaves) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  if (finalize_at_once) {
    nx_gp_release(&fan);
    nx_gp_release(&leaves);
    REQUIRE(rt.finalize() == 0);
  } else {
    REQUIRE(st.done.wait_for(burst) == burst);
    nx_gp_release(&fan);
    nx_gp_release(&leaves);
  }
  CHECK(st.bad == 0);
  int once = 0;
  for (auto &s : st.seen)
    once += s == 1;
  CHECK(once == burst);
}

} // namespace

TEST_CASE("a handler's burst to contexts of this process runs once each",
          "[rsr]") {
  SECTION("non-threaded leaves") { fan_out(NX_HANDLER_NONTHREADED, false); }
  SECTION("threaded leaves") { fan_out(NX_HANDLER_THREADED, false); }
  SECTION("nx_finalize right after: non-threaded leaves") {
    fan_out(NX_HANDLER_NONTHREADED, true);
  }
  SECTION("nx_finalize right after: threaded leaves") {
    fan_out(NX_HANDLER_THREADED, true);
  }
}

TEST_CASE("nx_rsr_init refuses bad arguments", "[rsr][badinput]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  nx_gp_t null_gp = NX_GP_NULL;
  nx_buffer_t *b = nullptr;
  CHECK(nx_rsr_init(nullptr, &me, 1, 0) == NX_EINVAL);
  CHECK(nx_rsr_init(&b, nullptr, 1, 0) == NX_EINVAL);
  CHECK(nx_rsr_init(&b, &null_gp, 1, 0) == NX_EINVAL);
  CHECK(nx_rsr_init(&b, &me, 0, 0) == NX_EINVAL);
  CHECK(nx_rsr_init_name(&b, &me, "", 0) == NX_EINVAL);
  CHECK(nx_rsr_init_name(&b, &me, nullptr, 0) == NX_EINVAL);
  CHECK(b == nullptr);
  CHECK(nx_rsr_send(nullptr) == NX_EINVAL);
  nx_buffer_t *standalone;
  REQUIRE(nx_buffer_create(16, &standalone) == 0);
  CHECK(nx_rsr_send(standalone) == NX_EINVAL); // not an RSR: not consumed
  CHECK(nx_buffer_release(standalone) == 0);
  nx_gp_release(&me);
}
