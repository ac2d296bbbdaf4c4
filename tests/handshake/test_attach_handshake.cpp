// Attach's handshake, NXA2 (nexus/src/processes/attach.c): against this
// process's own listener, a raw client shows that both sides prove the key over
// fresh nonces and the key never crosses the wire; a recorded proof replayed, a
// wrong key and the old NXA1 exchange (which sent the key) are refused and
// counted; nx_attach with a URL of another key refuses the listener. The
// listener serves its connections at once: one that stalls holds nobody up
// and is dropped after its step's 5 s. A process forked from the listener
// leaves the port to it.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/wait.h>
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

// This process's listener: its URL, port and key.
struct here {
  const char *url = nullptr;
  unsigned port = 0;
  std::vector<uint8_t> key;
  here() {
    REQUIRE(nx_attach_listen(&url) == 0);
    REQUIRE(std::sscanf(url, "nexus://127.0.0.1:%u/", &port) == 1);
    std::string hex = std::strrchr(url, '/') + 1;
    REQUIRE(hex.size() == 32);
    for (size_t i = 0; i < 16; i++)
      key.push_back((uint8_t)std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  }
};

void pause_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
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
  here l;
  const char *url = l.url;
  unsigned port = l.port;
  const std::vector<uint8_t> &key = l.key;
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

// The listener serves every connection at once, each step of each within
// 5 s of the step's start (IO_TIMEOUT_MS in attach.c): an attacher that
// stalls two bytes into its hello holds up neither a well-behaved
// nx_attach nor one that sends its messages in pieces, and it is dropped
// once its step's 5 s are over. nx_finalize closes a connection under way.
TEST_CASE("attach listener: a stalled attacher holds nobody up and is dropped "
          "after its step's 5 s",
          "[attach][handshake]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  here l;

  int stalled = raw::connect_lo((uint16_t)l.port);
  REQUIRE(stalled >= 0);
  uint64_t t0 = raw::ms();
  REQUIRE(raw::send_all(stalled, "NX", 2)); // then nothing

  // A well-behaved attacher meanwhile: served at once.
  nx_gp_t gp = NX_GP_NULL;
  uint64_t t1 = raw::ms();
  CHECK(nx_attach(l.url, &gp) == 0);
  CHECK(raw::ms() - t1 < 2000);
  CHECK_FALSE(nx_gp_is_null(&gp));
  nx_gp_release(&gp);

  // One whose hello and proof come in pieces: each read resumes where the
  // last one stopped, and it gets the listener's answer.
  int slow = raw::connect_lo((uint16_t)l.port);
  REQUIRE(slow >= 0);
  std::vector<uint8_t> h = hello();
  REQUIRE(raw::send_all(slow, h.data(), 3));
  pause_ms(50);
  REQUIRE(raw::send_all(slow, h.data() + 3, 5));
  pause_ms(50);
  REQUIRE(raw::send_all(slow, h.data() + 8, h.size() - 8));
  std::vector<uint8_t> ch(CHALLENGE);
  REQUIRE(raw::recv_exact(slow, ch.data(), CHALLENGE));
  CHECK(std::memcmp(ch.data(), "NXA2", 4) == 0);
  std::vector<uint8_t> proof(NXU_MAC_SIZE);
  REQUIRE(nxu_auth_mac(l.key.data(), l.key.size(), "client", h.data() + 4,
                       ch.data() + 4, CTX, sizeof(CTX), proof.data()) == 0);
  REQUIRE(raw::send_all(slow, proof.data(), 1));
  pause_ms(50);
  REQUIRE(raw::send_all(slow, proof.data() + 1, proof.size() - 1));
  uint8_t head[8];
  REQUIRE(raw::recv_exact(slow, head, sizeof(head)));
  CHECK(std::memcmp(head, "NXA2", 4) == 0);
  uint32_t len = (uint32_t)head[4] | (uint32_t)head[5] << 8 |
                 (uint32_t)head[6] << 16 | (uint32_t)head[7] << 24;
  REQUIRE(len > 0);
  REQUIRE(len < 65536);
  std::vector<uint8_t> entry(len);
  CHECK(raw::recv_exact(slow, entry.data(), len));
  CHECK(raw::closed_within(slow, 2000)); // the answer is out: it closes
  close(slow);
  CHECK(raw::ms() - t0 < 4000); // all this while the stalled one waited

  // The stalled one is dropped once its step's 5 s are over, not before.
  CHECK(raw::closed_within(stalled, 9000));
  uint64_t took = raw::ms() - t0;
  CHECK(took >= 4500);
  CHECK(took < 7500);
  close(stalled);

  // A connection under way when nx_finalize comes is closed by it.
  int open = raw::connect_lo((uint16_t)l.port);
  REQUIRE(open >= 0);
  REQUIRE(raw::send_all(open, "NXA2", 4));
  CHECK_FALSE(raw::closed_within(open, 200));
  CHECK(rt.finalize() == 0);
  CHECK(raw::closed_within(open, 2000));
  close(open);
}

// A process forked from a listener forgets the listener, whose loop is its
// parent's, and closes its copy of the listening socket: the port stops
// listening with the parent's nx_finalize while the child lives on. The
// child listens anew if it asks (not under ThreadSanitizer, which ends a
// process that starts a thread after a fork of a threaded one).
TEST_CASE("attach listener: a process forked from a listener leaves the port "
          "to it",
          "[attach][handshake]") {
#if defined(__SANITIZE_THREAD__)
  const bool relisten = false;
#else
  const bool relisten = true;
#endif
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  here l;
  const std::string url = l.url; // the child's nx_attach_listen rewrites it
  int told[2], hold[2];
  REQUIRE(pipe(told) == 0);
  REQUIRE(pipe(hold) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(20);
    close(told[0]);
    close(hold[1]);
    char ok = 1;
    if (relisten) {
      const char *mine = nullptr;
      ok = nx_attach_listen(&mine) == 0 && url != mine;
    }
    (void)!write(told[1], &ok, 1);
    char c;
    (void)!read(hold[0], &c, 1); // until the parent closes its end
    _exit(ok ? 0 : 10);
  }
  close(told[1]);
  close(hold[0]);
  char ok = 0;
  REQUIRE(read(told[0], &ok, 1) == 1);
  CHECK(ok == 1);
  close(told[0]);

  // The parent serves as before; once it finalized, nothing listens.
  nx_gp_t gp = NX_GP_NULL;
  CHECK(nx_attach(url.c_str(), &gp) == 0);
  nx_gp_release(&gp);
  CHECK(rt.finalize() == 0);
  int fd = raw::connect_lo((uint16_t)l.port);
  CHECK(fd < 0);
  if (fd >= 0)
    close(fd);

  close(hold[1]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
