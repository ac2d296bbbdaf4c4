// The tcp module's handshake, version 2 (docs/tcp.md): a raw client against
// a real tcp_peer process shows that both sides prove the key over fresh
// nonces and the key never crosses the wire; that a recorded proof replayed
// on a new connection, a wrong key, and a version-1 peer (which sent the
// key) are refused and counted; and that this process, holding another key,
// refuses the peer as a client.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "nxu_auth.h"
#include "raw_client.h"
#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

namespace {

const size_t HELLO = 6 + 16 + NXU_NONCE_SIZE;
const size_t CHALLENGE = 6 + 16 + NXU_NONCE_SIZE + NXU_MAC_SIZE;

std::vector<uint8_t> key_bytes() {
  std::vector<uint8_t> k(16);
  const std::string &hex = key_hex();
  for (size_t i = 0; i < 16; i++)
    k[i] = (uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr, 16);
  return k;
}

std::vector<uint8_t> hello() {
  std::vector<uint8_t> h = raw::random_bytes(HELLO);
  std::memcpy(h.data(), "NXT1", 4);
  h[4] = 2;
  h[5] = 0;
  return h;
}

// One handshake's bytes, both ways.
struct exchange {
  std::vector<uint8_t> hello, challenge, proof, answer;
};

// Sends `h`, reads the challenge, sends `proof` (or one under `key` when
// `proof` is empty). Fills `x`; false if the server closed early.
bool run(int fd, const std::vector<uint8_t> &h, const std::vector<uint8_t> &key,
         exchange &x, std::vector<uint8_t> proof = {}) {
  x.hello = h;
  x.challenge.assign(CHALLENGE, 0);
  if (!raw::send_all(fd, h) ||
      !raw::recv_exact(fd, x.challenge.data(), CHALLENGE))
    return false;
  if (proof.empty()) {
    uint8_t ids[32];
    std::memcpy(ids, h.data() + 6, 16);
    std::memcpy(ids + 16, x.challenge.data() + 6, 16);
    proof.assign(NXU_MAC_SIZE, 0);
    REQUIRE(nxu_auth_mac(key.data(), 16, "client", h.data() + 22,
                         x.challenge.data() + 22, ids, sizeof(ids),
                         proof.data()) == 0);
  }
  x.proof = proof;
  return raw::send_all(fd, proof);
}

// Whether the challenge's proof is the server's under `key`.
bool server_proof_ok(const exchange &x, const std::vector<uint8_t> &key) {
  uint8_t ids[32];
  std::memcpy(ids, x.hello.data() + 6, 16);
  std::memcpy(ids + 16, x.challenge.data() + 6, 16);
  return nxu_auth_check(key.data(), 16, "server", x.hello.data() + 22,
                        x.challenge.data() + 22, ids, sizeof(ids),
                        x.challenge.data() + 22 + NXU_NONCE_SIZE) == 1;
}

} // namespace

TEST_CASE_METHOD(session,
                 "tcp handshake: the key never crosses the wire; replays, "
                 "wrong keys and version-1 peers are refused",
                 "[tcp][handshake]") {
  peer_process peer;
  REQUIRE(peer.start({"NX_TCP_HANDSHAKE_MS=1000"}) == "");
  REQUIRE(peer.port != 0);
  uint64_t tag = 1;
  REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, 100));
  uint64_t base[STAT_COUNT] = {};
  REQUIRE(peer_stats(peer.gp, cs.me, base));
  uint64_t bad = 0;
  const std::vector<uint8_t> key = key_bytes();

  // A good handshake: the server proves the key, accepts ours.
  exchange good;
  int fd = raw::connect_lo(peer.port);
  REQUIRE(fd >= 0);
  REQUIRE(run(fd, hello(), key, good));
  good.answer.assign(24, 0);
  REQUIRE(raw::recv_exact(fd, good.answer.data(), 24));
  CHECK(std::memcmp(good.answer.data(), "NXT1", 4) == 0);
  CHECK(good.answer[4] == 2);
  CHECK(good.answer[6] == 0); // ACCEPT
  CHECK(server_proof_ok(good, key));
  std::vector<uint8_t> wire = good.hello;
  for (auto *v : {&good.challenge, &good.proof, &good.answer})
    wire.insert(wire.end(), v->begin(), v->end());
  CHECK_FALSE(raw::contains(wire, key)); // not one copy of the key
  close(fd);

  SECTION("a recorded proof replayed on a new connection") {
    fd = raw::connect_lo(peer.port);
    REQUIRE(fd >= 0);
    exchange again;
    REQUIRE(run(fd, good.hello, key, again, good.proof));
    // The server's nonce is fresh, so the old proof no longer fits.
    CHECK(std::memcmp(again.challenge.data() + 22, good.challenge.data() + 22,
                      NXU_NONCE_SIZE) != 0);
    CHECK(raw::closed_within(fd));
    close(fd);
    bad++;
  }
  SECTION("a client with a wrong key, and what it sees") {
    std::vector<uint8_t> wrong = key;
    wrong[5] ^= 0x10;
    fd = raw::connect_lo(peer.port);
    REQUIRE(fd >= 0);
    exchange x;
    REQUIRE(run(fd, hello(), wrong, x));
    CHECK_FALSE(server_proof_ok(x, wrong)); // it would refuse the server
    CHECK(raw::closed_within(fd));          // and the server refuses it
    close(fd);
    bad++;
  }
  SECTION("a version-1 peer, which sent the key, gets a refusal it reads") {
    std::vector<uint8_t> v1 = raw::random_bytes(4 + 2 + 16 + 16);
    std::memcpy(v1.data(), "NXT1", 4);
    v1[4] = 1;
    v1[5] = 0;
    std::memcpy(v1.data() + 6, key.data(), 16);
    fd = raw::connect_lo(peer.port);
    REQUIRE(fd >= 0);
    REQUIRE(raw::send_all(fd, v1));
    uint8_t a[24];
    REQUIRE(raw::recv_exact(fd, a, sizeof(a)));
    CHECK(std::memcmp(a, "NXT1", 4) == 0);
    CHECK(a[4] == 1);               // in its own layout
    CHECK((a[6] | a[7] << 8) == 2); // GONE
    CHECK(raw::closed_within(fd));
    close(fd);
    bad++;
  }
  uint64_t s[STAT_COUNT] = {};
  uint64_t end = raw::ms() + 10000;
  do
    REQUIRE(peer_stats(peer.gp, cs.me, s));
  while (s[STAT_DROP_BAD_FRAME] - base[STAT_DROP_BAD_FRAME] < bad &&
         raw::ms() < end && (sleep_ms(20), true));
  CHECK(s[STAT_DROP_BAD_FRAME] - base[STAT_DROP_BAD_FRAME] == bad);
  CHECK(echo_round_trip(peer.gp, cs.me, tag++, 1000)); // still serving
  CHECK(peer.quit() == 0);
}

namespace {
std::atomic<int> refused{0};
void on_error(int err, uint64_t, uint32_t, void *) {
  if (err == NX_EPEERDEAD)
    refused++;
}
} // namespace

TEST_CASE("tcp handshake: a client refuses a peer whose proof does not match "
          "its key",
          "[tcp][handshake]") {
  // This process holds another key than the peer it connects to.
  std::string other = key_hex();
  other[0] = other[0] == '0' ? '1' : '0';
  setenv("NX_KEY", other.c_str(), 1);
  setenv("NX_PROTOCOLS", "tcp", 1);
  runtime_guard rt;
  unsetenv("NX_KEY");
  unsetenv("NX_PROTOCOLS");
  REQUIRE(rt.init_rc() == 0);
  peer_process peer;
  REQUIRE(peer.start() == "");
  refused = 0;
  nx_error_cb_set(on_error, nullptr);
  int r = 0;
  uint64_t end = raw::ms() + 10000;
  // The first sends are queued while the connection is set up; once the
  // handshake failed, the peer counts as dead here.
  while (r == 0 && raw::ms() < end) {
    r = send_plain(peer.gp, "nothing");
    sleep_ms(20);
  }
  CHECK(r == NX_EPEERDEAD);
  CHECK(refused.load() >= 1);
  nx_error_cb_set(nullptr, nullptr);
}
