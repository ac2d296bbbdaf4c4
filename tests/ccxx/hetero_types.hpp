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
