// Large arguments land in the callee's object (receive placement,
// docs/ccxx.md "Large arguments"): a call whose last argument is a large
// std::vector of arithmetic or opaque trivially copyable elements, or a
// large std::string, is received into the object the argument becomes, and
// the values read the same as ever; small ones, a large one that is not
// last, and in-process objects are not placed. When the sender dies
// midway, the object made for its argument is freed.
//
// Usage: test_place WHERE   (WHERE: "here" or a node spec such as
// "localhost"). Exits 0 when every check passed, 1 otherwise.
#include <ccxx/ccxx.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static int failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                              \
    }                                                                          \
  } while (0)

// Trivially copyable but not an aggregate (it has constructors): ccxx
// writes it as opaque bytes, so a vector of it is one array of bytes.
class blob {
public:
  blob() = default;
  blob(int32_t a, double b) : a_(a), b_(b) {}
  int32_t a() const { return a_; }
  double b() const { return b_; }

private:
  int32_t a_ = 0;
  double b_ = 0;
};

static double dval(uint64_t i) { return 0.5 * double(i) - 7.25; }
static int32_t ival(uint64_t i) { return int32_t(i * 2654435761u); }
static char cval(uint64_t i) { return char('a' + i % 23); }
static blob bval(uint64_t i) { return blob(ival(i), dval(i)); }

// Mismatches of `n` expected values in a received container, and a large
// penalty for the wrong size.
template <class V, class F>
static uint64_t mismatches(uint64_t n, const V &v, F same) {
  uint64_t bad = v.size() == n ? 0 : uint64_t(1) << 40;
  for (uint64_t i = 0; i < v.size() && i < n; i++)
    if (!same(i, v[i]))
      bad++;
  return bad;
}

class Sink {
public:
  uint64_t doubles(uint64_t n, std::vector<double> v) {
    return mismatches(n, v, [](uint64_t i, double x) { return x == dval(i); });
  }
  uint64_t ints(uint64_t n, std::vector<int32_t> v) {
    return mismatches(n, v, [](uint64_t i, int32_t x) { return x == ival(i); });
  }
  uint64_t text(uint64_t n, std::string s) {
    return mismatches(n, s, [](uint64_t i, char c) { return c == cval(i); });
  }
  uint64_t blobs(uint64_t n, std::vector<blob> v) {
    return mismatches(n, v, [](uint64_t i, const blob &b) {
      return b.a() == ival(i) && b.b() == dval(i);
    });
  }
  // The large vector first: the payload ends with n, nothing is placed.
  uint64_t doubles_first(std::vector<double> v, uint64_t n) {
    return mismatches(n, v, [](uint64_t i, double x) { return x == dval(i); });
  }
  // A string (the first s.size() characters of the text), then n doubles.
  uint64_t two(std::string s, uint64_t n, std::vector<double> v) {
    return mismatches(s.size(), s,
                      [](uint64_t i, char c) { return c == cval(i); }) +
           mismatches(n, v, [](uint64_t i, double x) { return x == dval(i); });
  }
  // One-way: the result is kept for kept().
  void keep(uint64_t n, std::vector<double> v) {
    kept_ = doubles(n, std::move(v));
  }
  uint64_t kept() { return kept_; }
  ccxx::placement_stats stats() { return ccxx::placement(); }
  int pid() { return getpid(); }
  // Sends `to` a vector of n doubles from another thread and returns.
  void blast(ccxx::global_ptr<Sink> to, uint64_t n) {
    ccxx::spawn([to, n] {
      std::vector<double> v(n);
      for (uint64_t i = 0; i < n; i++)
        v[i] = dval(i);
      try {
        to.call<&Sink::doubles>(n, v);
      } catch (const std::exception &) {
      }
    });
  }

private:
  // Written by keep's handler, read by kept's: they may run at once.
  std::atomic<uint64_t> kept_{~uint64_t(0)};
};

static std::vector<double> dvec(uint64_t n) {
  std::vector<double> v(n);
  for (uint64_t i = 0; i < n; i++)
    v[i] = dval(i);
  return v;
}

// The module RSRs to a process object take, from NX_PROTOCOLS (its first
// entry; "mpi" nodes are reached over tcp).
static std::string first_module() {
  const char *p = getenv("NX_PROTOCOLS");
  std::string s = p != nullptr ? p : "";
  return s.substr(0, s.find(','));
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_place here|NODESPEC\n");
    return 2;
  }
  ccxx::proc_t where =
      std::strcmp(argv[1], "here") == 0 ? ccxx::here : ccxx::proc_t(argv[1]);
  std::string module = first_module();
  // Every module that reaches other processes places a large last
  // argument whose call's leading values are small; ofi only when the
  // provider takes the payload's pieces (docs/design.md): not checked.
  bool expect_placed = !where.in_process() && module != "ofi";
  printf("objects at %s, modules %s: %s\n",
         where.in_process() ? "here" : argv[1], module.c_str(),
         expect_placed ? "large last arguments are placed"
                       : "placement not checked or none");

  ccxx::global_ptr<Sink> s = ccxx::create<Sink>(where);
  uint64_t placed = s.call<&Sink::stats>().placed;
  // Whether the calls since the last look placed `k` arguments, and none
  // is outstanding or lost.
  auto check_placed = [&](uint64_t k, const char *what) {
    ccxx::placement_stats st = s.call<&Sink::stats>();
    uint64_t got = st.placed - placed;
    printf("%s: %llu placed, %llu outstanding\n", what, (unsigned long long)got,
           (unsigned long long)st.outstanding);
    CHECK(st.outstanding == 0);
    CHECK(st.lost == 0);
    if (where.in_process())
      CHECK(got == 0); // local hands the sender's buffer over
    else if (expect_placed)
      CHECK(got == k);
    placed = st.placed;
  };

  // 1 MiB of doubles, 4 MiB of int32, 3 MiB of text, 1 MiB of blobs.
  const uint64_t nd = (uint64_t(1) << 20) / sizeof(double);
  CHECK(s.call<&Sink::doubles>(nd, dvec(nd)) == 0);
  check_placed(1, "1 MiB std::vector<double>");

  const uint64_t ni = (uint64_t(4) << 20) / sizeof(int32_t);
  std::vector<int32_t> iv(ni);
  for (uint64_t i = 0; i < ni; i++)
    iv[i] = ival(i);
  CHECK(s.call<&Sink::ints>(ni, iv) == 0);
  check_placed(1, "4 MiB std::vector<int32_t>");

  const uint64_t ns = (uint64_t(3) << 20) + 17;
  std::string text(ns, ' ');
  for (uint64_t i = 0; i < ns; i++)
    text[i] = cval(i);
  CHECK(s.call<&Sink::text>(ns, text) == 0);
  check_placed(1, "3 MiB std::string");

  static_assert(std::is_trivially_copyable_v<blob>);
  const uint64_t nb = (uint64_t(1) << 20) / sizeof(blob);
  std::vector<blob> bv(nb);
  for (uint64_t i = 0; i < nb; i++)
    bv[i] = bval(i);
  CHECK(s.call<&Sink::blobs>(nb, bv) == 0);
  check_placed(1, "1 MiB std::vector<blob> (opaque bytes)");

  // Small ones (below NX_PLACE_MIN, 8 KiB) are not placed; empty ones
  // arrive empty.
  CHECK(s.call<&Sink::doubles>(1000, dvec(1000)) == 0);
  CHECK(s.call<&Sink::text>(5, std::string("abcde")) == 0);
  CHECK(s.call<&Sink::doubles>(0, std::vector<double>()) == 0);
  CHECK(s.call<&Sink::text>(0, std::string()) == 0);
  check_placed(0, "small and empty values");
  // Just at the threshold: 1024 doubles are 8 KiB.
  CHECK(s.call<&Sink::doubles>(1024, dvec(1024)) == 0);
  check_placed(1, "8 KiB std::vector<double>");

  // A large vector that is not the last argument is not placed.
  CHECK(s.call<&Sink::doubles_first>(dvec(nd), nd) == 0);
  check_placed(0, "large vector, not last");
  // Two large values: the values before a placed one must take at most
  // 64 KiB (docs/design.md), so neither is placed.
  CHECK(s.call<&Sink::two>(text.substr(0, nd), nd, dvec(nd)) == 0);
  check_placed(0, "large string then large vector");
  // A 4000-byte string before it: placed, except over ucx, which places
  // only when the values before take at most 1 KiB.
  CHECK(s.call<&Sink::two>(text.substr(0, 4000), nd, dvec(nd)) == 0);
  check_placed(module == "ucx" ? 0 : 1, "4000-byte string then large vector");

  // A one-way call's argument: the call returns once the runtime is done
  // with it, the method keeps its verdict. A one-way call's method may run
  // after a later call's (both threaded handlers): asked until it ran.
  s.call<&Sink::keep>(nd, dvec(nd));
  uint64_t verdict = s.call<&Sink::kept>();
  for (int ms = 0; ms < 30000 && verdict == ~uint64_t(0); ms++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    verdict = s.call<&Sink::kept>();
  }
  CHECK(verdict == 0);
  check_placed(1, "one-way 1 MiB std::vector<double>");

  // Asynchronous calls (arguments copied into the request) are placed too.
  auto f1 = ccxx::async<&Sink::doubles>(s, nd, dvec(nd));
  auto f2 = ccxx::async<&Sink::ints>(s, ni, iv);
  CHECK(f1.get() == 0);
  CHECK(f2.get() == 0);
  check_placed(2, "two asynchronous calls");

  // A placed request whose operation does not read its last argument: a
  // one-way request (null reply gp) of an operation with a result, which
  // on_op refuses before the arguments. The object made for it is freed
  // (counted lost), not kept.
  if (expect_placed) {
    ccxx::placement_stats before = s.call<&Sink::stats>();
    nx_buffer_t *b;
    nx_gp_t none = NX_GP_NULL;
    std::vector<double> v = dvec(nd);
    CHECK(nx_rsr_init(&b, s.gp(), nx_handler_id("ccxx.op"), 64) == 0);
    CHECK(nx_put_uint32(b, ccxx::detail::method_op<&Sink::doubles>::id) == 0);
    CHECK(nx_put_gp(b, &none) == 0);
    CHECK(nx_put_uint64(b, nd) == 0);
    CHECK(nx_put_uint64(b, nd) == 0);
    CHECK(nx_put_double_array(b, v.data(), nd) == 0);
    CHECK(nx_rsr_send(b) == 0);
    ccxx::placement_stats st = s.call<&Sink::stats>();
    for (int ms = 0; ms < 30000 && st.lost == before.lost; ms++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = s.call<&Sink::stats>();
    }
    printf("refused placed request: %llu lost, %llu outstanding\n",
           (unsigned long long)(st.lost - before.lost),
           (unsigned long long)st.outstanding);
    CHECK(st.lost - before.lost == 1);
    CHECK(st.outstanding == 0);
    CHECK(st.placed == before.placed);
  }

  // A sender that dies midway: this process's object receives 64 MiB
  // from the remote one, which is killed once the object for it is made.
  // Either the whole value came first (the method ran) or the object is
  // freed when the loss is reported; nothing stays outstanding.
  bool mpi = where.spec().compare(0, 3, "mpi") == 0;
  if (where.in_process() || mpi || !expect_placed || module == "ucx") {
    printf("sender death: skipped (%s)\n",
           where.in_process() ? "in-process objects do not die alone"
           : mpi ? "Open MPI aborts the job when a spawned child dies"
           : module == "ucx"
               ? "over ucx's shared memory a sender killed mid-message "
                 "can stall later replies from others (docs/ucx.md, "
                 "Limitations)"
               : "the module may not place");
  } else {
    Sink local;
    ccxx::global_ptr<Sink> me(&local);
    ccxx::placement_stats before = ccxx::placement();
    ccxx::global_ptr<Sink> doomed = ccxx::create<Sink>(where);
    int pid = doomed.call<&Sink::pid>();
    doomed.call<&Sink::blast>(me, (uint64_t(64) << 20) / sizeof(double));
    ccxx::placement_stats st = ccxx::placement();
    for (int ms = 0; ms < 60000 && st.outstanding == 0 &&
                     st.placed == before.placed && st.lost == before.lost;
         ms++) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      st = ccxx::placement();
    }
    CHECK(kill(pid, SIGKILL) == 0);
    for (int ms = 0; ms < 30000 && ccxx::placement().outstanding != 0; ms++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    st = ccxx::placement();
    printf("sender death: %llu placed, %llu lost, %llu outstanding\n",
           (unsigned long long)(st.placed - before.placed),
           (unsigned long long)(st.lost - before.lost),
           (unsigned long long)st.outstanding);
    CHECK(st.outstanding == 0);
    CHECK(st.placed - before.placed + st.lost - before.lost == 1);
    ccxx::destroy(doomed);
  }

  CHECK(ccxx::destroy(s) == 0);
  printf("%s: %d failed checks\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}

int main(int argc, char **argv) { return ccxx::start(argc, argv, run); }
