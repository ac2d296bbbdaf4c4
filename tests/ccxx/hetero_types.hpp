// What crosses between the x86-64 host and the big-endian peer in the ccxx
// heterogeneity test (hetero_host.cpp, hetero_peer.cpp): an aggregate with a
// field of each transferable kind, sent with no transfer code of its own.
#ifndef CCXX_TESTS_HETERO_TYPES_HPP
#define CCXX_TESTS_HETERO_TYPES_HPP

#include <ccxx/ccxx.hpp>

#include <sys/utsname.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

enum class unit : int32_t { volt = 0x01020304, amp = 0x0a0b0c0d };

struct origin {
  int16_t rack;
  std::string site;
};

struct reading {
  int32_t id;
  int64_t stamp;
  uint16_t channel;
  double value;
  float scale;
  bool valid;
  unit u;
  std::string label;
  std::vector<int32_t> samples;
  std::array<uint32_t, 2> range;
  std::map<std::string, int64_t> counts;
  std::pair<int16_t, double> peak;
  std::tuple<uint64_t, int8_t> tag;
  std::optional<int32_t> limit;
  origin from;
};

// The reading the host sends; every multi-byte value has distinct bytes,
// so a missing byte-order conversion changes it.
inline reading sent() {
  return reading{0x11223344,
                 -0x0102030405060708LL,
                 0xabcd,
                 -1234.5678,
                 3.25f,
                 true,
                 unit::volt,
                 "big and little",
                 {1, -2, 0x7f00ff00},
                 {{0xdeadbeef, 7}},
                 {{"a", 1}, {"bc", -0x100000000LL}},
                 {-300, 0.125},
                 {0x0102030405060708ULL, -5},
                 0x01000002,
                 {-2, "lab"}};
}

// What the peer does to it (and the host checks).
inline reading revised(reading r) {
  r.id += 1;
  r.stamp *= 2;
  r.channel = static_cast<uint16_t>(r.channel ^ 0xffff);
  r.value = -r.value;
  r.scale *= 2;
  r.valid = !r.valid;
  r.u = unit::amp;
  r.label += " endians";
  r.samples.push_back(static_cast<int32_t>(r.samples.size()));
  r.range[1] = r.range[0] / 2;
  r.counts["peer"] = 0x0506070809LL;
  r.peak.first = static_cast<int16_t>(-r.peak.first);
  std::get<1>(r.tag) = static_cast<int8_t>(std::get<1>(r.tag) * 3);
  r.limit.reset();
  r.from.rack = static_cast<int16_t>(r.from.rack * 1000);
  r.from.site += "/s390x";
  return r;
}

inline bool same(const reading &a, const reading &b) {
  return a.id == b.id && a.stamp == b.stamp && a.channel == b.channel &&
         a.value == b.value && a.scale == b.scale && a.valid == b.valid &&
         a.u == b.u && a.label == b.label && a.samples == b.samples &&
         a.range == b.range && a.counts == b.counts && a.peak == b.peak &&
         a.tag == b.tag && a.limit == b.limit && a.from.rack == b.from.rack &&
         a.from.site == b.from.site;
}

// Large vectors, each a call's last argument: received straight into the
// parameter's storage over tcp (docs/ccxx.md, "Large arguments") and
// converted where they landed. Every element has distinct bytes.
inline const uint64_t big_n = (uint64_t(1) << 20) / sizeof(double);
inline double big_double(uint64_t i) { return -1234.5678 * double(i + 1) / 7; }
inline int32_t big_int(uint64_t i) {
  return static_cast<int32_t>(0x01020304u + uint32_t(i) * 0x01010101u);
}
inline std::vector<double> big_doubles() {
  std::vector<double> v(big_n);
  for (uint64_t i = 0; i < big_n; i++)
    v[i] = big_double(i);
  return v;
}
inline std::vector<int32_t> big_ints() {
  std::vector<int32_t> v(big_n);
  for (uint64_t i = 0; i < big_n; i++)
    v[i] = big_int(i);
  return v;
}

// Set by Meter::quit: the peer exits.
inline ccxx::sync<int> quit_signal;

// The peer's object.
class Meter {
public:
  // Checks that `r` arrived as sent (`ok` says so: a verdict computed on
  // the peer) and returns it revised.
  std::pair<bool, reading> check(reading r) {
    return {same(r, sent()), revised(r)};
  }
  // Calls check on `other` (an object of the other program) and says
  // whether both directions carried the reading as sent: calls go both
  // ways between the two programs.
  bool ask(ccxx::global_ptr<Meter> other) {
    std::pair<bool, reading> r = other.call<&Meter::check>(sent());
    return r.first && same(r.second, revised(sent()));
  }
  // The elements of a large vector that did not arrive as sent (and all n
  // when its length is wrong).
  uint64_t doubles(uint64_t n, std::vector<double> v) {
    if (v.size() != n)
      return n;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
      bad += v[i] != big_double(i);
    return bad;
  }
  uint64_t ints(uint64_t n, std::vector<int32_t> v) {
    if (v.size() != n)
      return n;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
      bad += v[i] != big_int(i);
    return bad;
  }
  // Arguments this process received by placement (ccxx::placement()).
  uint64_t placed() { return ccxx::placement().placed; }
  // Sends `other` both large vectors: true when they arrived as sent and
  // both were placed.
  bool ask_big(ccxx::global_ptr<Meter> other) {
    uint64_t before = other.call<&Meter::placed>();
    bool ok = other.call<&Meter::doubles>(big_n, big_doubles()) == 0 &&
              other.call<&Meter::ints>(big_n, big_ints()) == 0;
    return ok && other.call<&Meter::placed>() == before + 2;
  }
  // The machine the object runs on (uname -m).
  std::string machine() {
    struct utsname u;
    return uname(&u) == 0 ? u.machine : "?";
  }
  // Lets the peer exit.
  int quit() {
    quit_signal = 1;
    return 0;
  }
};

#endif // CCXX_TESTS_HETERO_TYPES_HPP
