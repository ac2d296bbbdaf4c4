// Attach's handshake, NXA2 (nexus/src/processes/attach.c): against this
// process's own listener, a raw client shows that both sides prove the key over
// fresh nonces and the key never crosses the wire; a recorded proof replayed, a
// wrong key and the old NXA1 exchange (which sent the key) are refused and
// counted; nx_attach with a URL of another key refuses the listener. A peer
// that stalls mid-message, on either side, times out.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
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

namespace {

// A listener of this test's own on 127.0.0.1: its port.
int raw_listener(unsigned *port) {
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(sa);
  if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
      listen(ls, 4) != 0 || getsockname(ls, (struct sockaddr *)&sa, &len) != 0)
    return -1;
  *port = ntohs(sa.sin_port);
  return ls;
}

} // namespace

// Each step of the exchange has 5 s (IO_TIMEOUT_MS), on either side: a
// listener that stalls mid-message fails nx_attach with NX_ETIMEDOUT, and
// an attacher that stalls mid-message is dropped by the listener, which
// meanwhile serves the others (its loop serves every connection at once).
TEST_CASE("attach: a peer that stalls mid-message times out",
          "[attach][handshake]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);

  // A listener that answers half a challenge, then nothing.
  unsigned port = 0;
  int ls = raw_listener(&port);
  REQUIRE(ls >= 0);
  std::string url = "nexus://127.0.0.1:" + std::to_string(port) +
                    "/000102030405060708090a0b0c0d0e0f";
  std::thread stalling([ls] {
    int fd = accept(ls, nullptr, nullptr);
    uint8_t hello[4 + NXU_NONCE_SIZE];
    if (fd >= 0 && raw::recv_exact(fd, hello, sizeof(hello))) {
      raw::send_all(fd, "NXA2", 4);
      raw::send_all(fd, hello + 4, 10); // a part of a nonce
      raw::closed_within(fd, 10000);    // until the attacher gives up
    }
    if (fd >= 0)
      close(fd);
  });
  nx_gp_t gp = NX_GP_NULL;
  uint64_t t0 = raw::ms();
  CHECK(nx_attach(url.c_str(), &gp) == NX_ETIMEDOUT);
  uint64_t took = raw::ms() - t0;
  CHECK(took >= 4500);
  CHECK(took < 9000);
  CHECK(nx_gp_is_null(&gp));
  stalling.join();
  close(ls);

  // This process's listener, and an attacher that stalls in its hello.
  const char *mine = nullptr;
  REQUIRE(nx_attach_listen(&mine) == 0);
  unsigned lport = 0;
  REQUIRE(std::sscanf(mine, "nexus://127.0.0.1:%u/", &lport) == 1);
  int fd = raw::connect_lo((uint16_t)lport);
  REQUIRE(fd >= 0);
  t0 = raw::ms();
  REQUIRE(raw::send_all(fd, "NXA2", 4)); // and half a nonce: then nothing
  REQUIRE(raw::send_all(fd, raw::random_bytes(NXU_NONCE_SIZE / 2)));
  // Another attacher is served meanwhile, at once.
  CHECK(nx_attach(mine, &gp) == 0);
  CHECK(raw::ms() - t0 < 4000);
  nx_gp_release(&gp);
  // The stalled one is dropped once its step's 5 s are over.
  CHECK(raw::closed_within(fd, 9000));
  CHECK(raw::ms() - t0 >= 4500);
  close(fd);
}
