// Tests of the ofi module (protocols/ofi) with a second process, a process
// context started by nx_context_create: which protocol carries the RSRs,
// round trips from 0 B to 64 MiB with contents checked, and a peer killed
// with SIGKILL. Run once per provider (FI_PROVIDER, set by meson).
#include <catch2/catch.hpp>

#include <algorithm>
#include <csignal>
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>
#include <ctime>
#include <string>

#define NX_HARNESS_OFI
#include "peer_harness.h"
#include "runtime_guard.h"

using namespace ofi_test;

TEST_CASE_METHOD(session, "a process context is reached over ofi, both ways",
                 "[ofi]") {
  OFI_SKIP_UNLESS_LOADED();
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    const char *proto = nx_gp_protocol(&peer.gp);
    REQUIRE(proto != nullptr);
    CHECK(std::string(proto) == "ofi");
    char info[128];
    REQUIRE(nx_gp_protocol_info(&peer.gp, info, sizeof(info)) == 0);
    INFO("protocol info: " << info);
    CHECK(std::string(info).rfind(expected_provider() + " ", 0) == 0);
    REQUIRE(peer_hello(peer.gp, cs.me));
    std::lock_guard<std::mutex> g(the_client.m);
    CHECK(the_client.proto == "ofi");
    CHECK(the_client.info.rfind(expected_provider() + " ", 0) == 0);
    CHECK(the_client.pid != 0);
  }
  CHECK(no_children());
}

TEST_CASE_METHOD(session,
                 "RSR ping-pong over ofi, 0 B to 64 MiB, contents checked",
                 "[ofi]") {
  OFI_SKIP_UNLESS_LOADED();
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    REQUIRE(std::string(nx_gp_protocol(&peer.gp)) == "ofi");
    const size_t sizes[] = {0,        8,       1024,     8192,    8193,
                            64 << 10, 1 << 20, 16 << 20, 64 << 20};
    uint64_t tag = 1;
    for (size_t n : sizes) {
      INFO("payload of " << n << " bytes");
      int reps = n <= (64u << 10) ? 10 : n <= (1u << 20) ? 3 : 1;
      for (int i = 0; i < reps; i++)
        REQUIRE(echo_round_trip(peer.gp, cs.me, tag++, n, 30));
    }
    CHECK(the_client.echo_bad == 0);
    uint64_t rep[REPORT_COUNT];
    REQUIRE(peer_stats(peer.gp, cs.me, rep));
    CHECK(rep[REPORT_BAD_BYTES] == 0);
    CHECK(rep[REPORT_DROP_BAD_FRAME] == 0);
    nx_stats_t mine;
    REQUIRE(nx_stats_get(&mine) == 0);
    CHECK(mine.drop_bad_frame == 0);
    CHECK(mine.rsr_failed == 0);
  }
  CHECK(no_children());
}

namespace {

// CPU time this process used so far, all threads.
double cpu_seconds() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Files in /dev/shm of process `pid`: the ofi module's page
// ("nx-ofi-<ns>-<pid>-<uuid>") when prefix is "nx-ofi-", else shm's
// regions ("<pid>:<n>:<n>").
int shm_files_of(pid_t pid, const char *prefix) {
  int n = 0;
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  std::string mid = "-" + std::to_string(pid) + "-";
  while (d != nullptr && (e = readdir(d)) != nullptr) {
    std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && name.find(mid) != std::string::npos)
      n++;
  }
  if (d != nullptr)
    closedir(d);
  return n;
}

void remove_shm_regions(pid_t pid) {
  DIR *d = opendir("/dev/shm");
  struct dirent *e;
  std::string start = std::to_string(pid) + ":";
  std::vector<std::string> doomed;
  while (d != nullptr && (e = readdir(d)) != nullptr)
    if (std::string(e->d_name).rfind(start, 0) == 0)
      doomed.push_back(std::string("/dev/shm/") + e->d_name);
  if (d != nullptr)
    closedir(d);
  for (const std::string &f : doomed)
    unlink(f.c_str());
}

struct deaths {
  latch n;
  std::atomic<uint64_t> ctx{0};
};
void on_death(int err, uint64_t ctx, uint32_t handler, void *arg) {
  auto *d = static_cast<deaths *>(arg);
  if (err == NX_EPEERDEAD && handler == 0) {
    d->ctx = ctx;
    d->n.add();
  }
}
} // namespace

TEST_CASE_METHOD(session,
                 "a peer killed with SIGKILL: nothing hangs, later sends fail",
                 "[ofi]") {
  OFI_SKIP_UNLESS_LOADED();
  deaths d;
  REQUIRE(nx_error_cb_set(on_death, &d) == 0);
  pid_t pid = 0;
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    REQUIRE(peer_hello(peer.gp, cs.me));
    {
      std::lock_guard<std::mutex> g(the_client.m);
      pid = (pid_t)the_client.pid;
    }
    REQUIRE(pid > 0);
    // Frames in flight when it dies: small ones and large ones.
    for (int i = 0; i < 8; i++)
      CHECK(send_echo(peer.gp, cs.me, 1000 + i, i % 2 ? 1 << 20 : 100) == 0);
    REQUIRE(kill(pid, SIGKILL) == 0);
    REQUIRE(d.n.wait_for(1, 15) == 1);
    CHECK((d.ctx >> 32) == (nx_gp_context(&peer.gp) >> 32));
    // Every later send fails at once, small or large.
    for (size_t n : {(size_t)0, (size_t)100000}) {
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &peer.gp, "echo", n) == 0);
      std::vector<uint8_t> data(n);
      REQUIRE(nx_put_bytes(b, data.data(), n) == 0);
      CHECK(nx_rsr_send(b) == NX_EPEERDEAD);
    }
    CHECK(nx_gp_protocol(&peer.gp) == nullptr);
  }
  CHECK(no_children());
  REQUIRE(nx_error_cb_set(nullptr, nullptr) == 0);
  // nx_finalize must not hang on frames the dead peer never took.
  uint64_t start = (uint64_t)time(nullptr);
  CHECK(rt.finalize() == 0);
  CHECK((uint64_t)time(nullptr) - start <= 5);
  // The killed process could not remove its files in /dev/shm: the ofi
  // module's wake-up page goes at the next nx_init on this host, shm's
  // region (libfabric's own) we remove here.
  {
    runtime_guard again;
    REQUIRE(again.init_rc() == 0);
    CHECK(shm_files_of(pid, "nx-ofi-") == 0);
  }
  remove_shm_regions(pid);
}

TEST_CASE_METHOD(session,
                 "idle processes are woken by an RSR at once, not by a timer",
                 "[ofi]") {
  OFI_SKIP_UNLESS_LOADED();
  {
    peer_context peer;
    REQUIRE(peer.start() == 0);
    REQUIRE(echo_round_trip(peer.gp, cs.me, 1, 8));
    // Both sides idle long enough for their progress engines to sleep in
    // epoll (after 1 ms); each round trip then needs two wake-ups. The
    // engines also wake every 100 ms on their own: a round trip that
    // waited for that would take tens of milliseconds.
    std::vector<double> ms;
    for (int i = 0; i < 15; i++) {
      struct timespec pause = {0, 20 * 1000 * 1000};
      nanosleep(&pause, nullptr);
      struct timespec a, b;
      clock_gettime(CLOCK_MONOTONIC, &a);
      REQUIRE(echo_round_trip(peer.gp, cs.me, 100 + i, 8));
      clock_gettime(CLOCK_MONOTONIC, &b);
      ms.push_back((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    INFO("round trips after idling, ms: min " << ms.front() << ", median "
                                              << ms[ms.size() / 2] << ", max "
                                              << ms.back());
    CHECK(ms[ms.size() / 2] < 10.0);
    // And idle means asleep: the wait fd is quiet once the work is done
    // (tcp;ofi_rxm's fd stays readable unless fi_trywait resets it).
    double before = cpu_seconds();
    struct timespec second = {1, 0};
    nanosleep(&second, nullptr);
    CHECK(cpu_seconds() - before < 0.3);
  }
  CHECK(no_children());
}
