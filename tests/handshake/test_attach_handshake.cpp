// Attach's handshake, NXA2 (nexus/src/processes/attach.c): against this
// process's own listener, a raw client shows that both sides prove the key over
// fresh nonces and the key never crosses the wire; a recorded proof replayed, a
// wrong key and the old NXA1 exchange (which sent the key) are refused and
// counted; nx_attach with a URL of another key refuses the listener.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nexus.h"
#include "nxu_auth.h"
#include "raw_client.h"
#include "runtime_guard.h"

namespace {

const size_t CHALLENGE = 4 + NXU_NONCE_SIZE + NXU_MAC_SIZE;
const uint8_t CTX[] = {'a', 't', 't', 'a', 'c', 'h'};

struct exchange {
  std::vector<uint8_t> hello, challenge, proof;
};

std::vector<uint8_t> hello() {
  std::vector<uint8_t> h = raw::random_bytes(4 + NXU_NONCE_SIZE);
  std::memcpy(h.data(), "NXA2", 4);
  return h;
}

bool run(int fd, const std::vector<uint8_t> &h, const std::vector<uint8_t> &key,
         exchange &x, std::vector<uint8_t> proof = {}) {
  x.hello = h;
  x.challenge.assign(CHALLENGE, 0);
  if (!raw::send_all(fd, h) ||
      !raw::recv_exact(fd, x.challenge.data(), CHALLENGE))
    return false;
  if (proof.empty()) {
    proof.assign(NXU_MAC_SIZE, 0);
    REQUIRE(nxu_auth_mac(key.data(), key.size(), "client", h.data() + 4,
                         x.challenge.data() + 4, CTX, sizeof(CTX),
                         proof.data()) == 0);
  }
  x.proof = proof;
  return raw::send_all(fd, proof);
}

uint64_t drops() {
  nx_stats_t s;
  REQUIRE(nx_stats_get(&s) == 0);
  return s.drop_bad_frame;
}

// Waits until the bad-input counter reaches `n`.
bool drops_reach(uint64_t n) {
  uint64_t end = raw::ms() + 5000;
  while (drops() < n && raw::ms() < end)
    usleep(10000);
  return drops() == n;
}

} // namespace

TEST_CASE("attach handshake: the key never crosses the wire; replays, wrong "
          "keys and NXA1 are refused",
          "[attach][handshake]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  const char *url = nullptr;
  REQUIRE(nx_attach_listen(&url) == 0);
  unsigned port = 0;
  REQUIRE(std::sscanf(url, "nexus://127.0.0.1:%u/", &port) == 1);
  std::string hex = std::strrchr(url, '/') + 1;
  REQUIRE(hex.size() == 32);
  std::vector<uint8_t> key(16);
  for (size_t i = 0; i < 16; i++)
    key[i] = (uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr, 16);
  uint64_t base = drops();

  // A good exchange ends with the listener's peer entry.
  int fd = raw::connect_lo((uint16_t)port);
  REQUIRE(fd >= 0);
  exchange good;
  REQUIRE(run(fd, hello(), key, good));
  CHECK(nxu_auth_check(key.data(), 16, "server", good.hello.data() + 4,
                       good.challenge.data() + 4, CTX, sizeof(CTX),
                       good.challenge.data() + 4 + NXU_NONCE_SIZE) == 1);
  uint8_t head[8];
  REQUIRE(raw::recv_exact(fd, head, sizeof(head)));
  CHECK(std::memcmp(head, "NXA2", 4) == 0);
  close(fd);
  std::vector<uint8_t> wire = good.hello;
  wire.insert(wire.end(), good.challenge.begin(), good.challenge.end());
  wire.insert(wire.end(), good.proof.begin(), good.proof.end());
  CHECK_FALSE(raw::contains(wire, key));

  // The recorded proof, replayed: the listener's nonce is new.
  fd = raw::connect_lo((uint16_t)port);
  REQUIRE(fd >= 0);
  exchange again;
  REQUIRE(run(fd, good.hello, key, again, good.proof));
  CHECK(std::memcmp(again.challenge.data() + 4, good.challenge.data() + 4,
                    NXU_NONCE_SIZE) != 0);
  CHECK(raw::closed_within(fd));
  close(fd);
  CHECK(drops_reach(base + 1));

  // A wrong key.
  std::vector<uint8_t> wrong = key;
  wrong[0] ^= 1;
  fd = raw::connect_lo((uint16_t)port);
  REQUIRE(fd >= 0);
  exchange x;
  REQUIRE(run(fd, hello(), wrong, x));
  CHECK(raw::closed_within(fd));
  close(fd);
  CHECK(drops_reach(base + 2));

  // The old exchange, NXA1 and the key: refused without an answer.
  fd = raw::connect_lo((uint16_t)port);
  REQUIRE(fd >= 0);
  std::vector<uint8_t> v1 = {'N', 'X', 'A', '1'};
  v1.insert(v1.end(), key.begin(), key.end());
  REQUIRE(raw::send_all(fd, v1));
  CHECK(raw::closed_within(fd));
  close(fd);
  CHECK(drops_reach(base + 3));

  // nx_attach with another key refuses the listener (its proof fails),
  // and the right URL still works.
  std::string bad = url;
  bad.back() = bad.back() == '0' ? '1' : '0';
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_attach(bad.c_str(), &gp) == NX_EACCES);
  CHECK(nx_gp_is_null(&gp));
  CHECK(nx_attach(url, &gp) == 0);
  nx_gp_release(&gp);
}
