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

// A gp as buffer bytes: tag, context, address (taken from a real gp), then
// a descriptor list of one "tcp" descriptor with this scope and data.
struct gp_forge {
  std::vector<uint8_t> prefix; // tag, context, address
  std::vector<uint8_t> scope;  // this host's
  std::vector<uint8_t> data;   // this process's tcp descriptor data
  int format = 0;

  bool init(const nx_gp_t &me) {
    nx_buffer_t *b;
    const void *bytes;
    size_t len;
    if (nx_buffer_create(64, &b) != 0 || nx_put_gp(b, &me) != 0 ||
        nx_buffer_bytes(b, &bytes, &len) != 0)
      return false;
    const uint8_t *p = static_cast<const uint8_t *>(bytes);
    format = nx_buffer_format(b);
    prefix.assign(p, p + 17);
    // Another context id, in another process.
    for (int i = 1; i < 17; i++)
      prefix[i] ^= 0x5a;
    // The list: u8 count, then u8 name_len, name, u16 wire, u8 scope_len,
    // scope, u16 data_len, data.
    size_t off = 17, n = p[off++];
    bool found = false;
    for (size_t i = 0; i < n && off < len; i++) {
      size_t nl = p[off];
      std::string name(reinterpret_cast<const char *>(p + off + 1), nl);
      off += 1 + nl + 2;
      size_t sl = p[off++];
      std::vector<uint8_t> sc(p + off, p + off + sl);
      off += sl;
      size_t dl = p[off] | p[off + 1] << 8;
      off += 2;
      if (name == "tcp") {
        scope = sc;
        data.assign(p + off, p + off + dl);
        found = true;
      }
      off += dl;
    }
    nx_buffer_release(b);
    return found;
  }

  // The gp with this scope and data; nx_get_gp's result.
  int make(const std::vector<uint8_t> &sc, const std::vector<uint8_t> &d,
           nx_gp_t *gp) const {
    std::vector<uint8_t> bytes = prefix;
    const char name[] = "tcp";
    bytes.push_back(1);
    bytes.push_back(3);
    bytes.insert(bytes.end(), name, name + 3);
    bytes.push_back(2); // wire version 2
    bytes.push_back(0);
    bytes.push_back((uint8_t)sc.size());
    bytes.insert(bytes.end(), sc.begin(), sc.end());
    bytes.push_back((uint8_t)d.size());
    bytes.push_back((uint8_t)(d.size() >> 8));
    bytes.insert(bytes.end(), d.begin(), d.end());
    nx_buffer_t *b;
    int r = nx_buffer_from_bytes(bytes.data(), bytes.size(), format, &b);
    if (r != 0)
      return r;
    r = nx_get_gp(b, gp);
    nx_buffer_release(b);
    return r;
  }

  // "tcp" when the module calls it reachable, "" when not; "?" if the gp
  // could not even be built.
  std::string protocol(const std::vector<uint8_t> &sc,
                       const std::vector<uint8_t> &d) const {
    nx_gp_t gp = NX_GP_NULL;
    if (make(sc, d, &gp) != 0)
      return "?";
    const char *p = nx_gp_protocol(&gp);
    std::string r = p != nullptr ? p : "";
    nx_gp_release(&gp);
    return r;
  }
};

// Descriptor data: version 1, flags 0, uuid, count, then addresses.
std::vector<uint8_t> desc(const std::vector<uint8_t> &uuid,
                          const std::vector<std::vector<uint8_t>> &addrs,
                          int count = -1) {
  std::vector<uint8_t> d = {1, 0};
  d.insert(d.end(), uuid.begin(), uuid.end());
  d.push_back((uint8_t)(count >= 0 ? count : (int)addrs.size()));
  for (const auto &a : addrs)
    d.insert(d.end(), a.begin(), a.end());
  return d;
}

std::vector<uint8_t> v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d,
                        uint16_t port) {
  return {4, (uint8_t)(port >> 8), (uint8_t)port, a, b, c, d};
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
