// The protocol conformance suite: the same tests for every protocol module
// that was built (meson runs this program once per module, naming it in
// NX_CONFORMANCE_MODULE). A module that reaches other processes is tested
// against a real peer process; "local" against an in-process context.
// Malformed frames come from a rogue peer (conf_rogue.c) that loads the
// module under test itself. A case that cannot run for a module ends the
// program with 77, which meson reports as a skip: such cases ([own-test])
// are last in the file and meson runs each as a test of its own.
// For the listener that ends the MPI job (job_end).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <poll.h>
#include <sys/wait.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <initializer_list>
#include <vector>

#include "latch.h"
#include "nexus.h"

#include "child_pid.h"
#include "conf_handlers.h"

namespace {

// One step of splitmix64: the next 64-bit word of a seeded stream.
uint64_t splitmix64(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills p[0..n) with the next n bytes of that stream, eight a step: the
// payloads below, up to 64 MiB, are made a word at a time rather than with
// one std::mt19937 call per byte, which at -O0 took most of the suite's
// time (more under ThreadSanitizer). `state` carries the stream from one
// payload to the next.
void fill_random(uint8_t *p, size_t n, uint64_t &state) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t z = splitmix64(state);
    std::memcpy(p + i, &z, 8);
  }
  if (i < n) {
    uint64_t z = splitmix64(state);
    std::memcpy(p + i, &z, n - i);
  }
}

std::string module_under_test() {
  const char *m = std::getenv("NX_CONFORMANCE_MODULE");
  return m != nullptr ? m : "local";
}

bool in_process() { return module_under_test() == "local"; }

// Ends the program as meson's skip (77), with the reason: for a case that
// cannot run for this module ([own-test] cases), or for every case when
// the module cannot reach its backend on this machine (see session).
[[noreturn]] void skip_test(const std::string &why) {
  std::printf("SKIP for %s: %s\n", module_under_test().c_str(), why.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

// After nx_init: the module under test is loaded, or this machine cannot
// run it (its init failed: no device, no provider, no daemon), which skips
// the run with the module's own reason. A module that is missing or that
// the loader refused (ABI, mandatory slots) is a failure, not a skip.
void require_module_loaded(const std::string &m) {
  for (int i = 0; i < nx_module_count(); i++) {
    nx_module_info_t info;
    if (nx_module_info(i, &info) != 0 || m != info.name)
      continue;
    if (info.loaded)
      return;
    INFO("module " << m << ": " << info.reason);
    REQUIRE(info.path[0] != '\0');
    REQUIRE(info.error != NX_EMODULE);
    REQUIRE(info.error != NX_EABI);
    skip_test(std::string("the module does not initialise here: ") +
              info.reason);
  }
  FAIL("module " << m << " is not known to the loader");
}

// What the suite's own context receives.
struct inbox {
  nx_mutex_t m;
  nx_cond_t c;
  long pongs = 0;
  uint32_t last_tag = 0, last_bad = 0;
  std::vector<uint8_t> last_bytes;
  long typed = 0;
  int typed_bad = -1;
  nx_gp_t third = NX_GP_NULL;
  // nx_buffer_source of the last "pong" and of "third_is", and what the
  // peer's "third" handler said: the sender it saw and its own context.
  uint64_t pong_source = 0, third_source = 0, peer_saw = 0, peer_self = 0;
  long counts_in = 0;
  uint64_t counts[4] = {0, 0, 0, 0};
  std::atomic<int> deaths{0};
  // From the rogue peer: good frames (and ones whose payload was not what
  // it sent), frames whose length lied, and the drops reported to the
  // error callback.
  long hits = 0, hits_bad = 0, lies = 0;
  long cb_no_handler = 0, cb_no_context = 0;
  uint64_t cb_context = 0;
  uint32_t cb_handler = 0;
  long rogue_done = 0;
  std::string rogue_said;
  long placed_lost = 0;          // "pong"s lost after they were placed
  int last_placement = 0;        // nx_buffer_placement of the last "pong"
  bool last_placed_same = false; // its bytes read from the placed memory
  inbox() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
  // Forgets what earlier cases received (in job mode, one inbox serves all).
  void reset() {
    nx_mutex_lock(&m);
    pongs = typed = counts_in = hits = hits_bad = lies = 0;
    cb_no_handler = cb_no_context = rogue_done = 0;
    last_tag = 0;
    last_placement = 0;
    placed_lost = 0;
    last_placed_same = false;
    pong_source = third_source = peer_saw = peer_self = 0;
    typed_bad = -1;
    last_bytes.clear();
    nx_gp_release(&third);
    std::memset(counts, 0, sizeof(counts));
    deaths = 0;
    nx_mutex_unlock(&m);
  }
  template <class Pred> bool wait(Pred pred, int seconds = 60) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    nx_mutex_lock(&m);
    bool ok = true;
    while (!pred())
      if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT) {
        ok = pred();
        break;
      }
    nx_mutex_unlock(&m);
    return ok;
  }
};

inbox *box;

// Receive placement: where "pong"'s trailing bytes go when the case below
// installs place_pong. `mode` says what the callback answers.
// PLACE_HOLD places, but first waits until the case lets it go (the
// death case below, which kills the sender meanwhile).
enum place_mode {
  PLACE_HERE,
  PLACE_DECLINE,
  PLACE_SHORT,
  PLACE_FAIL,
  PLACE_HOLD
};
struct place_box {
  std::vector<uint8_t> mem;
  place_mode mode = PLACE_HERE;
  std::atomic<long> asked{0}, bad{0};
  std::atomic<int> holding{0}, release{0};
} pbox;

int place_pong(nx_context_t *, void *, nx_buffer_t *lead, size_t tail,
               nx_place_t *where) {
  pbox.asked++;
  uint32_t tag = 0;
  uint64_t len = 0;
  const void *p = nullptr;
  // The lead reads as the values before the tail; the tail is not in it.
  if (nx_get_uint32(lead, &tag) != 0 || nx_get_uint64(lead, &len) != 0 ||
      len != tail || nx_get_bytes_ptr(lead, &p, len) != NX_ERANGE)
    pbox.bad++;
  switch (pbox.mode) {
  case PLACE_HOLD:
    // Blocks the receiving thread, which a real callback must not do:
    // here it holds the frame half-read while its sender is killed.
    pbox.holding = 1;
    for (int ms = 0; ms < 30000 && !pbox.release.load(); ms++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    [[fallthrough]];
  case PLACE_HERE:
    where->addr = pbox.mem.data();
    where->len = pbox.mem.size();
    return 1;
  case PLACE_SHORT: // one byte too few: refused, nothing written
    where->addr = pbox.mem.data();
    where->len = tail - 1;
    return 1;
  case PLACE_FAIL: return NX_ENOTSUP;
  case PLACE_DECLINE: break;
  }
  return 0;
}

void on_pong(nx_context_t *, void *, nx_buffer_t *b) {
  uint32_t tag = 0;
  uint64_t len = 0;
  std::vector<uint8_t> bytes;
  bool same = false;
  if (nx_get_uint32(b, &tag) == 0 && nx_get_uint64(b, &len) == 0) {
    bytes.resize(len);
    const void *at = nullptr;
    if (nx_buffer_placement(b) == 1) {
      // Read in place: the placed memory itself.
      if (nx_get_bytes_ptr(b, &at, len) == 0) {
        same = at == pbox.mem.data();
        std::memcpy(bytes.data(), at, len);
      } else {
        bytes.clear();
      }
    } else if (nx_get_bytes(b, bytes.data(), len) != 0) {
      bytes.clear();
    }
  }
  nx_mutex_lock(&box->m);
  box->last_placement = nx_buffer_placement(b);
  box->last_placed_same = same;
  box->last_tag = tag;
  box->last_bytes.swap(bytes);
  box->pong_source = nx_buffer_source(b);
  box->pongs++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

// "zpong": tag, len, bad, then A read in place and B copied (both paths).
void on_zpong(nx_context_t *, void *, nx_buffer_t *b) {
  uint32_t tag = 0, bad = 0;
  uint64_t len = 0;
  std::vector<uint8_t> bytes;
  const void *a = nullptr;
  if (nx_get_uint32(b, &tag) == 0 && nx_get_uint64(b, &len) == 0 &&
      nx_get_uint32(b, &bad) == 0 && bad == 0) {
    bytes.resize(len);
    if (nx_get_bytes_ptr(b, &a, len / 2) != 0 ||
        nx_get_bytes(b, bytes.data() + len / 2, len - len / 2) != 0)
      bytes.clear();
    else if (len / 2 != 0)
      std::memcpy(bytes.data(), a, len / 2);
  }
  nx_mutex_lock(&box->m);
  box->last_tag = tag;
  box->last_bad = bad;
  box->last_bytes.swap(bytes);
  box->pongs++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_typed(nx_context_t *, void *, nx_buffer_t *b) {
  int32_t bad = -1;
  nx_get_int32(b, &bad);
  nx_mutex_lock(&box->m);
  box->typed_bad = bad;
  box->typed++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_third_is(nx_context_t *, void *, nx_buffer_t *b) {
  nx_gp_t g = NX_GP_NULL;
  uint64_t saw = 0, self = 0;
  nx_get_gp(b, &g);
  nx_get_uint64(b, &saw);
  nx_get_uint64(b, &self);
  nx_mutex_lock(&box->m);
  box->third = g;
  box->third_source = nx_buffer_source(b);
  box->peer_saw = saw;
  box->peer_self = self;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_counts(nx_context_t *, void *, nx_buffer_t *b) {
  uint64_t v[4] = {0, 0, 0, 0};
  nx_get_uint64_array(b, v, 4);
  nx_mutex_lock(&box->m);
  std::memcpy(box->counts, v, sizeof(v));
  box->counts_in++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

// The rogue's good frames carry 64 bytes 0xa0, 0xa1, ... 0xaf, 0xa0, ...
void on_rogue_hit(nx_context_t *, void *, nx_buffer_t *b) {
  const void *data = nullptr;
  size_t len = 0;
  bool ok = nx_buffer_bytes(b, &data, &len) == 0 && len == 64;
  for (size_t i = 0; ok && i < len; i++)
    ok = static_cast<const uint8_t *>(data)[i] == (uint8_t)(0xa0 + i % 16);
  nx_mutex_lock(&box->m);
  box->hits++;
  if (!ok)
    box->hits_bad++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_rogue_lie(nx_context_t *, void *, nx_buffer_t *) {
  nx_mutex_lock(&box->m);
  box->lies++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

// The rogue rank's report at the end of a case (job mode): its result line.
void on_rogue_done(nx_context_t *, void *, nx_buffer_t *b) {
  const void *data = nullptr;
  size_t len = 0;
  std::string said;
  if (nx_buffer_bytes(b, &data, &len) == 0)
    said.assign(static_cast<const char *>(data), len);
  nx_mutex_lock(&box->m);
  box->rogue_said = said;
  box->rogue_done++;
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

void on_error(int err, uint64_t context, uint32_t handler, void *) {
  nx_mutex_lock(&box->m);
  if (err == NX_EPEERDEAD && handler == 0)
    box->deaths++;
  if (err == NX_EPEERDEAD && handler == nx_handler_id("pong")) {
    box->placed_lost++;
    box->cb_context = context;
  }
  if (err == NX_ENOHANDLER || err == NX_ENOCONTEXT) {
    (err == NX_ENOHANDLER ? box->cb_no_handler : box->cb_no_context)++;
    box->cb_context = context;
    box->cb_handler = handler;
  }
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

int local_peer_init(nx_context_t *ctx, void *) { return conf_register(ctx); }

// One runtime and one peer per test case.
// The key of every session, so that the rogue peer can present it (a
// process context inherits its creator's key anyway).
const char *const session_key = "00112233445566778899aabbccddeeff";

// The job of a module whose peers are ranks of one MPI job (mpi): the
// suite runs as rank 0 under mpirun, beside conf_peer --job as rank 1 (and
// conf_rogue --job as rank 2 for the bad frames). MPI starts once per
// process, so the runtime stays up across cases and ends when the run
// does (job_end below).
struct job {
  bool up = false;
  nx_gp_t *gps = nullptr;
  int count = 0;
  inbox in; // handlers may run between cases: it outlives them all
};
job the_job;

bool job_mode() { return module_under_test() == "mpi"; }

// One runtime and one peer per test case (in job mode: the job's runtime
// and rank 1).
struct session {
  std::unique_ptr<inbox> own;
  inbox &in;
  nx_gp_t me = NX_GP_NULL;
  nx_gp_t peer = NX_GP_NULL;
  session()
      : own(job_mode() ? nullptr : new inbox), in(own ? *own : the_job.in) {
    std::string m = module_under_test();
    if (job_mode()) {
      in.reset();
      box = &in;
      if (!the_job.up) {
        setenv("NX_PROTOCOLS", (m + ",local").c_str(), 1);
        setenv("NX_KEY", session_key, 1);
        REQUIRE(nx_init(nullptr, nullptr) == 0);
        the_job.up = true;
        int rank = -1;
        REQUIRE(nx_context_peers(&the_job.gps, &the_job.count, &rank) == 0);
        REQUIRE(rank == 0);
        REQUIRE(the_job.count >= 2);
      }
    } else {
      box = &in;
      setenv("NX_PROTOCOLS", in_process() ? "local" : (m + ",local").c_str(),
             1);
      setenv("NX_KEY", session_key, 1);
      REQUIRE(nx_init(nullptr, nullptr) == 0);
    }
    require_module_loaded(m);
    nx_context_t *self = nx_context_self();
    REQUIRE(nx_handler_register(self, "pong", on_pong, NX_HANDLER_NONTHREADED,
                                nullptr) == 0);
    REQUIRE(nx_handler_register(self, "zpong", on_zpong, NX_HANDLER_NONTHREADED,
                                nullptr) == 0);
    REQUIRE(nx_handler_register(self, "typed", on_typed, NX_HANDLER_NONTHREADED,
                                nullptr) == 0);
    REQUIRE(nx_handler_register(self, "third_is", on_third_is,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "counts", on_counts,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "rogue_hit", on_rogue_hit,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "rogue_lie", on_rogue_lie,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_handler_register(self, "rogue_done", on_rogue_done,
                                NX_HANDLER_NONTHREADED, nullptr) == 0);
    REQUIRE(nx_error_cb_set(on_error, nullptr) == 0);
    REQUIRE(nx_gp_make(nullptr, &me) == 0);
    if (job_mode()) {
      REQUIRE(nx_gp_copy(&the_job.gps[1], &peer) == 0);
    } else if (in_process()) {
      REQUIRE(nx_context_create_local(local_peer_init, nullptr, &peer) == 0);
    } else {
      nx_node_t node;
      REQUIRE(nx_nodes_acquire("localhost", 1, &node) == 0);
      REQUIRE(nx_context_create(&node, PEER_EXE, nullptr, &peer) == 0);
    }
    const char *p = nx_gp_protocol(&peer);
    REQUIRE(p != nullptr);
    REQUIRE(std::string(p) == m);
  }
  ~session() {
    if (!in_process() && !job_mode())
      nx_context_destroy(&peer);
    nx_gp_release(&peer);
    nx_gp_release(&me);
    if (job_mode())
      return;
    nx_gp_release(&in.third);
    nx_finalize();
    unsetenv("NX_PROTOCOLS");
    unsetenv("NX_KEY");
    box = nullptr;
  }
};

// Ends the job when the run ends: the other ranks are told to quit (each
// finalizes on its own), then this one finalizes too.
struct job_end : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testRunEnded(Catch::TestRunStats const &) override {
    if (!the_job.up)
      return;
    for (int i = 1; i < the_job.count; i++) {
      nx_buffer_t *b;
      if (nx_rsr_init_name(&b, &the_job.gps[i], "conf_quit", 8) == 0)
        nx_rsr_send(b); // a rank already gone (a dropped rogue) is no error
    }
    for (int i = 0; i < the_job.count; i++)
      nx_gp_release(&the_job.gps[i]);
    std::free(the_job.gps);
    nx_mutex_lock(&the_job.in.m);
    nx_gp_release(&the_job.in.third);
    nx_mutex_unlock(&the_job.in.m);
    nx_finalize();
    the_job.up = false;
  }
};
CATCH_REGISTER_LISTENER(job_end)

void ping(session &s, const nx_gp_t *to, const char *handler, uint32_t tag,
          const std::vector<uint8_t> &bytes) {
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, to, handler, bytes.size() + 128) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_put_uint32(b, tag) == 0);
  REQUIRE(nx_put_uint64(b, bytes.size()) == 0);
  REQUIRE(nx_put_bytes(b, bytes.data(), bytes.size()) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
}

// The largest payload of the ping-pongs of every size: 64 MiB, the
// modules' bound on bytes in flight to a peer, which a single frame may
// cross when nothing else is in flight. Under ThreadSanitizer every copy
// of a payload is a range of shadow memory written byte by byte (its
// MemoryAccessRange was two thirds of these cases' CPU time), and the 64
// MiB payloads made conformance-local 93 s and conformance-ofi 160 s of
// the suite's TSan stage; there the largest is 16 MiB. The races TSan
// looks for do not depend on a payload's length; the plain and ASan
// stages send the 64 MiB.
#if defined(__SANITIZE_THREAD__)
const size_t largest = size_t(16) << 20;
// The same for the arrays put by reference in [zc-mods] (16 MiB and a
// few bytes elsewhere, 15.6 of conformance-local's 31 s under TSan):
// there they stop at 4 MiB and 3 bytes.
const size_t largest_refs = (size_t(4) << 20) + 3;
#else
const size_t largest = size_t(64) << 20;
const size_t largest_refs = SIZE_MAX;
#endif

// `sizes` (ascending, not empty), then `largest` if it is larger than the
// last of them.
std::vector<size_t> up_to_largest(std::initializer_list<size_t> sizes) {
  std::vector<size_t> all(sizes);
  if (largest > all.back())
    all.push_back(largest);
  return all;
}
} // namespace

TEST_CASE("ping-pong of every size, non-threaded and threaded",
          "[conformance]") {
  session s;
  INFO("module " << module_under_test());
  uint64_t rng = 42;
  uint32_t tag = 0;
  for (const char *handler : {"ping", "ping_t"}) {
    // 4000, 8100 and 8200 bytes lie around the one-message limits of
    // ofi and mpi (8 KiB by default).
    for (size_t size :
         up_to_largest({size_t(0), size_t(1), size_t(8), size_t(1024),
                        size_t(4000), size_t(8100), size_t(8200),
                        size_t(64) << 10, size_t(1) << 20, size_t(16) << 20})) {
      INFO(handler << " " << size << " bytes");
      std::vector<uint8_t> bytes(size);
      fill_random(bytes.data(), size, rng);
      ++tag;
      long before = s.in.pongs;
      ping(s, &s.peer, handler, tag, bytes);
      REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
      CHECK(s.in.last_tag == tag);
      CHECK(s.in.last_bytes == bytes);
    }
  }
}

// The memory a zero-copy ping puts by reference: freed by the last of its
// three release callbacks, so that a read after release is a use after free
// (reported under ASan). `calls` and `bad` outlive it.
struct zmem {
  uint8_t *bytes;
  double *d;
  std::atomic<int> calls{0}, bad{0};
};

void zmem_done(void *arg, const void *, int status) {
  auto *z = static_cast<zmem *>(arg);
  if (status != 0)
    z->bad++;
  if (++z->calls == 3) {
    std::free(z->bytes);
    std::free(z->d);
    z->bytes = nullptr;
    z->d = nullptr;
  }
}

// One release callback's record.
struct zrel {
  std::atomic<int> calls{0}, status{1};
};

void zrel_done(void *arg, const void *, int status) {
  auto *r = static_cast<zrel *>(arg);
  r->status = status;
  r->calls++;
  // Wake the test thread's waits (none once its session has ended).
  if (box == nullptr)
    return;
  nx_mutex_lock(&box->m);
  nx_cond_broadcast(&box->c);
  nx_mutex_unlock(&box->m);
}

TEST_CASE("zero copy: ping-pong of every size put by reference and read in "
          "place, non-threaded and threaded",
          "[conformance]") {
  session s;
  INFO("module " << module_under_test());
  uint64_t rng = 7;
  uint32_t tag = 1000;
  for (const char *handler : {"zping", "zping_t"}) {
    for (size_t size : up_to_largest(
             {size_t(0), size_t(1), size_t(9), size_t(1024), size_t(4000),
              size_t(8100), size_t(8200), size_t(64) << 10, size_t(1) << 20,
              size_t(4) << 20, size_t(16) << 20})) {
      INFO(handler << " " << size << " bytes");
      std::vector<uint8_t> bytes(size);
      fill_random(bytes.data(), size, rng);
      zmem z;
      z.bytes = static_cast<uint8_t *>(std::malloc(size + 1));
      z.d = static_cast<double *>(std::malloc(3 * sizeof(double)));
      REQUIRE(z.bytes != nullptr);
      REQUIRE(z.d != nullptr);
      if (size != 0)
        std::memcpy(z.bytes, bytes.data(), size);
      z.d[0] = 0.5;
      z.d[1] = 1.5;
      z.d[2] = 2.5;
      ++tag;
      long before = s.in.pongs;
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &s.peer, handler, 256) == 0);
      REQUIRE(nx_put_gp(b, &s.me) == 0);
      REQUIRE(nx_put_uint32(b, tag) == 0);
      REQUIRE(nx_put_uint64(b, size) == 0);
      REQUIRE(nx_put_bytes_ref(b, z.bytes, size / 2, zmem_done, &z) == 0);
      REQUIRE(nx_put_uint32(b, 0x5eed) == 0);
      REQUIRE(nx_put_bytes_ref(b, z.bytes + size / 2, size - size / 2,
                               zmem_done, &z) == 0);
      REQUIRE(nx_put_double_array_ref(b, z.d, 3, zmem_done, &z) == 0);
      REQUIRE(nx_rsr_send(b) == 0);
      REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
      CHECK(s.in.last_tag == tag);
      CHECK(s.in.last_bad == 0);
      CHECK(s.in.last_bytes == bytes);
      // The frame is sent (the peer answered): each callback ran once.
      REQUIRE(s.in.wait([&] { return z.calls.load() >= 3; }, 10));
      CHECK(z.calls.load() == 3);
      CHECK(z.bad.load() == 0);
    }
  }
}

// The modules that receive a frame's tail where the receiving program says
// (docs/design.md, "Receive placement"): all but local, which hands the
// sender's buffer over, and whose callback is not asked.
bool module_places() {
  std::string m = module_under_test();
  return m == "tcp" || m == "ucx" || m == "mpi" || m == "ofi";
}

TEST_CASE("receive placement: a large trailing array lands where the "
          "receiver's callback says, or arrives as before",
          "[conformance]") {
  session s;
  INFO("module " << module_under_test());
  REQUIRE(nx_handler_set_place(nx_context_self(), "pong", place_pong) == 0);
  REQUIRE(nx_handler_set_place(nx_context_self(), "no_such", place_pong) ==
          NX_ENOHANDLER);
  uint64_t rng = 99;
  uint32_t tag = 5000;
  for (place_mode mode : {PLACE_HERE, PLACE_DECLINE, PLACE_SHORT, PLACE_FAIL}) {
    for (size_t size : {size_t(NX_PLACE_MIN) - 1, size_t(NX_PLACE_MIN),
                        size_t(64) << 10, size_t(1) << 20, size_t(16) << 20}) {
      INFO("mode " << mode << ", " << size << " bytes");
      std::vector<uint8_t> bytes(size);
      fill_random(bytes.data(), size, rng);
      pbox.mode = mode;
      // 64 bytes more than the value: a value shorter than the memory
      // named fills its length only.
      pbox.mem.assign(size + 64, 0xa5);
      pbox.asked = 0;
      pbox.bad = 0;
      ++tag;
      long before = s.in.pongs;
      nx_stats_t st0, st1;
      REQUIRE(nx_stats_get(&st0) == 0);
      ping(s, &s.peer, "ping", tag, bytes);
      REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
      REQUIRE(nx_stats_get(&st1) == 0);
      // The values are the same whatever placement did.
      CHECK(s.in.last_tag == tag);
      CHECK((s.in.last_bytes == bytes)); // not printed: up to 16 MiB
      bool asks = module_places() && size >= NX_PLACE_MIN;
      CHECK(pbox.asked.load() == (asks ? 1 : 0));
      CHECK(pbox.bad.load() == 0);
      int want = !asks                 ? 0
                 : mode == PLACE_HERE  ? 1
                 : mode == PLACE_SHORT ? int(NX_EMSGSIZE)
                 : mode == PLACE_FAIL  ? int(NX_ENOTSUP)
                                       : 0;
      CHECK(s.in.last_placement == want);
      CHECK(st1.rsr_placed - st0.rsr_placed == (want == 1 ? 1u : 0u));
      if (want == 1) {
        CHECK(s.in.last_placed_same);
        CHECK(std::equal(bytes.begin(), bytes.end(), pbox.mem.begin()));
        CHECK(std::count(pbox.mem.begin() + size, pbox.mem.end(), 0xa5) == 64);
      } else {
        // Memory not taken is not written.
        CHECK(std::count(pbox.mem.begin(), pbox.mem.end(), 0xa5) ==
              std::ptrdiff_t(size + 64));
      }
    }
  }
  REQUIRE(nx_handler_set_place(nx_context_self(), "pong", nullptr) == 0);
}

TEST_CASE("receive placement: doubles in the other byte order are placed "
          "and converted where they land",
          "[conformance]") {
  session s;
  INFO("module " << module_under_test());
  const int other =
      nx_format_native() == NX_FORMAT_LITTLE ? NX_FORMAT_BIG : NX_FORMAT_LITTLE;
  uint32_t tag = 9000;
  for (int format : {nx_format_native(), other}) {
    for (size_t n : {size_t(1000), size_t(1024), size_t(1) << 17}) {
      INFO("format " << format << ", " << n << " doubles");
      std::vector<double> d(n);
      for (size_t i = 0; i < n; i++)
        d[i] = double(i) * 0.25 - 3.5;
      nx_buffer_t *b;
      REQUIRE(nx_rsr_init_name(&b, &s.peer, "dplace", n * 8 + 64) == 0);
      REQUIRE(nx_buffer_set_format(b, format) == 0);
      REQUIRE(nx_put_gp(b, &s.me) == 0);
      REQUIRE(nx_put_uint32(b, ++tag) == 0);
      REQUIRE(nx_put_uint64(b, n) == 0);
      REQUIRE(nx_put_double_array(b, d.data(), n) == 0);
      long before = s.in.pongs;
      REQUIRE(nx_rsr_send(b) == 0);
      REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
      // Placed at the peer where the module places and the doubles reach
      // NX_PLACE_MIN bytes (1000 doubles do not).
      bool placed = module_places() && n * 8 >= NX_PLACE_MIN;
      CHECK(s.in.last_tag == tag + (placed ? 1000000u : 0u));
      REQUIRE(s.in.last_bytes.size() == n * 8);
      CHECK(std::memcmp(s.in.last_bytes.data(), d.data(), n * 8) == 0);
    }
  }
}

TEST_CASE("every put/get type and a gp inside the buffer", "[conformance]") {
  session s;
  for (int format : {NX_FORMAT_LITTLE, NX_FORMAT_BIG}) {
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &s.peer, "types", 1024) == 0);
    REQUIRE(nx_buffer_set_format(b, format) == 0);
    REQUIRE(nx_put_gp(b, &s.me) == 0);
    REQUIRE(nx_put_int8(b, -8) == 0);
    REQUIRE(nx_put_uint8(b, 200) == 0);
    REQUIRE(nx_put_int16(b, -1600) == 0);
    REQUIRE(nx_put_uint16(b, 60000) == 0);
    REQUIRE(nx_put_int32(b, -320000) == 0);
    REQUIRE(nx_put_uint32(b, 4000000000u) == 0);
    REQUIRE(nx_put_int64(b, -(1ll << 60)) == 0);
    REQUIRE(nx_put_uint64(b, 0xfedcba9876543210ull) == 0);
    REQUIRE(nx_put_float(b, 1.5f) == 0);
    REQUIRE(nx_put_double(b, -2.25e100) == 0);
    REQUIRE(nx_put_char(b, 'q') == 0);
    int32_t arr[100];
    for (int k = 0; k < 100; k++)
      arr[k] = k * k - 50;
    REQUIRE(nx_put_int32_array(b, arr, 100) == 0);
    double darr[10];
    for (int k = 0; k < 10; k++)
      darr[k] = k / 4.0;
    REQUIRE(nx_put_double_array(b, darr, 10) == 0);
    REQUIRE(nx_put_gp(b, &s.me) == 0);
    long before = s.in.typed;
    REQUIRE(nx_rsr_send(b) == 0);
    REQUIRE(s.in.wait([&] { return s.in.typed > before; }));
    CHECK(s.in.typed_bad == 0);
  }
}

TEST_CASE("a gp to a third context, made by the peer, travels back and works; "
          "each handler learns its sender's context (nx_buffer_source)",
          "[conformance]") {
  session s;
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "third", 128) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(s.in.wait([&] { return !nx_gp_is_null(&s.in.third); }));
  CHECK(std::string(nx_gp_protocol(&s.in.third)) == module_under_test());
  uint64_t me = nx_context_id(nx_context_self()), peer = nx_gp_context(&s.peer);
  CHECK(me == nx_gp_context(&s.me));
  nx_mutex_lock(&s.in.m);
  CHECK(s.in.peer_saw == me);
  CHECK(s.in.peer_self == peer);
  CHECK(s.in.third_source == peer);
  nx_mutex_unlock(&s.in.m);
  long before = s.in.pongs;
  ping(s, &s.in.third, "ping", 7, std::vector<uint8_t>(100, 9));
  REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
  CHECK(s.in.last_tag == 7);
  nx_mutex_lock(&s.in.m);
  CHECK(s.in.pong_source == nx_gp_context(&s.in.third));
  nx_mutex_unlock(&s.in.m);
}

TEST_CASE("many senders to one receiver: each RSR exactly once, each "
          "sender's order kept",
          "[conformance]") {
  session s;
  const int threads = 4, each = 2000;
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  nx_handler_id_t id = nx_handler_id("seq");
  for (int t = 0; t < threads; t++)
    ts.emplace_back([&, t] {
      for (int i = 0; i < each; i++) {
        nx_buffer_t *b;
        if (nx_rsr_init(&b, &s.peer, id, 16) != 0 ||
            nx_put_uint32(b, (uint32_t)t) != 0 ||
            nx_put_uint32(b, (uint32_t)i) != 0 || nx_rsr_send(b) != 0)
          errors++;
      }
    });
  for (auto &th : ts)
    th.join();
  REQUIRE(errors == 0);
  // The report goes after the RSRs on the same path, so it sees them all
  // (the ordering guarantee: one sending thread to one receiver).
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "report", 64) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  REQUIRE(s.in.wait([&] { return s.in.counts_in > 0; }));
  CHECK(s.in.counts[0] == (uint64_t)threads * each); // total
  CHECK(s.in.counts[1] == 0);                        // duplicates
  CHECK(s.in.counts[2] == 0);                        // out of order
  CHECK(s.in.counts[3] == 0);                        // malformed
}

TEST_CASE("ordered: RSRs sent with NX_RSR_ORDERED run one at a time, in "
          "send order, small and large, non-threaded and threaded",
          "[conformance]") {
  session s;
  // Large frames take other paths than small ones in several modules (a
  // UCX rendezvous, libfabric's large sends, zero copy), so without the
  // flag they overtake and are overtaken; a threaded handler that sleeps
  // would let the next one start beside it.
  const uint32_t n = 240;
  std::vector<uint8_t> big(384 * 1024, 0x5a);
  nx_handler_id_t plain = nx_handler_id("oseq"),
                  threaded = nx_handler_id("oseq_t");
  for (uint32_t i = 0; i < n; i++) {
    size_t len = i % 4 == 2 ? big.size() : 8;
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init(&b, &s.peer, i % 3 == 1 ? threaded : plain, len + 16) ==
            0);
    REQUIRE(nx_put_uint32(b, i) == 0);
    REQUIRE(nx_put_bytes(b, big.data(), len) == 0);
    REQUIRE(nx_rsr_send_flags(b, NX_RSR_ORDERED) == 0);
  }
  // Ordered too: it runs after all of them.
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "oreport", 64) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_rsr_send_flags(b, NX_RSR_ORDERED) == 0);
  REQUIRE(s.in.wait([&] { return s.in.counts_in > 0; }));
  CHECK(s.in.counts[0] == n); // total
  CHECK(s.in.counts[1] == 0); // two running at once
  CHECK(s.in.counts[2] == 0); // out of order
  CHECK(s.in.counts[3] == 0); // malformed
}

TEST_CASE("a sent RSR buffer is the runtime's: sending or releasing it again "
          "is NX_EINVAL, and the module never sees it twice",
          "[conformance][double-send]") {
  session s;
  nx_stats_t st0, st1;
  REQUIRE(nx_stats_get(&st0) == 0);
  long before = s.in.pongs;
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &s.peer, "ping", 256) == 0);
  REQUIRE(nx_put_gp(b, &s.me) == 0);
  REQUIRE(nx_put_uint32(b, 101) == 0);
  REQUIRE(nx_put_uint64(b, 0) == 0);
  REQUIRE(nx_put_bytes(b, nullptr, 0) == 0);
  REQUIRE(nx_rsr_send(b) == 0);
  // At once: the module may still hold the frame (queued, being written)
  // or have freed it already.
  CHECK(nx_rsr_send(b) == NX_EINVAL);
  CHECK(nx_rsr_send_flags(b, NX_RSR_NONBLOCK) == NX_EINVAL);
  CHECK(nx_buffer_release(b) == NX_EINVAL);
  REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
  // After the reply the runtime is done with it, and has usually freed it:
  // refused by address, its memory never read (AddressSanitizer builds
  // would report a use after free). Nothing is allocated in between, so
  // the address is not yet another buffer of ours.
  CHECK(nx_rsr_send(b) == NX_EINVAL);
  CHECK(nx_buffer_release(b) == NX_EINVAL);
  CHECK(nx_buffer_retain(nullptr) == NX_EINVAL);
  // One more RSR, whose reply comes after any duplicate's (each sender's
  // order is kept): exactly two replies, and two RSRs counted as sent
  // (four in process: the peer's replies are sent here too).
  ping(s, &s.peer, "ping", 102, {});
  REQUIRE(s.in.wait([&] { return s.in.last_tag == 102; }));
  CHECK(s.in.pongs == before + 2);
  REQUIRE(nx_stats_get(&st1) == 0);
  CHECK(st1.rsr_sent - st0.rsr_sent == (in_process() ? 4u : 2u));
}

// [zc-mods] Values put by reference (nx_put_bytes_ref) make frames of
// several iovecs, which a module with iov_max sends from where they are.
// Every array is a block of its own that its release callback poisons and
// frees: a module that read it after send_done would send the poison, and
// under AddressSanitizer read freed memory. The peer reads them in place
// and answers by reference to its received buffer ("ping_refs",
// conf_handlers.h).
namespace {

struct zc_ref {
  uint8_t *p = nullptr;
  size_t len = 0;
  std::atomic<int> calls{0};
  std::atomic<int> status{1};
};

void zc_release(void *arg, const void *, int status) {
  auto *r = static_cast<zc_ref *>(arg);
  if (r->p != nullptr)
    std::memset(r->p, 0xdd, r->len);
  std::free(r->p);
  r->p = nullptr;
  r->status = status;
  r->calls++;
}

struct zc_inbox {
  std::mutex m;
  std::condition_variable c;
  long pongs = 0;
  uint32_t tag = 0;
  std::vector<std::vector<uint8_t>> parts;
};
zc_inbox zc_box;

void on_pong_refs(nx_context_t *, void *, nx_buffer_t *b) {
  uint32_t tag = 0, count = 0;
  std::vector<std::vector<uint8_t>> parts;
  if (nx_get_uint32(b, &tag) == 0 && nx_get_uint32(b, &count) == 0 &&
      count <= CONF_REFS_MAX) {
    for (uint32_t i = 0; i < count; i++) {
      uint64_t len = 0;
      const void *v = nullptr;
      if (nx_get_uint64(b, &len) != 0 || nx_get_bytes_ptr(b, &v, len) != 0)
        break;
      const uint8_t *u = static_cast<const uint8_t *>(v);
      parts.emplace_back(u, u + len);
    }
  }
  std::lock_guard<std::mutex> g(zc_box.m);
  zc_box.tag = tag;
  zc_box.parts.swap(parts);
  zc_box.pongs++;
  zc_box.c.notify_all();
}

} // namespace

TEST_CASE("[zc-mods] ping-pong of every size put by reference, one array, "
          "two, and eight with values between them",
          "[conformance][zc-mods]") {
  session s;
  INFO("module " << module_under_test());
  REQUIRE(nx_handler_register(nx_context_self(), "pong_refs", on_pong_refs,
                              NX_HANDLER_NONTHREADED, nullptr) == 0);
  uint64_t rng = 7;
  uint32_t tag = 1000;
  std::vector<std::unique_ptr<zc_ref>> all;
  const size_t one[] = {0,
                        1,
                        8,
                        1024,
                        4000,
                        8100,
                        8200,
                        size_t(64) << 10,
                        size_t(1) << 20,
                        size_t(4) << 20,
                        size_t(16) << 20};
  const size_t more[] = {0,
                         8,
                         4000,
                         8200,
                         size_t(64) << 10,
                         size_t(1) << 20,
                         (size_t(4) << 20) + 3,
                         (size_t(6) << 20) + 1,
                         (size_t(16) << 20) + 5};
  for (const char *handler : {"ping_refs", "ping_refs_t"}) {
    // Layout 0, one array of 0 B to 64 MiB, is also "zero copy: ping-pong
    // of every size ..." above; here once, up to 16 MiB, for the reply path.
    for (int layout = 0; layout < 3; layout++) {
      const size_t *sizes = layout == 0 ? one : more;
      size_t nsizes = layout == 0 ? sizeof(one) / sizeof(one[0])
                                  : sizeof(more) / sizeof(more[0]);
      // Ascending: under TSan the loop ends at the first one too large.
      for (size_t k = 0; k < nsizes && sizes[k] <= largest_refs; k++) {
        size_t size = sizes[k];
        // The arrays' lengths: large ones with small ones between, so that
        // a fragment spans more pieces than a provider takes iovecs.
        std::vector<size_t> lens;
        if (layout == 0)
          lens = {size};
        else if (layout == 1)
          lens = {size, size / 3 + 1};
        else
          lens = {size / 2, 7, size / 4, 1, 100, size / 8, 0, 3000};
        INFO(handler << " layout " << layout << " size " << size);
        std::vector<std::vector<uint8_t>> expect;
        std::vector<zc_ref *> refs;
        nx_buffer_t *b;
        REQUIRE(nx_rsr_init_name(&b, &s.peer, handler, 256) == 0);
        REQUIRE(nx_put_gp(b, &s.me) == 0);
        REQUIRE(nx_put_uint32(b, ++tag) == 0);
        REQUIRE(nx_put_uint32(b, (uint32_t)lens.size()) == 0);
        for (size_t len : lens) {
          all.emplace_back(new zc_ref);
          zc_ref *r = all.back().get();
          r->len = len;
          r->p = static_cast<uint8_t *>(std::malloc(len > 0 ? len : 1));
          REQUIRE(r->p != nullptr);
          fill_random(r->p, len, rng);
          expect.emplace_back(r->p, r->p + len);
          refs.push_back(r);
          REQUIRE(nx_put_uint64(b, len) == 0);
          REQUIRE(nx_put_bytes_ref(b, r->p, len, zc_release, r) == 0);
        }
        long before;
        {
          std::lock_guard<std::mutex> g(zc_box.m);
          before = zc_box.pongs;
        }
        REQUIRE(nx_rsr_send(b) == 0);
        {
          std::unique_lock<std::mutex> g(zc_box.m);
          REQUIRE(zc_box.c.wait_for(g, std::chrono::seconds(60),
                                    [&] { return zc_box.pongs > before; }));
          CHECK(zc_box.tag == tag);
          REQUIRE(zc_box.parts.size() == expect.size());
          for (size_t i = 0; i < expect.size(); i++)
            CHECK(zc_box.parts[i] == expect[i]);
          zc_box.parts.clear();
        }
        // Released once each, with status 0, by the time the sender is
        // done (send_done may come after the reply).
        for (int ms = 0; ms < 60000; ms++) {
          bool done = true;
          for (zc_ref *r : refs)
            done = done && r->calls.load() > 0;
          if (done)
            break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        for (zc_ref *r : refs) {
          CHECK(r->calls.load() == 1);
          CHECK(r->status.load() == 0);
        }
      }
    }
  }
  // No callback ran twice meanwhile.
  for (auto &r : all)
    CHECK(r->calls.load() == 1);
}

// The peer process: our child running conf_peer, or -1.
pid_t peer_child() { return nxt_child_pid("conf_peer"); }

TEST_CASE("peer death: the error is reported, later RSRs fail, nothing hangs",
          "[conformance][own-test][peer-death]") {
  if (in_process())
    skip_test("an in-process context does not die on its own");
  if (job_mode())
    skip_test("its peers are ranks of one MPI job, and mpirun ends the whole "
              "job when a rank is killed");
  // RSRs of values put by reference, sent while the death is being found:
  // each one's memory is released exactly once, with the error when it
  // failed (at once, or later in the module), by nx_finalize at the latest
  // (ofi: a fragment in flight to a dead shm peer never completes before).
  const int n = 16;
  std::vector<uint8_t> mem(1 << 20, 0x42);
  std::vector<zrel> rel(n);
  std::vector<int> rc(n);
  {
    session s;
    pid_t child = peer_child(); // our child running conf_peer
    REQUIRE(child > 0);
    long before = s.in.pongs;
    ping(s, &s.peer, "ping", 1, std::vector<uint8_t>(10));
    REQUIRE(s.in.wait([&] { return s.in.pongs > before; }));
    REQUIRE(kill(child, SIGKILL) == 0);
    for (int i = 0; i < n; i++) {
      nx_buffer_t *zb;
      REQUIRE(nx_rsr_init_name(&zb, &s.peer, "ping", 64) == 0);
      REQUIRE(nx_put_bytes_ref(zb, mem.data(), mem.size(), zrel_done,
                               &rel[i]) == 0);
      rc[i] = nx_rsr_send(zb);
    }
    REQUIRE(s.in.wait([&] { return s.in.deaths.load() > 0; }, 20));
    nx_buffer_t *b;
    REQUIRE(nx_rsr_init_name(&b, &s.peer, "ping", 16) == 0);
    CHECK(nx_rsr_send(b) == NX_EPEERDEAD);
    if (module_under_test() != "ofi")
      CHECK(s.in.wait(
          [&] {
            for (auto &r : rel)
              if (r.calls.load() == 0)
                return false;
            return true;
          },
          20));
  }
  for (int i = 0; i < n; i++) {
    INFO("RSR " << i << " returned " << rc[i]);
    CHECK(rel[i].calls.load() == 1);
    // The error, or 0 when the values were copied before it (a module that
    // sends from one place: the core copies at send and releases then).
    int st = rel[i].status.load();
    if (rc[i] < 0)
      CHECK((st == rc[i] || st == 0));
    else
      CHECK(st <= 0);
  }
}

// After the case above: a skip (exit 77) ends the whole run, and the
// case above applies to every module that reaches other processes.
TEST_CASE("peer death: a placed value whose sender dies midway is reported "
          "to the receiver, and nothing is written past the memory named",
          "[conformance][own-test][peer-death]") {
  if (in_process())
    skip_test("an in-process context does not die on its own");
  if (job_mode())
    skip_test("mpirun ends the whole job when a rank is killed");
  if (!module_places())
    skip_test("the module delivers frames whole: nothing is placed");
  session s;
  pid_t child = peer_child();
  REQUIRE(child > 0);
  // 64 MiB: far more than the sockets or a rendezvous hold, so the
  // sender is still sending (or the receiver still fetching) when it dies.
  const size_t size = size_t(64) << 20;
  pbox.mode = PLACE_HOLD;
  pbox.mem.assign(size + 4096, 0xa5); // 4 KiB past the memory named
  pbox.holding = 0;
  pbox.release = 0;
  REQUIRE(nx_handler_set_place(nx_context_self(), "pong", place_pong) == 0);
  std::vector<uint8_t> bytes(size, 0x3c);
  ping(s, &s.peer, "ping", 77, bytes);
  for (int ms = 0; ms < 60000 && !pbox.holding.load(); ms++)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(pbox.holding.load() == 1);
  REQUIRE(kill(child, SIGKILL) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pbox.release = 1;
  REQUIRE(s.in.wait([&] { return s.in.placed_lost > 0; }, 30));
  CHECK(s.in.placed_lost == 1);
  CHECK(s.in.cb_context == nx_context_id(nx_context_self()));
  CHECK(s.in.pongs == 0); // its handler never ran
  CHECK(std::count(pbox.mem.begin() + size, pbox.mem.end(), 0xa5) == 4096);
  pbox.mode = PLACE_HERE;
}

namespace {

// How a module's framing meets a lie, which decides what a bad frame costs
// the sender (docs/design.md section 5, frame_alloc and bad_peer).
struct frame_traits {
  bool stream; // bytes on a connection (tcp): after a bad header the
               // framing is lost, so the victim hangs up on the sender;
               // messages (ucx, ofi) lose only the bad frame.
  bool keyed;  // the module makes a sender present the key first
  bool lie_drops_sender; // a frame whose size and header disagree makes
                         // the victim drop the sender for good (mpi:
                         // the rank), not just the frame (ucx, ofi)
};

frame_traits traits_of(const std::string &m) {
  if (m == "tcp")
    return {true, true, false};
  if (m == "ofi")
    return {false, true, false};
  if (m == "mpi") // the ranks of a job trust each other: no key
    return {false, false, true};
  return {false, false, false}; // ucx: no key per connection (docs/ucx.md)
}

// One rogue peer run and what the victim must have seen afterwards.
struct bad_case {
  std::string name;
  std::string script; // frames, in order (conf_rogue.c, make_frame)
  long bad;           // drop_bad_frame
  long no_handler;    // drop_no_handler (and NX_ENOHANDLER callbacks)
  long no_context;    // drop_no_context (and NX_ENOCONTEXT callbacks)
  long hits;          // good frames that reached "rogue_hit"
  long lies;          // frames that reached "rogue_lie"
  bool hangup;        // the victim hangs up on the rogue
  bool wrong_key;
  bool dropped = false; // the victim drops the rogue for good and reports
                        // its process lost (lie_drops_sender)
  bool last = false;    // job mode: the rogue rank's last case
};

std::vector<bad_case> bad_cases(const frame_traits &t) {
  // After a bad header, the good frame behind it arrives only where the
  // module keeps the sender (messages); on a stream the victim hangs up.
  long after_bad = t.stream ? 0 : 1;
  std::vector<bad_case> v = {
      {"control: good frames arrive", "good,good", 0, 0, 0, 2, 0, false, false},
      {"wrong magic", "magic,good", 1, 0, 0, after_bad, 0, t.stream, false},
      {"wrong version", "version,good", 1, 0, 0, after_bad, 0, t.stream, false},
      {"handler id 0", "handler0,good", 1, 0, 0, after_bad, 0, t.stream, false},
      {"an unknown data format", "format,good", 1, 0, 0, after_bad, 0, t.stream,
       false},
      {"context id 0", "context0,good", 1, 0, 0, after_bad, 0, t.stream, false},
      {"unknown handler", "nohandler,good", 0, 1, 0, 1, 0, false, false},
      {"a context that does not exist", "nocontext,good", 0, 0, 1, 1, 0, false,
       false},
      // On a stream a length is all there is: too long swallows the next
      // frame's header and delivers; too short delivers, and what follows
      // is not a header. Messages are refused when header and size differ.
      {"a length that lies long", "longer,good", 1, 0, 0, after_bad,
       t.stream ? 1 : 0, t.stream, false},
      {"a length that lies short", "shorter,good", 1, 0, 0, after_bad,
       t.stream ? 1 : 0, t.stream, false},
      // A length far above the largest frame: refused like a bad header
      // (mpi checks sizes first: there it is a lie).
      {"a length over the frame limit", "huge,good", 1, 0, 0, after_bad, 0,
       t.stream, false},
      // Receive placement's lead past the payload's end: a bad header.
      {"a placement lead past the payload", "badlead,good", 1, 0, 0, after_bad,
       0, t.stream, false},
      // The rogue hangs up itself in the middle of the payload.
      {"a truncated payload", "good,truncated", 1, 0, 0, 1, 0, false, false},
  };
  // The wrong key. tcp's handshake (version 2, docs/tcp.md) has the
  // listener prove first: the rogue, which runs the real module, refuses
  // the victim before it sends a proof of its own, so the victim counts
  // nothing and delivers nothing; tests/handshake checks a client that
  // sends a wrong proof anyway. ofi's peer presents the key and is
  // counted, and the victim tells it so (a REFUSE, docs/ofi.md): the
  // rogue's module fails its peer, as a hang-up.
  if (t.keyed)
    v.push_back(
        {"the wrong key", "good", t.stream ? 0 : 1, 0, 0, 0, 0, true, true});
  if (t.lie_drops_sender) {
    // A sender that is dropped for good sends nothing more: one lie per
    // run (NX_CONF_JOB_LIE, meson runs each), last, the good frame after
    // it ignored.
    const char *env = std::getenv("NX_CONF_JOB_LIE");
    std::string lie = env != nullptr ? env : "longer";
    std::vector<bad_case> kept;
    for (bad_case &c : v) {
      bool lies = c.script.find("longer") != std::string::npos ||
                  c.script.find("shorter") != std::string::npos ||
                  c.script.find("truncated") != std::string::npos ||
                  c.script.find("huge") != std::string::npos;
      if (!lies) {
        kept.push_back(c);
      } else if (c.script.find(lie) != std::string::npos) {
        c.hits = c.script.rfind("good", 0) == 0 ? 1 : 0;
        c.dropped = true;
        c.last = true;
        kept.push_back(c);
      }
    }
    std::stable_partition(kept.begin(), kept.end(),
                          [](const bad_case &c) { return !c.last; });
    v = kept;
  }
  return v;
}

// The victim's gp in its wire form, as hex: the rogue's command line.
std::string gp_hex(const nx_gp_t &gp) {
  nx_buffer_t *b;
  const void *data;
  size_t len;
  std::string hex;
  REQUIRE(nx_buffer_create(64, &b) == 0);
  REQUIRE(nx_buffer_format(b) == NX_FORMAT_LITTLE);
  REQUIRE(nx_put_gp(b, &gp) == 0);
  REQUIRE(nx_buffer_bytes(b, &data, &len) == 0);
  for (size_t i = 0; i < len; i++) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x",
                  static_cast<const uint8_t *>(data)[i]);
    hex += two;
  }
  nx_buffer_release(b);
  return hex;
}

// Runs the rogue to completion (30 s at most); its exit status and output.
struct rogue_result {
  int status = -1;
  std::string out;
};

rogue_result run_rogue(const std::string &gp, const bad_case &c) {
  std::string m = module_under_test();
  std::string so =
      std::string(PROTO_BUILD_DIR) + "/" + m + "/libnx_proto_" + m + ".so";
  std::string script = c.script;
  // Long enough for the victim to hang up; a rogue that expects to be
  // kept lingers briefly, so that a hang-up it does not expect shows.
  std::string linger = c.hangup ? "10000" : "300";
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    if (c.wrong_key)
      setenv("NX_ROGUE_WRONG_KEY", "1", 1);
    const char *argv[] = {ROGUE_EXE,      so.c_str(),     m.c_str(), gp.c_str(),
                          script.c_str(), linger.c_str(), nullptr};
    execv(ROGUE_EXE, const_cast<char *const *>(argv));
    _exit(127);
  }
  close(fds[1]);
  rogue_result r;
  // Its output as it comes: a line at each step (conf_rogue.c), then the
  // result. 60 s of silence in one step is a hang: the script's step
  // waits up to 10 s for each frame's send and for the linger (30 s for
  // two frames), and a rogue over ofi once went 30 s without a word
  // under TSan beside the rest of the suite.
  struct pollfd p = {fds[0], POLLIN, 0};
  char chunk[256];
  ssize_t n;
  while (poll(&p, 1, 60000) == 1 &&
         (n = read(fds[0], chunk, sizeof(chunk))) > 0)
    r.out.append(chunk, (size_t)n);
  close(fds[0]);
  int st = 0;
  for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) == 0; i++)
    usleep(50000);
  if (waitpid(pid, &st, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return r;
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Job mode: the rogue is rank 2, told its case in a "rogue_case" RSR; it
// answers "rogue_done" with its result line, unless the case got it
// dropped (then no answer can come).
// "rogue_case" RSRs sent to the job's rogue rank: it does not run nexus, so
// it never confirms them (docs/design.md section 9), and they are reported
// lost when it is dropped.
long rogue_cases_sent;

rogue_result run_rogue_job(session &s, const bad_case &c) {
  REQUIRE(the_job.count >= 3);
  std::string text = std::string("SCRIPT:") + (c.hangup ? "10000" : "300") +
                     ":" + (c.last ? "1" : "0") + ":" + c.script;
  nx_buffer_t *b;
  REQUIRE(nx_rsr_init_name(&b, &the_job.gps[2], "rogue_case",
                           text.size() + 64) == 0);
  REQUIRE(nx_put_bytes(b, text.c_str(), text.size() + 1) == 0);
  nx_mutex_lock(&s.in.m);
  long before = s.in.rogue_done;
  nx_mutex_unlock(&s.in.m);
  REQUIRE(nx_rsr_send(b) == 0);
  rogue_cases_sent++;
  rogue_result r;
  if (c.dropped) {
    r.status = 0;
    return r;
  }
  if (s.in.wait([&] { return s.in.rogue_done > before; }, 30)) {
    nx_mutex_lock(&s.in.m);
    r.out = s.in.rogue_said;
    nx_mutex_unlock(&s.in.m);
    r.status = 0;
  }
  return r;
}

} // namespace

TEST_CASE("bad frames from a rogue peer are dropped and counted; the process "
          "serves good peers afterwards",
          "[conformance][own-test][bad-frames]") {
  if (in_process())
    skip_test("in-process frames never cross a transport: a peer cannot hand "
              "local a frame (the core's checks of received headers are "
              "tested with the fixture module, tests/core/test_loader.cpp)");
  session s;
  frame_traits t = traits_of(module_under_test());
  std::string gp = gp_hex(s.me);
  uint64_t me = nx_gp_context(&s.me);
  uint32_t hit = nx_handler_id("rogue_hit");
  uint32_t tag = 100;
  for (const bad_case &c : bad_cases(t)) {
    INFO("module " << module_under_test() << ", case: " << c.name);
    nx_stats_t st0, st;
    REQUIRE(nx_stats_get(&st0) == 0);
    nx_mutex_lock(&s.in.m);
    long hits0 = s.in.hits, lies0 = s.in.lies, cbh0 = s.in.cb_no_handler,
         cbc0 = s.in.cb_no_context;
    nx_mutex_unlock(&s.in.m);
    int deaths0 = s.in.deaths.load();

    rogue_result r = job_mode() ? run_rogue_job(s, c) : run_rogue(gp, c);
    INFO("rogue: " << r.out);
    REQUIRE(r.status == 0);
    if (!c.dropped)
      CHECK(r.out.find(c.hangup ? "hungup=1" : "hungup=0") !=
            std::string::npos);

    // What must arrive arrives (the victim may still be reading when the
    // rogue exits); then nothing more may come.
    auto reached = [&] {
      nx_stats_t now;
      nx_stats_get(&now);
      return (long)(now.drop_bad_frame - st0.drop_bad_frame) >= c.bad &&
             (long)(now.drop_no_handler - st0.drop_no_handler) >=
                 c.no_handler &&
             (long)(now.drop_no_context - st0.drop_no_context) >=
                 c.no_context &&
             s.in.hits - hits0 >= c.hits && s.in.lies - lies0 >= c.lies;
    };
    CHECK(s.in.wait(reached, 10));
    usleep(200000);
    REQUIRE(nx_stats_get(&st) == 0);
    CHECK((long)(st.drop_bad_frame - st0.drop_bad_frame) == c.bad);
    CHECK((long)(st.drop_no_handler - st0.drop_no_handler) == c.no_handler);
    CHECK((long)(st.drop_no_context - st0.drop_no_context) == c.no_context);
    nx_mutex_lock(&s.in.m);
    CHECK(s.in.hits - hits0 == c.hits);
    CHECK(s.in.hits_bad == 0);
    CHECK(s.in.lies - lies0 == c.lies);
    CHECK(s.in.cb_no_handler - cbh0 == c.no_handler);
    CHECK(s.in.cb_no_context - cbc0 == c.no_context);
    if (c.no_handler > 0) {
      CHECK(s.in.cb_context == me);
      CHECK(s.in.cb_handler == nx_handler_id("rogue_no_such_handler"));
    }
    if (c.no_context > 0) {
      CHECK(s.in.cb_context == ((me & ~0xffffffffull) | 0x7ffffff0u));
      CHECK(s.in.cb_handler == hit);
    }
    nx_mutex_unlock(&s.in.m);
    // A rogue outside the computation dies no death here; a rank of the
    // job that is dropped is reported lost, once. The real peer is
    // untouched.
    CHECK(s.in.deaths.load() - deaths0 == (c.dropped ? 1 : 0));
    CHECK(st.peers_failed - st0.peers_failed == (c.dropped ? 1u : 0u));
    // Nothing the process sent is lost, but for the RSRs the job's rogue
    // took without confirming (it runs no nexus): reported when it is
    // dropped.
    if (job_mode() && c.dropped)
      CHECK((long)(st.rsr_failed - st0.rsr_failed) <= rogue_cases_sent);
    else
      CHECK(st.rsr_failed == st0.rsr_failed);

    // The good peer is still served, both ways.
    long before = s.in.pongs;
    ++tag;
    ping(s, &s.peer, "ping", tag, std::vector<uint8_t>(1000, (uint8_t)tag));
    REQUIRE(s.in.wait([&] { return s.in.pongs > before; }, 20));
    CHECK(s.in.last_tag == tag);
  }
}
