// The tcp module's settings and descriptors: bad NX_TCP_* values make its
// init fail with a reason; listening on IPv6 only, on an interface name or
// on a wildcard address works; a descriptor that is malformed, that names
// this very process, or that offers only loopback addresses of another
// host is unreachable, and random descriptor bytes never crash.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <random>
#include <string>
#include <vector>

#include "gp_forge.h"
#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

namespace {

// Runs nx_init with `name`=`value` and tcp plus local, and returns what the
// loader says about tcp: "" when it loaded, else its reason.
std::string tcp_verdict(const char *name, const char *value) {
  setup_env();
  setenv("NX_PROTOCOLS", "tcp,local", 1);
  setenv(name, value, 1);
  std::string verdict = "nx_init failed";
  {
    runtime_guard rt;
    if (rt.init_rc() == 0) {
      verdict = "tcp not listed";
      for (int i = 0; i < nx_module_count(); i++) {
        nx_module_info_t info;
        if (nx_module_info(i, &info) == 0 && std::string(info.name) == "tcp")
          verdict = info.loaded ? "" : info.reason;
      }
    }
  }
  unsetenv(name);
  setup_env();
  return verdict;
}

bool ipv6_loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0)
    return false;
  struct sockaddr_in6 in = {};
  in.sin6_family = AF_INET6;
  in.sin6_addr = in6addr_loopback;
  bool ok = bind(fd, (struct sockaddr *)&in, sizeof(in)) == 0;
  close(fd);
  return ok;
}

} // namespace

TEST_CASE("bad NX_TCP_* values: the module is skipped with a clear reason",
          "[tcp]") {
  struct {
    const char *name, *value, *says;
  } bad[] = {
      {"NX_TCP_LISTEN", "no-such-interface0", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "127.0.0.1:99999", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "127.0.0.1:http", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "[::1", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "[::1]x", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", ",", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "224.0.0.1", "NX_TCP_LISTEN"},
      {"NX_TCP_LISTEN", "192.0.2.1", "cannot listen on 192.0.2.1:0"},
      {"NX_TCP_QUEUE_MAX", "lots", "NX_TCP_QUEUE_MAX"},
      {"NX_TCP_QUEUE_MAX", "0", "NX_TCP_QUEUE_MAX"},
      {"NX_TCP_QUEUE_MAX", "64q", "NX_TCP_QUEUE_MAX"},
      {"NX_TCP_HANDSHAKE_MS", "-5", "NX_TCP_HANDSHAKE_MS"},
      {"NX_TCP_HANDSHAKE_MS", "99999999", "NX_TCP_HANDSHAKE_MS"},
  };
  for (const auto &b : bad) {
    INFO(b.name << "=" << b.value);
    std::string why = tcp_verdict(b.name, b.value);
    CHECK(why.find(b.says) != std::string::npos);
  }
  std::string many;
  for (int i = 0; i < 17; i++)
    many += "127.0.0.1,";
  CHECK(tcp_verdict("NX_TCP_LISTEN", many.c_str()).find("more than 16") !=
        std::string::npos);
  // Good values load.
  CHECK(tcp_verdict("NX_TCP_LISTEN", "127.0.0.1:0, lo") == "");
  CHECK(tcp_verdict("NX_TCP_QUEUE_MAX", "8m") == "");
  CHECK(tcp_verdict("NX_TCP_HANDSHAKE_MS", "250") == "");
}

TEST_CASE_METHOD(session,
                 "peers listening on IPv6 only, on an interface, on a wildcard "
                 "address",
                 "[tcp]") {
  std::vector<std::string> listens = {"lo", "0.0.0.0"};
  if (ipv6_loopback())
    listens.push_back("[::1]:0");
  else
    WARN("no IPv6 loopback here: IPv6-only listening not tested");
  uint64_t tag = 1;
  for (const std::string &l : listens) {
    INFO("NX_TCP_LISTEN=" << l);
    peer_process peer;
    REQUIRE(peer.start({"NX_TCP_LISTEN=" + l}) == "");
    REQUIRE(nx_gp_protocol(&peer.gp) != nullptr);
    CHECK(echo_round_trip(peer.gp, cs.me, tag++, 100000));
    CHECK(peer.quit() == 0);
  }
}

TEST_CASE("descriptors: malformed, this process, or loopback of another host "
          "are unreachable; random bytes never crash",
          "[tcp]") {
  setup_env();
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  nx_gp_t me;
  REQUIRE(nx_gp_make(nullptr, &me) == 0);
  // Only tcp is loaded, and it does not reach this process.
  CHECK(nx_gp_protocol(&me) == nullptr);
  gp_forge f;
  REQUIRE(f.init(me));
  REQUIRE(f.data.size() >= 19 + 7);
  CHECK(f.protocol(f.scope, f.data) == ""); // ourselves
  std::vector<uint8_t> other(16, 0x11);
  std::vector<uint8_t> far_scope(16, 0x22);
  const auto lo = v4(127, 0, 0, 1, 4000);
  const auto remote = v4(192, 0, 2, 7, 4000);

  CHECK(f.protocol(f.scope, desc(other, {lo})) == "tcp");
  CHECK(f.protocol(f.scope, desc(other, {remote, lo})) == "tcp");
  // Another host: its loopback addresses lead here, not there.
  CHECK(f.protocol(far_scope, desc(other, {lo})) == "");
  CHECK(f.protocol(far_scope, desc(other, {lo, remote})) == "tcp");
  // Malformed.
  CHECK(f.protocol(std::vector<uint8_t>(15, 0x11), desc(other, {lo})) == "");
  CHECK(f.protocol(f.scope, desc(other, {})) == "");       // no address
  CHECK(f.protocol(f.scope, desc(other, {lo}, 2)) == "");  // count too big
  CHECK(f.protocol(f.scope, desc(other, {lo}, 17)) == ""); // over the limit
  CHECK(f.protocol(f.scope, desc(other, {v4(127, 0, 0, 1, 0)})) == "");
  CHECK(f.protocol(f.scope, desc(other, {v4(0, 0, 0, 0, 80)})) == "");
  std::vector<uint8_t> d = desc(other, {lo});
  d[0] = 2; // a descriptor version this module does not know
  CHECK(f.protocol(f.scope, d) == "");
  d = desc(other, {lo});
  d[19] = 5; // no such family
  CHECK(f.protocol(f.scope, d) == "");
  d = desc(other, {lo});
  d.push_back(0); // trailing byte
  CHECK(f.protocol(f.scope, d) == "");
  d = desc(other, {lo, remote});
  for (size_t cut = 1; cut < d.size(); cut++) {
    INFO("cut to " << cut << " bytes");
    std::vector<uint8_t> t(d.begin(), d.begin() + (long)cut);
    CHECK(f.protocol(f.scope, t) == "");
  }
  // Random bytes: whatever they say, nothing crashes.
  std::mt19937 rng(12345);
  int reachable = 0;
  for (int i = 0; i < 3000; i++) {
    std::vector<uint8_t> junk(rng() % 80);
    for (auto &c : junk)
      c = (uint8_t)rng();
    if (i % 3 == 0 && junk.size() > 19) { // often a plausible head
      junk[0] = 1;
      junk[18] = (uint8_t)(rng() % 3);
    }
    std::string p = f.protocol(i % 2 ? f.scope : far_scope, junk);
    reachable += p == "tcp";
  }
  INFO(reachable << " random descriptors parsed");
  nx_gp_release(&me);
}
