// Tests of libfm's channels in one process: send and receive of typed values,
// endchannel, probe, mergers, port moves under traffic, process blocks in
// threads and contexts, and the error codes.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fm.h"

namespace {

// fm_init/fm_finalize around one test case, also when a REQUIRE throws.
struct fm_guard {
  int rc;
  fm_guard() : rc(fm_init(nullptr, nullptr)) {}
  ~fm_guard() {
    if (rc == 0)
      fm_finalize();
  }
};

// Waits (bounded) until probe says a receive would not wait.
bool probe_within(fm_port_t *in, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    if (fm_probe(in) == 1)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

constexpr int32_t kTraffic = 3000;

// Migration: each stage receives `count` in-order values from the inport in
// its first argument, then sends that inport on through its second (an
// outport) unless it is the last. Writes how many arrived in order and the
// last value into its INTENT out arguments.
void stage(fm_args_t *args) {
  auto *in = static_cast<fm_port_t *>(fm_args_data(args, 0, nullptr, nullptr));
  int next_type = 0;
  auto *next =
      static_cast<fm_port_t *>(fm_args_data(args, 1, &next_type, nullptr));
  auto *spec = static_cast<int32_t *>(fm_args_data(args, 2, nullptr, nullptr));
  auto *res = static_cast<int32_t *>(fm_args_data(args, 3, nullptr, nullptr));
  // spec: first value expected, how many to take, 1 if the inport comes in
  // a message on `in` first (then `in` is the carrier channel).
  fm_port_t data;
  std::memset(&data, 0, sizeof(data));
  if (spec[2]) {
    nx_buffer_t *m;
    if (fm_receive(in, &m) != 0)
      return;
    int r = fm_get_port(m, &data);
    fm_msg_free(m);
    if (r != 0)
      return;
  } else {
    fm_moveport(in, &data);
  }
  int32_t expect = spec[0], ok = 0, last = -1;
  for (int32_t i = 0; i < spec[1]; i++) {
    int32_t v;
    if (fm_receive_int32(&data, &v) != 0)
      break;
    if (v == expect) {
      ok++;
      expect++;
    }
    last = v;
  }
  if (next_type == FM_TYPE_PORT) {
    nx_buffer_t *m;
    if (fm_send_begin(next, 64, &m) == 0) {
      if (fm_put_port(m, &data) == 0)
        fm_send_end(m);
      else
        fm_send_abort(next, m);
    }
  } else {
    // The last stage: the end follows the data, and nothing else does.
    int32_t v;
    res[2] = fm_receive_int32(&data, &v);
  }
  res[0] = ok;
  res[1] = last;
}

// Sends 0..kTraffic-1 on the outport in its first argument, then ends it.
void sender(fm_args_t *args) {
  auto *out = static_cast<fm_port_t *>(fm_args_data(args, 0, nullptr, nullptr));
  for (int32_t i = 0; i < kTraffic; i++)
    if (fm_send_int32(out, i) != 0)
      return;
  fm_endchannel(out);
}

// Doubles an inout array and writes an out value.
void doubler(fm_args_t *args) {
  int type;
  size_t n;
  auto *v = static_cast<double *>(fm_args_data(args, 0, &type, &n));
  auto *out = static_cast<int32_t *>(fm_args_data(args, 1, nullptr, nullptr));
  if (type != FM_TYPE_DOUBLE)
    return;
  for (size_t i = 0; i < n; i++)
    v[i] *= 2;
  *out = static_cast<int32_t>(n);
}

void register_all() {
  REQUIRE(fm_register("stage", stage) == 0);
  REQUIRE(fm_register("sender", sender) == 0);
  REQUIRE(fm_register("doubler", doubler) == 0);
}

} // namespace

TEST_CASE("typed values and arrays of every kind travel through a channel") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  fm_port_t in, out;
  REQUIRE(fm_channel(&in, &out) == 0);
  CHECK(fm_port_kind(&in) == FM_INPORT);
  CHECK(fm_port_kind(&out) == FM_OUTPORT);

  nx_buffer_t *m;
  REQUIRE(fm_send_begin(&out, 256, &m) == 0);
  int8_t i8[3] = {-1, 2, -3};
  int16_t i16[2] = {-300, 300};
  int64_t i64[2] = {-(1LL << 40), 1LL << 50};
  float f[2] = {1.5f, -2.25f};
  double d[3] = {3.25, -1e300, 0.5};
  const char s[] = "fortran m";
  REQUIRE(nx_put_int32(m, 42) == 0);
  REQUIRE(nx_put_int8_array(m, i8, 3) == 0);
  REQUIRE(nx_put_int16_array(m, i16, 2) == 0);
  REQUIRE(nx_put_int64_array(m, i64, 2) == 0);
  REQUIRE(nx_put_float_array(m, f, 2) == 0);
  REQUIRE(nx_put_double_array(m, d, 3) == 0);
  REQUIRE(nx_put_char_array(m, s, sizeof(s)) == 0);
  REQUIRE(fm_send_end(m) == 0);

  REQUIRE(fm_receive(&in, &m) == 0);
  int32_t v;
  int8_t ri8[3];
  int16_t ri16[2];
  int64_t ri64[2];
  float rf[2];
  double rd[3];
  char rs[sizeof(s)];
  CHECK(nx_get_int32(m, &v) == 0);
  CHECK(v == 42);
  CHECK(nx_get_int8_array(m, ri8, 3) == 0);
  CHECK(std::memcmp(ri8, i8, sizeof(i8)) == 0);
  CHECK(nx_get_int16_array(m, ri16, 2) == 0);
  CHECK(std::memcmp(ri16, i16, sizeof(i16)) == 0);
  CHECK(nx_get_int64_array(m, ri64, 2) == 0);
  CHECK(std::memcmp(ri64, i64, sizeof(i64)) == 0);
  CHECK(nx_get_float_array(m, rf, 2) == 0);
  CHECK(std::memcmp(rf, f, sizeof(f)) == 0);
  CHECK(nx_get_double_array(m, rd, 3) == 0);
  CHECK(std::memcmp(rd, d, sizeof(d)) == 0);
  CHECK(nx_get_char_array(m, rs, sizeof(s)) == 0);
  CHECK(std::string(rs) == s);
  // The wrong type is refused, as for any nexus buffer.
  CHECK(fm_msg_free(m) == 0);

  std::vector<double> big(1 << 17);
  for (size_t i = 0; i < big.size(); i++)
    big[i] = static_cast<double>(i) * 0.5;
  REQUIRE(fm_send_double_array(&out, big.data(), big.size()) == 0);
  std::vector<double> got(big.size());
  REQUIRE(fm_receive_double_array(&in, got.data(), got.size()) == 0);
  CHECK(got == big);
}

TEST_CASE("typed values: fm_put_values and fm_get_values check type and "
          "count") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  fm_port_t in, out;
  REQUIRE(fm_channel(&in, &out) == 0);
  nx_buffer_t *m;
  int64_t i64[3] = {-(1LL << 40), 7, 1LL << 50};
  int32_t i32 = -5;
  double z[4] = {0.5, -1.5, 2.25, -3.0}; // two complex(8)
  const char s[] = "abcdef";
  REQUIRE(fm_send_begin(&out, 256, &m) == 0);
  REQUIRE(fm_put_values(m, FM_TYPE_INT64, i64, 3) == 0);
  REQUIRE(fm_put_values(m, FM_TYPE_CHAR, s, 6) == 0);
  REQUIRE(fm_put_values(m, FM_TYPE_INT32, &i32, 1) == 0);
  CHECK(fm_put_values(m, FM_TYPE_PORT, i64, 1) == FM_EINVAL);
  CHECK(fm_put_values(m, 99, i64, 1) == FM_EINVAL);
  REQUIRE(fm_send_end(m) == 0);
  REQUIRE(fm_receive(&in, &m) == 0);
  int64_t r64[3] = {0, 0, 0};
  char rs[7] = {0};
  CHECK(fm_get_values(m, FM_TYPE_INT64, r64, 3) == 0);
  CHECK(std::memcmp(r64, i64, sizeof(i64)) == 0);
  CHECK(fm_get_values(m, FM_TYPE_CHAR, rs, 6) == 0);
  CHECK(std::string(rs) == s);
  // An int32 read as an int64: FM_ETYPE, nothing written.
  r64[0] = 0;
  CHECK(fm_get_values(m, FM_TYPE_INT64, r64, 1) == FM_ETYPE);
  CHECK(r64[0] == 0);
  CHECK(fm_msg_free(m) == 0);

  // Two complex values read as one: FM_ETYPE, nothing written.
  REQUIRE(fm_send_begin(&out, 256, &m) == 0);
  REQUIRE(fm_put_values(m, FM_TYPE_COMPLEX8, z, 2) == 0);
  REQUIRE(fm_send_end(m) == 0);
  REQUIRE(fm_receive(&in, &m) == 0);
  double rz[4] = {0, 0, 0, 0};
  CHECK(fm_get_values(m, FM_TYPE_COMPLEX8, rz, 1) == FM_ETYPE);
  CHECK(rz[0] == 0.0);
  CHECK(fm_msg_free(m) == 0);
}

TEST_CASE("endchannel: receive returns FM_END, every time, after the data") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  fm_port_t in, out;
  REQUIRE(fm_channel(&in, &out) == 0);
  REQUIRE(fm_send_int32(&out, 7) == 0);
  REQUIRE(fm_endchannel(&out) == 0);
  CHECK(fm_send_int32(&out, 8) == FM_ENDED);
  CHECK(fm_endchannel(&out) == FM_ENDED);
  int32_t v = 0;
  CHECK(fm_receive_int32(&in, &v) == 0);
  CHECK(v == 7);
  CHECK(fm_receive_int32(&in, &v) == FM_END);
  CHECK(fm_receive_int32(&in, &v) == FM_END);
  CHECK(fm_probe(&in) == 1);
}

TEST_CASE("probe says whether a receive would wait") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  fm_port_t in, out;
  REQUIRE(fm_channel(&in, &out) == 0);
  CHECK(fm_probe(&in) == 0);
  REQUIRE(fm_send_int32(&out, 1) == 0);
  CHECK(probe_within(&in, 5000));
  int32_t v;
  CHECK(fm_receive_int32(&in, &v) == 0);
  CHECK(fm_probe(&in) == 0);
  CHECK(fm_probe(&out) == FM_EWRONGPORT);
}

TEST_CASE("error codes: wrong ports, moved ports, bad arguments") {
  fm_port_t in, out, zero;
  std::memset(&zero, 0, sizeof(zero));
  int32_t v;
  CHECK(fm_channel(&in, &out) == FM_ENOTINIT);
  fm_guard g;
  REQUIRE(g.rc == 0);
  REQUIRE(fm_channel(&in, &out) == 0);
  CHECK(fm_receive_int32(&out, &v) == FM_EWRONGPORT);
  CHECK(fm_send_int32(&in, 1) == FM_EWRONGPORT);
  CHECK(fm_send_int32(&zero, 1) == FM_EUNDEFINED);
  CHECK(fm_receive_int32(&zero, &v) == FM_EUNDEFINED);
  CHECK(fm_send_int32(nullptr, 1) == FM_EINVAL);
  CHECK(fm_merger(&in, &out, 0) == FM_EINVAL);

  fm_port_t moved;
  REQUIRE(fm_moveport(&out, &moved) == 0);
  CHECK(fm_port_kind(&out) == FM_UNDEFINED);
  CHECK(fm_send_int32(&out, 1) == FM_EUNDEFINED);
  CHECK(fm_moveport(&out, &moved) == FM_EUNDEFINED);

  // A port put in a message is moved: the sender's copy is undefined.
  fm_port_t cin, cout;
  REQUIRE(fm_channel(&cin, &cout) == 0);
  nx_buffer_t *m;
  REQUIRE(fm_send_begin(&cout, 64, &m) == 0);
  REQUIRE(fm_put_port(m, &moved) == 0);
  CHECK(fm_send_int32(&moved, 1) == FM_EUNDEFINED);
  CHECK(fm_put_port(m, &moved) == FM_EUNDEFINED);
  REQUIRE(fm_send_end(m) == 0);
  REQUIRE(fm_receive(&cin, &m) == 0);
  fm_port_t back;
  REQUIRE(fm_get_port(m, &back) == 0);
  fm_msg_free(m);
  CHECK(fm_port_kind(&back) == FM_OUTPORT);
  REQUIRE(fm_send_int32(&back, 5) == 0);
  CHECK(fm_receive_int32(&in, &v) == 0);
  CHECK(v == 5);

  // A value where a port is expected, and a message read as the wrong type.
  REQUIRE(fm_send_int32(&back, 9) == 0);
  REQUIRE(fm_receive(&in, &m) == 0);
  fm_port_t p;
  CHECK(fm_get_port(m, &p) != 0);
  double dd;
  CHECK(nx_get_double(m, &dd) == NX_ETYPE);
  fm_msg_free(m);

  // Aborting a started message: the next one is not waited for.
  REQUIRE(fm_send_begin(&back, 8, &m) == 0);
  CHECK(fm_send_abort(&back, m) == 0);
  REQUIRE(fm_send_int32(&back, 11) == 0);
  CHECK(fm_receive_int32(&in, &v) == 0);
  CHECK(v == 11);

  // Every code has its own words.
  const int codes[] = {FM_END,      FM_EINVAL,    FM_EUNDEFINED, FM_EWRONGPORT,
                       FM_EMOVED,   FM_EPEERDEAD, FM_ENOPROCESS, FM_ENDED,
                       FM_ENOTINIT, FM_ETYPE,     FM_ENOMEM};
  for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
    for (size_t j = i + 1; j < sizeof(codes) / sizeof(codes[0]); j++)
      CHECK(std::string(fm_strerror(codes[i])) != fm_strerror(codes[j]));
  CHECK(std::string(fm_strerror(NX_EPEERDEAD)) == nx_strerror(NX_EPEERDEAD));
}

TEST_CASE("merger: every message once, FIFO per outport, no outport starved") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  constexpr int kSenders = 4, kRounds = 200;
  fm_port_t in, outs[kSenders], go_in[kSenders], go_out[kSenders];
  REQUIRE(fm_merger(&in, outs, kSenders) == 0);
  for (int s = 0; s < kSenders; s++)
    REQUIRE(fm_channel(&go_in[s], &go_out[s]) == 0);
  std::vector<std::thread> threads;
  for (int s = 0; s < kSenders; s++)
    threads.emplace_back([&, s] {
      // One message per round, when told: the rounds are lock-step, so a
      // fair merger gives each round one message of every sender.
      for (int r = 0; r < kRounds; r++) {
        int32_t tick;
        if (fm_receive_int32(&go_in[s], &tick) != 0 ||
            fm_send_int32(&outs[s], s * 100000 + r) != 0)
          return;
      }
      fm_endchannel(&outs[s]);
    });
  std::vector<int> next(kSenders, 0);
  int unfair_rounds = 0, bad_order = 0;
  for (int r = 0; r < kRounds; r++) {
    for (int s = 0; s < kSenders; s++)
      REQUIRE(fm_send_int32(&go_out[s], r) == 0);
    std::vector<int> seen(kSenders, 0);
    for (int k = 0; k < kSenders; k++) {
      int32_t v;
      REQUIRE(fm_receive_int32(&in, &v) == 0);
      int s = v / 100000, seq = v % 100000;
      REQUIRE(s >= 0);
      REQUIRE(s < kSenders);
      if (seq != next[s])
        bad_order++;
      next[s] = seq + 1;
      seen[s]++;
    }
    for (int s = 0; s < kSenders; s++)
      if (seen[s] != 1)
        unfair_rounds++;
  }
  int32_t v;
  CHECK(fm_receive_int32(&in, &v) == FM_END); // after all ends
  for (auto &t : threads)
    t.join();
  CHECK(bad_order == 0);
  CHECK(unfair_rounds == 0);
  for (int s = 0; s < kSenders; s++)
    CHECK(next[s] == kRounds);
}

TEST_CASE("an inport moves twice while a sender keeps sending") {
  register_all();
  fm_guard g;
  REQUIRE(g.rc == 0);
  auto place = GENERATE(FM_PLACE_THREAD, FM_PLACE_CONTEXT);
  fm_place_t where{};
  where.kind = place;
  fm_port_t in, out, c1in, c1out, c2in, c2out;
  REQUIRE(fm_channel(&in, &out) == 0);
  REQUIRE(fm_channel(&c1in, &c1out) == 0);
  REQUIRE(fm_channel(&c2in, &c2out) == 0);
  const int32_t k1 = 700, k2 = 900, k3 = kTraffic - k1 - k2;
  int32_t spec[3][3] = {{0, k1, 0}, {k1, k2, 1}, {k1 + k2, k3, 1}};
  int32_t res[3][3] = {{-1, -1, -1}, {-1, -1, -1}, {-1, -1, -1}};
  fm_port_t none;
  std::memset(&none, 0, sizeof(none));

  fm_block_t *b;
  REQUIRE(fm_processes_begin(&b) == 0);
  fm_args_t *a;
  // The sender first: traffic flows while the inport moves.
  REQUIRE(fm_args_create(&a) == 0);
  REQUIRE(fm_args_add_port(a, &out) == 0);
  CHECK(fm_port_kind(&out) == FM_UNDEFINED);
  REQUIRE(fm_processcall(b, "sender", &where, a) == 0);
  fm_port_t *ins[3] = {&in, &c1in, &c2in};
  fm_port_t *nexts[3] = {&c1out, &c2out, &none};
  for (int i = 0; i < 3; i++) {
    REQUIRE(fm_args_create(&a) == 0);
    REQUIRE(fm_args_add_port(a, ins[i]) == 0);
    if (fm_port_kind(nexts[i]) == FM_OUTPORT)
      REQUIRE(fm_args_add_port(a, nexts[i]) == 0);
    else // a placeholder the last stage does not use
      REQUIRE(fm_args_add(a, FM_TYPE_INT32, spec[i], 1, FM_IN) == 0);
    REQUIRE(fm_args_add(a, FM_TYPE_INT32, spec[i], 3, FM_IN) == 0);
    REQUIRE(fm_args_add(a, FM_TYPE_INT32, res[i], 3, FM_OUT) == 0);
    REQUIRE(fm_processcall(b, "stage", &where, a) == 0);
  }
  REQUIRE(fm_processes_end(b) == 0);
  CHECK(res[0][0] == k1);
  CHECK(res[0][1] == k1 - 1);
  CHECK(res[1][0] == k2);
  CHECK(res[1][1] == k1 + k2 - 1);
  CHECK(res[2][0] == k3);
  CHECK(res[2][1] == kTraffic - 1);
  CHECK(res[2][2] == FM_END); // nothing duplicated after the last value
}

TEST_CASE("process blocks copy INTENT inout and out back; errors are codes") {
  register_all();
  fm_guard g;
  REQUIRE(g.rc == 0);
  auto place = GENERATE(FM_PLACE_THREAD, FM_PLACE_CONTEXT);
  fm_place_t where{};
  where.kind = place;
  double v[4] = {1, 2, 3, 4};
  int32_t n[2] = {0, 0};
  fm_block_t *b;
  REQUIRE(fm_processes_begin(&b) == 0);
  for (int i = 0; i < 2; i++) {
    fm_args_t *a;
    REQUIRE(fm_args_create(&a) == 0);
    REQUIRE(fm_args_add(a, FM_TYPE_DOUBLE, v + 2 * i, 2, FM_INOUT) == 0);
    REQUIRE(fm_args_add(a, FM_TYPE_INT32, &n[i], 1, FM_OUT) == 0);
    REQUIRE(fm_processcall(b, "doubler", &where, a) == 0);
  }
  // Copied in at the call: a later change is not seen by the process.
  v[0] = 100;
  REQUIRE(fm_processes_end(b) == 0);
  CHECK(v[0] == 2);
  CHECK(v[1] == 4);
  CHECK(v[2] == 6);
  CHECK(v[3] == 8);
  CHECK(n[0] == 2);
  CHECK(n[1] == 2);

  REQUIRE(fm_processes_begin(&b) == 0);
  CHECK(fm_processcall(b, "no-such-process", &where, nullptr) == 0);
  CHECK(fm_processes_end(b) == FM_ENOPROCESS);
  CHECK(fm_processcall(nullptr, "doubler", &where, nullptr) == FM_EINVAL);
  fm_args_t *a;
  REQUIRE(fm_args_create(&a) == 0);
  CHECK(fm_args_add(a, 99, v, 1, FM_IN) == FM_EINVAL);
  CHECK(fm_args_add(a, FM_TYPE_INT32, n, 1, 7) == FM_EINVAL);
  CHECK(fm_args_data(a, 0, nullptr, nullptr) == nullptr);
  fm_args_free(a);
}

TEST_CASE("virtual computers: location and submachine") {
  fm_guard g;
  REQUIRE(g.rc == 0);
  int dims[2] = {3, 4};
  fm_processors_t *vc, *sub;
  REQUIRE(fm_processors_create("contexts", 2, dims, &vc) == 0);
  CHECK(fm_processors_size(vc) == 12);
  int c[2] = {2, 1};
  fm_place_t p;
  REQUIRE(fm_location(vc, c, &p) == 0);
  CHECK(p.index == 2 * 4 + 1);
  CHECK(p.kind == FM_PLACE_CONTEXT);
  int bad[2] = {3, 0};
  CHECK(fm_location(vc, bad, &p) == FM_EINVAL);
  int lo[2] = {1, 1}, hi[2] = {2, 3};
  REQUIRE(fm_submachine(vc, lo, hi, &sub) == 0);
  CHECK(fm_processors_size(sub) == 6);
  int sd[4];
  CHECK(fm_processors_dims(sub, sd) == 2);
  CHECK(sd[0] == 2);
  CHECK(sd[1] == 3);
  CHECK(fm_submachine(vc, hi, lo, &sub) == FM_EINVAL);
  CHECK(fm_processors_create("contexts", 0, dims, &vc) == FM_EINVAL);
  fm_processors_free(sub);
  fm_processors_free(vc);
}
