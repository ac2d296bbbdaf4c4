// Bad input on the tcp module's real socket: a raw client connects to a
// peer process's listening port and sends garbage, wrong keys, nothing,
// truncated and malformed frames. The peer drops and counts each one, never
// crashes, and keeps serving this process's well-behaved RSRs.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nexus/protocol.h"
#include "gp_forge.h"
#include "nxu_auth.h"
#include "runtime_guard.h"
#define NX_HARNESS_TCP
#include "peer_harness.h"

using namespace tcp_test;

namespace {

int raw_connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in in = {};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&in, sizeof(in)) < 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool send_all(int fd, const void *p, size_t n) {
  const char *c = static_cast<const char *>(p);
  while (n > 0) {
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

bool send_bytes(int fd, const std::vector<uint8_t> &v) {
  return send_all(fd, v.data(), v.size());
}

std::vector<uint8_t> key_bytes() {
  std::vector<uint8_t> k(16);
  const std::string &hex = key_hex();
  for (size_t i = 0; i < 16; i++)
    k[i] = (uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr, 16);
  return k;
}

// The client's hello (handshake version 2, docs/tcp.md): "NXT1", u16
// version, process uuid, nonce; a fresh identity and nonce each time.
std::vector<uint8_t> hello(uint16_t version = 2) {
  std::vector<uint8_t> h(4 + 2 + 16 + NXU_NONCE_SIZE);
  std::memcpy(h.data(), "NXT1", 4);
  h[4] = (uint8_t)version;
  h[5] = (uint8_t)(version >> 8);
  for (size_t i = 6; i < h.size(); i++)
    h[i] = (uint8_t)(std::rand() ^ (int)i);
  return h;
}

bool recv_exact(int fd, uint8_t *p, size_t n, int timeout_ms);

// After hello `h`: reads the server's challenge and sends a proof under
// `key` (nexus/util/nxu_auth.h).
bool prove(int fd, const std::vector<uint8_t> &h,
           const std::vector<uint8_t> &key) {
  uint8_t ch[6 + 16 + NXU_NONCE_SIZE + NXU_MAC_SIZE], ids[32],
      proof[NXU_MAC_SIZE];
  if (!recv_exact(fd, ch, sizeof(ch), 5000))
    return false;
  std::memcpy(ids, h.data() + 6, 16);
  std::memcpy(ids + 16, ch + 6, 16);
  return nxu_auth_mac(key.data(), 16, "client", h.data() + 22, ch + 22, ids,
                      sizeof(ids), proof) == 0 &&
         send_all(fd, proof, sizeof(proof));
}

// Waits for `n` bytes; false on timeout, EOF or error.
bool recv_exact(int fd, uint8_t *p, size_t n, int timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (n > 0) {
    uint64_t now = now_ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
      continue;
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    p += r;
    n -= (size_t)r;
  }
  return true;
}

// A raw client that passed the handshake, or -1; it says it is the
// process `uuid` when given, else a fresh one.
int handshaken(uint16_t port, const std::vector<uint8_t> *uuid = nullptr) {
  int fd = raw_connect(port);
  if (fd < 0)
    return -1;
  uint8_t answer[24];
  std::vector<uint8_t> h = hello();
  if (uuid != nullptr)
    std::copy(uuid->begin(), uuid->end(), h.begin() + 6);
  if (!send_bytes(fd, h) || !prove(fd, h, key_bytes()) ||
      !recv_exact(fd, answer, sizeof(answer), 5000) ||
      std::memcmp(answer, "NXT1", 4) != 0 || answer[6] != 0 || answer[7] != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the peer closes the connection (EOF or reset) within the time.
bool closed_within(int fd, int timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  char scratch[256];
  for (;;) {
    uint64_t now = now_ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
      continue;
    ssize_t r = recv(fd, scratch, sizeof(scratch), 0);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
      return true;
  }
}

// A frame header (docs/design.md): little-endian fields.
std::vector<uint8_t> frame_header(uint32_t handler, uint64_t context,
                                  uint64_t length,
                                  uint32_t magic = 0x3152584e) {
  std::vector<uint8_t> h(NX_FRAME_HDR_SIZE, 0);
  auto put = [&](size_t off, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
      h[off + i] = (uint8_t)(v >> (8 * i));
  };
  put(0, magic, 4);
  h[4] = NX_FRAME_VERSION;
  h[5] = 1; // NX_FORMAT_LITTLE
  put(8, handler, 4);
  put(16, context, 8);
  put(24, 0, 8);
  put(32, length, 8);
  return h;
}

// `n` whole frames of 3 bytes to a context nobody has: the peer drops and
// counts each one when it reads it (STAT_DROP_NO_CONTEXT).
std::vector<uint8_t> frames_for_nobody(int n) {
  std::vector<uint8_t> f =
      frame_header(nx_handler_id("echo"), 0x00c0ffee00000042ull, 3);
  f.insert(f.end(), {1, 2, 3});
  std::vector<uint8_t> many;
  for (int i = 0; i < n; i++)
    many.insert(many.end(), f.begin(), f.end());
  return many;
}

} // namespace

TEST_CASE_METHOD(session,
                 "bad input on the tcp socket is dropped and counted; the peer "
                 "keeps serving",
                 "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start({"NX_TCP_HANDSHAKE_MS=300"}) == "");
  REQUIRE(peer.port != 0);
  uint64_t tag = 1;
  REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, 100));
  uint64_t base[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, base));
  REQUIRE(base[STAT_DROP_BAD_FRAME] == 0);
  uint64_t bad = 0, no_context = 0;

  // After each attack: the counters show it, the peer still serves.
  auto check = [&](const char *what) {
    INFO("after: " << what);
    uint64_t s[STAT_COUNT] = {};
    uint64_t end = now_ms() + 10000;
    do {
      REQUIRE(peer_stats(peer.gp, cs.me, s));
      if (s[STAT_DROP_BAD_FRAME] - base[STAT_DROP_BAD_FRAME] >= bad &&
          s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] >= no_context)
        break;
      sleep_ms(20);
    } while (now_ms() < end);
    CHECK(s[STAT_DROP_BAD_FRAME] - base[STAT_DROP_BAD_FRAME] == bad);
    CHECK(s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] == no_context);
    CHECK(echo_round_trip(peer.gp, cs.me, tag++, 1000));
  };

  SECTION("every kind, one after another") {
    { // garbage instead of a hello
      int fd = raw_connect(peer.port);
      REQUIRE(fd >= 0);
      std::string junk(64, 'x');
      CHECK(send_all(fd, junk.data(), junk.size()));
      CHECK(closed_within(fd, 5000));
      close(fd);
      bad++;
      check("garbage");
    }
    { // a wrong key
      int fd = raw_connect(peer.port);
      REQUIRE(fd >= 0);
      std::vector<uint8_t> key = key_bytes(), h = hello();
      key[3] ^= 0x40;
      CHECK(send_bytes(fd, h));
      CHECK(prove(fd, h, key));
      CHECK(closed_within(fd, 5000));
      close(fd);
      bad++;
      check("wrong key");
    }
    { // a handshake version this module does not speak
      int fd = raw_connect(peer.port);
      REQUIRE(fd >= 0);
      CHECK(send_bytes(fd, hello(7)));
      CHECK(closed_within(fd, 5000));
      close(fd);
      bad++;
      check("wrong version");
    }
    { // no key at all: connect and say nothing
      int fd = raw_connect(peer.port);
      REQUIRE(fd >= 0);
      uint64_t t0 = now_ms();
      CHECK(closed_within(fd, 5000));
      CHECK(now_ms() - t0 >= 250); // the 300 ms handshake timeout, not sooner
      // ... and not much later: the deadline's timer wakes the peer.
      CHECK(now_ms() - t0 < 3000);
      close(fd);
      bad++;
      check("silence");
    }
    { // half a hello, then gone
      int fd = raw_connect(peer.port);
      REQUIRE(fd >= 0);
      std::vector<uint8_t> h = hello();
      CHECK(send_all(fd, h.data(), 10));
      sleep_ms(20);
      close(fd);
      bad++;
      check("half a hello");
    }
    { // a correct handshake, then a truncated frame, then close
      int fd = handshaken(peer.port);
      REQUIRE(fd >= 0);
      std::vector<uint8_t> f = frame_header(nx_handler_id("echo"), 12345, 100);
      f.resize(f.size() + 10, 0xab);
      CHECK(send_bytes(fd, f));
      sleep_ms(20);
      close(fd);
      bad++;
      check("truncated frame");
    }
    { // a frame announcing 2^60 bytes
      int fd = handshaken(peer.port);
      REQUIRE(fd >= 0);
      CHECK(send_bytes(
          fd, frame_header(nx_handler_id("echo"), 12345, (uint64_t)1 << 60)));
      CHECK(closed_within(fd, 5000));
      close(fd);
      bad++;
      check("2^60 bytes");
    }
    { // a frame header with a bad magic
      int fd = handshaken(peer.port);
      REQUIRE(fd >= 0);
      CHECK(send_bytes(
          fd, frame_header(nx_handler_id("echo"), 12345, 0, 0xdeadbeef)));
      CHECK(closed_within(fd, 5000));
      close(fd);
      bad++;
      check("bad frame magic");
    }
    { // frames for a context nobody has: dropped, the connection stays
      int fd = handshaken(peer.port);
      REQUIRE(fd >= 0);
      uint64_t nowhere = 0x00c0ffee00000042ull;
      std::vector<uint8_t> f = frame_header(nx_handler_id("echo"), nowhere, 3);
      f.insert(f.end(), {1, 2, 3});
      CHECK(send_bytes(fd, f));
      CHECK(send_bytes(fd, f));
      no_context += 2;
      check("frames for an unknown context");
      CHECK_FALSE(closed_within(fd, 200));
      // And the connection still carries frames.
      CHECK(send_bytes(fd, f));
      no_context++;
      check("a third one");
      // A thousand in one write: more than one progress call delivers; the
      // rest waits in the module, none is lost.
      std::vector<uint8_t> many;
      for (int i = 0; i < 1000; i++)
        many.insert(many.end(), f.begin(), f.end());
      CHECK(send_bytes(fd, many));
      no_context += 1000;
      check("a thousand at once");
      close(fd);
    }
  }
  uint64_t s[STAT_COUNT];
  uint64_t end = now_ms() + 5000;
  do // every raw connection is closed on the peer's side too
    REQUIRE(peer_stats(peer.gp, cs.me, s));
  while (s[STAT_SOCKETS] != 1 && now_ms() < end && (sleep_ms(20), true));
  CHECK(s[STAT_SOCKETS] == 1);
  CHECK(s[STAT_DROP_BAD_FRAME] - base[STAT_DROP_BAD_FRAME] == 8);
  CHECK(s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] == 1003);
  CHECK(peer.quit() == 0);
}

TEST_CASE_METHOD(session,
                 "a connection reset right after its last frames: read to "
                 "its end when a FIN came first, dropped when not",
                 "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  REQUIRE(peer.port != 0);
  uint64_t base[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, base));
  // A process that ends says it is done (FIN, tcp's finalize) and then,
  // holding bytes of its peer's unread, resets its connections (SO_LINGER
  // of 0 resets at once). The frames it sent lie in the peer's socket
  // ahead of the FIN and the reset; the peer's driver, held in a handler
  // meanwhile ("stall"), finds them all at once. A reset without a FIN is
  // a broken connection: its tail is dropped (docs/tcp.md, "Failure").
  // Frames for a context nobody has are counted when read: the count
  // shows how many were.
  bool fin = false;
  SECTION("FIN, then the reset: every frame is read") { fin = true; }
  SECTION("the reset alone: the tail is dropped") { fin = false; }
  const int conns = 8, frames = 100;
  int fds[conns];
  for (int &fd : fds) {
    fd = handshaken(peer.port);
    REQUIRE(fd >= 0);
  }
  std::vector<uint8_t> many = frames_for_nobody(frames);
  long stalls = the_client.stalled.get();
  REQUIRE(send_stall(peer.gp, cs.me, 300) == 0);
  REQUIRE(the_client.stalled.wait_for(stalls + 1, 10) == stalls + 1);
  for (int fd : fds) {
    struct linger reset = {1, 0};
    CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)) == 0);
    CHECK(send_bytes(fd, many));
    if (fin)
      CHECK(shutdown(fd, SHUT_WR) == 0);
    close(fd); // a reset
  }
  uint64_t want = fin ? (uint64_t)conns * (uint64_t)frames : 0;
  uint64_t s[STAT_COUNT] = {};
  uint64_t end = now_ms() + 10000;
  do {
    REQUIRE(peer_stats(peer.gp, cs.me, s));
    if (s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] >= want &&
        s[STAT_SOCKETS] == base[STAT_SOCKETS])
      break;
    sleep_ms(20);
  } while (now_ms() < end);
  // Frames read in the round that closed the last socket may run after
  // the answer above: one more round trip, then they are counted.
  CHECK(echo_round_trip(peer.gp, cs.me, 1, 100));
  REQUIRE(peer_stats(peer.gp, cs.me, s));
  CHECK(s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] == want);
  // Whole frames, then the reset: nothing was cut short.
  CHECK(s[STAT_DROP_BAD_FRAME] == base[STAT_DROP_BAD_FRAME]);
  CHECK(s[STAT_SOCKETS] == base[STAT_SOCKETS]); // each one closed
  CHECK(echo_round_trip(peer.gp, cs.me, 1, 100));
  CHECK(peer.quit() == 0);
}

TEST_CASE_METHOD(session,
                 "a send that finds the connection reset after the peer's "
                 "FIN: what the peer sent first is read before it is dropped",
                 "[tcp]") {
  peer_process peer;
  REQUIRE(peer.start() == "");
  REQUIRE(peer.port != 0);
  // The raw client says it is process `uuid`; a forged gp names a context
  // there, reachable over tcp only, so that the peer's sends to it take
  // this very connection.
  std::vector<uint8_t> uuid(16);
  for (size_t i = 0; i < uuid.size(); i++)
    uuid[i] = (uint8_t)(0xf0 ^ i);
  gp_forge forge;
  REQUIRE(forge.init(cs.me));
  nx_gp_t there = NX_GP_NULL;
  REQUIRE(forge.make(forge.scope, desc(uuid, {v4(127, 0, 0, 1, 9)}), &there) ==
          0);
  int fd = handshaken(peer.port, &uuid);
  REQUIRE(fd >= 0);
  REQUIRE(introduce(peer.gp, there) == 0);
  nx_gp_release(&there);
  uint64_t base[STAT_COUNT];
  REQUIRE(peer_stats(peer.gp, cs.me, base)); // "introduce" ran before it
  // The peer's main thread sends one "seq" there 150 ms from now, while
  // its driver is held in "stall" (400 ms). Before that, the client sends
  // frames, its FIN, and resets: the send finds the reset (EPIPE) first,
  // before the driver has read anything. Frames for a context nobody has
  // are counted when read.
  const int frames = 100;
  REQUIRE(blast(peer.gp, 1, realtime_ns() + 150000000ull) == 0);
  long stalls = the_client.stalled.get();
  REQUIRE(send_stall(peer.gp, cs.me, 400) == 0);
  REQUIRE(the_client.stalled.wait_for(stalls + 1, 10) == stalls + 1);
  std::vector<uint8_t> many = frames_for_nobody(frames);
  struct linger reset = {1, 0};
  CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)) == 0);
  CHECK(send_bytes(fd, many));
  CHECK(shutdown(fd, SHUT_WR) == 0);
  close(fd);
  uint64_t s[STAT_COUNT] = {};
  uint64_t end = now_ms() + 10000;
  do {
    REQUIRE(peer_stats(peer.gp, cs.me, s));
    if (s[STAT_SOCKETS] + 1 == base[STAT_SOCKETS])
      break;
    sleep_ms(20);
  } while (now_ms() < end);
  CHECK(s[STAT_SOCKETS] + 1 == base[STAT_SOCKETS]); // the client's closed
  CHECK(echo_round_trip(peer.gp, cs.me, 1, 100));
  REQUIRE(peer_stats(peer.gp, cs.me, s));
  CHECK(s[STAT_DROP_NO_CONTEXT] - base[STAT_DROP_NO_CONTEXT] == frames);
  CHECK(s[STAT_DROP_BAD_FRAME] == base[STAT_DROP_BAD_FRAME]);
  CHECK(peer.quit() == 0);
}
