// Tests of the thread module (nexus/src/threads/posix/thread.c behind
// nexus/thread.h): threads, error-checking mutexes, condition variables and
// keys, first without the runtime, then with nx_init's progress hooks
// installed.
//
// Catch2 v2 assertions are not thread-safe, so worker threads only record
// what they saw; the main thread asserts. Workers block with nx_cond_wait;
// the main thread waits for them with a generous timed wait, so a lost
// wake-up shows as a failed check rather than a hung test.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <vector>

#include "nexus.h"
#include "runtime_guard.h"

namespace {

// How long the main thread waits for workers before declaring them stuck.
constexpr int STUCK_SECONDS = 30;

// Runs a std::function in an nx thread.
void *run_function(void *arg) {
  (*static_cast<std::function<void()> *>(arg))();
  return nullptr;
}

// Runs `fn` to completion in another thread; returns nx_thread_create's or
// nx_thread_join's error, if any.
int run_in_thread(std::function<void()> fn) {
  nx_thread_t t;
  int rc = nx_thread_create(&t, run_function, &fn);
  if (rc != 0)
    return rc;
  return nx_thread_join(t, nullptr);
}

struct timespec realtime_after_ms(long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec += 1;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

double now_seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) +
         static_cast<double>(ts.tv_nsec) * 1e-9;
}

double to_seconds(const struct timespec &ts) {
  return static_cast<double>(ts.tv_sec) +
         static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Waits (holding `m`) until `pred()` holds or STUCK_SECONDS pass. Returns
// whether the predicate held; every wait's unexpected error goes to `*err`.
bool wait_until(nx_cond_t *c, nx_mutex_t *m, const std::function<bool()> &pred,
                int *err) {
  struct timespec deadline = realtime_after_ms(STUCK_SECONDS * 1000L);
  while (!pred()) {
    int rc = nx_cond_timedwait(c, m, &deadline);
    if (rc == NX_ETIMEDOUT)
      return pred();
    if (rc != 0 && *err == 0)
      *err = rc;
  }
  return true;
}

// Keeps the first non-zero code.
void note(int *err, int rc) {
  if (rc != 0 && *err == 0)
    *err = rc;
}

} // namespace

/* Threads. */

static void *add_one(void *arg) {
  return reinterpret_cast<void *>(reinterpret_cast<intptr_t>(arg) + 1);
}

static void exit_deep(int depth) {
  if (depth == 0)
    nx_thread_exit(reinterpret_cast<void *>(intptr_t{7}));
  else
    exit_deep(depth - 1);
}

static void *exits_early(void *) {
  exit_deep(3);
  return reinterpret_cast<void *>(intptr_t{-1}); // not reached
}

TEST_CASE("a thread runs and join returns its result", "[thread]") {
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, add_one,
                           reinterpret_cast<void *>(intptr_t{41})) == 0);
  void *result = nullptr;
  REQUIRE(nx_thread_join(t, &result) == 0);
  CHECK(reinterpret_cast<intptr_t>(result) == 42);

  // A NULL result pointer is allowed.
  REQUIRE(nx_thread_create(&t, add_one, nullptr) == 0);
  CHECK(nx_thread_join(t, nullptr) == 0);
}

TEST_CASE("nx_thread_exit ends the thread with its result", "[thread]") {
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, exits_early, nullptr) == 0);
  void *result = nullptr;
  REQUIRE(nx_thread_join(t, &result) == 0);
  CHECK(reinterpret_cast<intptr_t>(result) == 7);
}

TEST_CASE("many threads run concurrently and each result comes back",
          "[thread]") {
  constexpr int N = 16;
  nx_thread_t t[N];
  for (int i = 0; i < N; i++)
    REQUIRE(nx_thread_create(&t[i], add_one,
                             reinterpret_cast<void *>(intptr_t{i * 10})) == 0);
  for (int i = 0; i < N; i++) {
    void *result = nullptr;
    REQUIRE(nx_thread_join(t[i], &result) == 0);
    CHECK(reinterpret_cast<intptr_t>(result) == i * 10 + 1);
  }
}

TEST_CASE("nx_thread_create rejects NULL arguments", "[thread]") {
  nx_thread_t t;
  CHECK(nx_thread_create(&t, nullptr, nullptr) == NX_EINVAL);
  CHECK(nx_thread_create(nullptr, add_one, nullptr) == NX_EINVAL);
}

static void *join_self(void *) {
  int rc = nx_thread_join(nx_thread_self(), nullptr);
  return reinterpret_cast<void *>(static_cast<intptr_t>(rc));
}

TEST_CASE("joining oneself returns NX_EINVAL", "[thread]") {
  CHECK(nx_thread_join(nx_thread_self(), nullptr) == NX_EINVAL);

  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, join_self, nullptr) == 0);
  void *result = nullptr;
  REQUIRE(nx_thread_join(t, &result) == 0);
  CHECK(static_cast<int>(reinterpret_cast<intptr_t>(result)) == NX_EINVAL);
}

struct self_record {
  nx_thread_t self;
  int equal_to_itself;
};

static void *record_self(void *arg) {
  auto *r = static_cast<self_record *>(arg);
  r->self = nx_thread_self();
  r->equal_to_itself = nx_thread_equal(nx_thread_self(), r->self);
  return nullptr;
}

TEST_CASE("nx_thread_self names the caller and nx_thread_equal compares",
          "[thread]") {
  nx_thread_t me = nx_thread_self();
  CHECK(nx_thread_equal(me, nx_thread_self()) == 1);

  self_record rec{};
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, record_self, &rec) == 0);
  nx_thread_t handle = t;
  REQUIRE(nx_thread_join(t, nullptr) == 0);
  CHECK(rec.equal_to_itself == 1);
  CHECK(nx_thread_equal(rec.self, handle) == 1);
  CHECK(nx_thread_equal(me, handle) == 0);
  CHECK(nx_thread_equal(handle, me) == 0);
}

TEST_CASE("nx_thread_yield returns", "[thread]") {
  for (int i = 0; i < 10; i++)
    nx_thread_yield();
  SUCCEED();
}

/* Mutexes. */

TEST_CASE("mutex lock, trylock and unlock", "[mutex]") {
  nx_mutex_t m;
  REQUIRE(nx_mutex_init(&m) == 0);

  SECTION("trylock of a free mutex succeeds") {
    CHECK(nx_mutex_trylock(&m) == 0);
    CHECK(nx_mutex_unlock(&m) == 0);
  }

  SECTION("trylock from another thread returns NX_EBUSY while held") {
    REQUIRE(nx_mutex_lock(&m) == 0);
    int rc = 1;
    REQUIRE(run_in_thread([&] { rc = nx_mutex_trylock(&m); }) == 0);
    CHECK(rc == NX_EBUSY);
    CHECK(nx_mutex_unlock(&m) == 0);

    // Free again: another thread can take and give it back.
    int rc_lock = 1, rc_unlock = 1;
    REQUIRE(run_in_thread([&] {
              rc_lock = nx_mutex_trylock(&m);
              rc_unlock = nx_mutex_unlock(&m);
            }) == 0);
    CHECK(rc_lock == 0);
    CHECK(rc_unlock == 0);
  }

  SECTION("unlock by a thread that does not hold it returns NX_EINVAL") {
    REQUIRE(nx_mutex_lock(&m) == 0);
    int rc = 1;
    REQUIRE(run_in_thread([&] { rc = nx_mutex_unlock(&m); }) == 0);
    CHECK(rc == NX_EINVAL);
    // Still held by us: another thread cannot take it, and we can unlock.
    int rc_try = 1;
    REQUIRE(run_in_thread([&] { rc_try = nx_mutex_trylock(&m); }) == 0);
    CHECK(rc_try == NX_EBUSY);
    CHECK(nx_mutex_unlock(&m) == 0);
  }

  SECTION("unlock of a mutex nobody holds returns NX_EINVAL") {
    CHECK(nx_mutex_unlock(&m) == NX_EINVAL);
    // And changed nothing: the mutex is still free.
    CHECK(nx_mutex_trylock(&m) == 0);
    CHECK(nx_mutex_unlock(&m) == 0);
  }

  SECTION("relocking a mutex one holds returns NX_EINVAL and changes nothing") {
    REQUIRE(nx_mutex_lock(&m) == 0);
    CHECK(nx_mutex_lock(&m) == NX_EINVAL);
    CHECK(nx_mutex_trylock(&m) == NX_EBUSY); // held, if by us
    // Still held exactly once: one unlock frees it, a second is refused.
    CHECK(nx_mutex_unlock(&m) == 0);
    CHECK(nx_mutex_unlock(&m) == NX_EINVAL);
    int rc_lock = 1, rc_unlock = 1;
    REQUIRE(run_in_thread([&] {
              rc_lock = nx_mutex_trylock(&m);
              rc_unlock = nx_mutex_unlock(&m);
            }) == 0);
    CHECK(rc_lock == 0);
    CHECK(rc_unlock == 0);
  }

  SECTION("lock blocks until the holder unlocks") {
    // The holder thread keeps the mutex until the main thread sees it held.
    nx_mutex_t gate;
    nx_cond_t cv;
    REQUIRE(nx_mutex_init(&gate) == 0);
    REQUIRE(nx_cond_init(&cv) == 0);
    int stage = 0, err = 0;
    std::function<void()> holder = [&] {
      note(&err, nx_mutex_lock(&m));
      note(&err, nx_mutex_lock(&gate));
      stage = 1;
      note(&err, nx_cond_broadcast(&cv));
      while (stage != 2)
        note(&err, nx_cond_wait(&cv, &gate));
      note(&err, nx_mutex_unlock(&gate));
      note(&err, nx_mutex_unlock(&m));
    };
    nx_thread_t t;
    REQUIRE(nx_thread_create(&t, run_function, &holder) == 0);
    REQUIRE(nx_mutex_lock(&gate) == 0);
    int werr = 0;
    bool held = wait_until(
        &cv, &gate, [&] { return stage == 1; }, &werr);
    CHECK(held);
    CHECK(nx_mutex_trylock(&m) == NX_EBUSY);
    stage = 2;
    REQUIRE(nx_cond_broadcast(&cv) == 0);
    REQUIRE(nx_mutex_unlock(&gate) == 0);
    CHECK(nx_mutex_lock(&m) == 0); // waits for the holder
    CHECK(nx_mutex_unlock(&m) == 0);
    REQUIRE(nx_thread_join(t, nullptr) == 0);
    CHECK(err == 0);
    CHECK(werr == 0);
    CHECK(nx_cond_destroy(&cv) == 0);
    CHECK(nx_mutex_destroy(&gate) == 0);
  }

  CHECK(nx_mutex_destroy(&m) == 0);
}

TEST_CASE("mutex calls reject NULL", "[mutex]") {
  CHECK(nx_mutex_init(nullptr) == NX_EINVAL);
  CHECK(nx_mutex_destroy(nullptr) == NX_EINVAL);
  CHECK(nx_mutex_lock(nullptr) == NX_EINVAL);
  CHECK(nx_mutex_trylock(nullptr) == NX_EINVAL);
  CHECK(nx_mutex_unlock(nullptr) == NX_EINVAL);
}

TEST_CASE("a mutex makes increments from several threads exclusive",
          "[mutex]") {
  constexpr int THREADS = 4;
  constexpr int ITERS = 50000;
  nx_mutex_t m;
  REQUIRE(nx_mutex_init(&m) == 0);
  long counter = 0;
  int err = 0; // written under m
  std::function<void()> work = [&] {
    for (int i = 0; i < ITERS; i++) {
      int rc = nx_mutex_lock(&m);
      if (rc != 0) {
        continue; // cannot record safely without the lock; counter shows it
      }
      counter++;
      note(&err, nx_mutex_unlock(&m));
    }
  };
  nx_thread_t t[THREADS];
  for (auto &th : t)
    REQUIRE(nx_thread_create(&th, run_function, &work) == 0);
  for (auto &th : t)
    REQUIRE(nx_thread_join(th, nullptr) == 0);
  CHECK(counter == long{THREADS} * ITERS);
  CHECK(err == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

TEST_CASE("nx_mutex_destroy refuses a held mutex with NX_EBUSY", "[mutex]") {
  nx_mutex_t m;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_mutex_lock(&m) == 0);
  CHECK(nx_mutex_destroy(&m) == NX_EBUSY);
  CHECK(nx_mutex_unlock(&m) == 0); // still a working mutex
  CHECK(nx_mutex_destroy(&m) == 0);
}

// Whether a thread sleeps in the kernel on `m`: the mark a sleeper sets in
// the owner field (its low bit, nexus/src/threads/posix/thread.c). White-box:
// it lets the tests below act only once the sleepers' path is taken.
static bool has_sleepers(nx_mutex_t *m) {
  return (__atomic_load_n(&m->owner, __ATOMIC_RELAXED) & 1) != 0;
}

// Waits up to STUCK_SECONDS for `pred`, polling every millisecond.
static bool poll_until(const std::function<bool()> &pred) {
  double end = now_seconds(CLOCK_MONOTONIC) + STUCK_SECONDS;
  while (!pred()) {
    if (now_seconds(CLOCK_MONOTONIC) > end)
      return false;
    struct timespec ms = {0, 1000000L};
    nanosleep(&ms, nullptr);
  }
  return true;
}

TEST_CASE("misuse is refused while threads sleep on the mutex", "[mutex]") {
  nx_mutex_t m;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_mutex_lock(&m) == 0);
  std::atomic<int> done{0};
  int rc_lock = 1, rc_unlock = 1;
  std::function<void()> waiter = [&] {
    rc_lock = nx_mutex_lock(&m); // sleeps until the main thread unlocks
    rc_unlock = nx_mutex_unlock(&m);
    done = 1;
  };
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, run_function, &waiter) == 0);
  REQUIRE(poll_until([&] { return has_sleepers(&m); }));
  // The owner is still the owner, with a sleeper marked.
  CHECK(nx_mutex_lock(&m) == NX_EINVAL);
  CHECK(nx_mutex_trylock(&m) == NX_EBUSY);
  int rc_other = 1;
  REQUIRE(run_in_thread([&] { rc_other = nx_mutex_unlock(&m); }) == 0);
  CHECK(rc_other == NX_EINVAL);
  CHECK(nx_mutex_unlock(&m) == 0); // wakes the sleeper
  REQUIRE(poll_until([&] { return done.load() == 1; }));
  REQUIRE(nx_thread_join(t, nullptr) == 0);
  CHECK(rc_lock == 0);
  CHECK(rc_unlock == 0);
  CHECK(nx_mutex_unlock(&m) == NX_EINVAL); // free again
  CHECK(nx_mutex_destroy(&m) == 0);
}

TEST_CASE("every thread asleep on a mutex gets it in turn", "[mutex]") {
  // Each unlock wakes one sleeper; the woken one takes the mutex marked,
  // so that its own unlock wakes the next.
  constexpr int THREADS = 4;
  nx_mutex_t m;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_mutex_lock(&m) == 0);
  std::atomic<int> done{0};
  long counter = 0; // under m
  int err = 0;      // under m
  std::function<void()> worker = [&] {
    int rc = nx_mutex_lock(&m);
    if (rc == 0) {
      counter++;
      note(&err, nx_mutex_unlock(&m));
    }
    done++;
  };
  nx_thread_t t[THREADS];
  for (auto &th : t)
    REQUIRE(nx_thread_create(&th, run_function, &worker) == 0);
  REQUIRE(poll_until([&] { return has_sleepers(&m); }));
  // Give the others time to sleep too (they spin for microseconds first).
  struct timespec pause = {0, 50 * 1000000L};
  nanosleep(&pause, nullptr);
  REQUIRE(nx_mutex_unlock(&m) == 0);
  REQUIRE(poll_until([&] { return done.load() == THREADS; }));
  for (auto &th : t)
    REQUIRE(nx_thread_join(th, nullptr) == 0);
  CHECK(counter == THREADS);
  CHECK(err == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

/* Condition variables. */

TEST_CASE("condition variable calls reject NULL", "[cond]") {
  nx_mutex_t m;
  nx_cond_t c;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&c) == 0);
  struct timespec ts = realtime_after_ms(10);
  CHECK(nx_cond_init(nullptr) == NX_EINVAL);
  CHECK(nx_cond_destroy(nullptr) == NX_EINVAL);
  CHECK(nx_cond_signal(nullptr) == NX_EINVAL);
  CHECK(nx_cond_broadcast(nullptr) == NX_EINVAL);
  REQUIRE(nx_mutex_lock(&m) == 0);
  CHECK(nx_cond_wait(nullptr, &m) == NX_EINVAL);
  CHECK(nx_cond_wait(&c, nullptr) == NX_EINVAL);
  CHECK(nx_cond_timedwait(nullptr, &m, &ts) == NX_EINVAL);
  CHECK(nx_cond_timedwait(&c, nullptr, &ts) == NX_EINVAL);
  CHECK(nx_mutex_unlock(&m) == 0);
  CHECK(nx_cond_destroy(&c) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

TEST_CASE("waiting with a mutex one does not hold returns NX_EINVAL",
          "[cond]") {
  nx_mutex_t m;
  nx_cond_t c;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&c) == 0);
  struct timespec ts = realtime_after_ms(10);
  CHECK(nx_cond_wait(&c, &m) == NX_EINVAL);
  CHECK(nx_cond_timedwait(&c, &m, &ts) == NX_EINVAL);
  // Held by another thread: still not ours to wait with.
  REQUIRE(nx_mutex_lock(&m) == 0);
  int rc_wait = 1;
  REQUIRE(run_in_thread([&] { rc_wait = nx_cond_timedwait(&c, &m, &ts); }) ==
          0);
  CHECK(rc_wait == NX_EINVAL);
  CHECK(nx_mutex_unlock(&m) == 0); // still ours
  CHECK(nx_cond_destroy(&c) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

TEST_CASE("signal and broadcast with nobody waiting are harmless", "[cond]") {
  nx_cond_t c;
  REQUIRE(nx_cond_init(&c) == 0);
  CHECK(nx_cond_signal(&c) == 0);
  CHECK(nx_cond_broadcast(&c) == 0);
  CHECK(nx_cond_destroy(&c) == 0);
}

namespace {

// N consumers take items from a shared queue that the main thread fills one
// at a time with nx_cond_signal; every item is consumed exactly once.
void queue_test() {
  constexpr int CONSUMERS = 3;
  constexpr int ITEMS = 3000;
  nx_mutex_t m;
  nx_cond_t nonempty, drained;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&nonempty) == 0);
  REQUIRE(nx_cond_init(&drained) == 0);
  std::vector<int> queue;
  bool done = false;
  long sum = 0;
  int taken = 0;
  int per_thread[CONSUMERS] = {};
  int err = 0;

  struct arg {
    std::function<void()> fn;
  } args[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++) {
    args[i].fn = [&, i] {
      note(&err, nx_mutex_lock(&m));
      for (;;) {
        while (queue.empty() && !done)
          note(&err, nx_cond_wait(&nonempty, &m));
        if (queue.empty())
          break;
        sum += queue.back();
        queue.pop_back();
        taken++;
        per_thread[i]++;
        if (queue.empty())
          note(&err, nx_cond_signal(&drained));
      }
      note(&err, nx_mutex_unlock(&m));
    };
  }
  nx_thread_t t[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++)
    REQUIRE(nx_thread_create(&t[i], run_function, &args[i].fn) == 0);

  int werr = 0;
  bool all_taken = false;
  for (int i = 1; i <= ITEMS; i++) {
    REQUIRE(nx_mutex_lock(&m) == 0);
    queue.push_back(i);
    REQUIRE(nx_cond_signal(&nonempty) == 0);
    REQUIRE(nx_mutex_unlock(&m) == 0);
  }
  // Every item must be taken with signals alone, before `done` is set.
  REQUIRE(nx_mutex_lock(&m) == 0);
  all_taken = wait_until(
      &drained, &m, [&] { return taken == ITEMS; }, &werr);
  done = true;
  REQUIRE(nx_cond_broadcast(&nonempty) == 0);
  REQUIRE(nx_mutex_unlock(&m) == 0);
  // On failure, `done` and the broadcast still release the consumers.
  CHECK(all_taken);
  for (auto &th : t)
    REQUIRE(nx_thread_join(th, nullptr) == 0);

  CHECK(taken == ITEMS);
  CHECK(sum == long{ITEMS} * (ITEMS + 1) / 2);
  int total = 0;
  for (int n : per_thread)
    total += n;
  CHECK(total == ITEMS);
  CHECK(err == 0);
  CHECK(werr == 0);
  CHECK(nx_cond_destroy(&nonempty) == 0);
  CHECK(nx_cond_destroy(&drained) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

// N threads wait until `go`; one broadcast wakes all of them. The main
// thread broadcasts only once every waiter has announced itself under the
// mutex, so they are all inside nx_cond_wait (or about to re-check `go`).
void broadcast_test() {
  constexpr int WAITERS = 4;
  // Heap state, leaked on failure: stuck waiters may still point into it.
  struct state {
    nx_mutex_t m;
    nx_cond_t go_cv, main_cv;
    int waiting = 0, woke = 0, err = 0;
    bool go = false;
    std::function<void()> fn;
  };
  auto *s = new state;
  REQUIRE(nx_mutex_init(&s->m) == 0);
  REQUIRE(nx_cond_init(&s->go_cv) == 0);
  REQUIRE(nx_cond_init(&s->main_cv) == 0);
  s->fn = [s] {
    note(&s->err, nx_mutex_lock(&s->m));
    s->waiting++;
    note(&s->err, nx_cond_signal(&s->main_cv));
    while (!s->go)
      note(&s->err, nx_cond_wait(&s->go_cv, &s->m));
    s->woke++;
    note(&s->err, nx_cond_signal(&s->main_cv));
    note(&s->err, nx_mutex_unlock(&s->m));
  };
  nx_thread_t t[WAITERS];
  for (auto &th : t)
    REQUIRE(nx_thread_create(&th, run_function, &s->fn) == 0);

  int werr = 0;
  REQUIRE(nx_mutex_lock(&s->m) == 0);
  bool all_waiting = wait_until(
      &s->main_cv, &s->m, [&] { return s->waiting == WAITERS; }, &werr);
  s->go = true;
  REQUIRE(nx_cond_broadcast(&s->go_cv) == 0);
  bool all_woke = wait_until(
      &s->main_cv, &s->m, [&] { return s->woke == WAITERS; }, &werr);
  int woke = s->woke;
  REQUIRE(nx_mutex_unlock(&s->m) == 0);
  REQUIRE(all_waiting);
  if (!all_woke)
    FAIL("one broadcast woke " << woke << " of " << WAITERS << " waiters");

  for (auto &th : t)
    REQUIRE(nx_thread_join(th, nullptr) == 0);
  CHECK(s->woke == WAITERS);
  CHECK(s->err == 0);
  CHECK(werr == 0);
  CHECK(nx_cond_destroy(&s->go_cv) == 0);
  CHECK(nx_cond_destroy(&s->main_cv) == 0);
  CHECK(nx_mutex_destroy(&s->m) == 0);
  delete s;
}

// Two threads hand a turn back and forth `rounds` times with nx_cond_wait
// and nx_cond_signal on one condition variable.
void ping_pong(int rounds) {
  nx_mutex_t m;
  nx_cond_t cv;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&cv) == 0);
  int turn = 0;
  int count[2] = {0, 0};
  int err[2] = {0, 0};
  std::function<void()> player[2];
  for (int me = 0; me < 2; me++) {
    player[me] = [&, me] {
      for (int i = 0; i < rounds; i++) {
        note(&err[me], nx_mutex_lock(&m));
        while (turn != me)
          note(&err[me], nx_cond_wait(&cv, &m));
        turn = 1 - me;
        count[me]++;
        note(&err[me], nx_cond_signal(&cv));
        note(&err[me], nx_mutex_unlock(&m));
      }
    };
  }
  nx_thread_t t[2];
  REQUIRE(nx_thread_create(&t[0], run_function, &player[0]) == 0);
  REQUIRE(nx_thread_create(&t[1], run_function, &player[1]) == 0);
  REQUIRE(nx_thread_join(t[0], nullptr) == 0);
  REQUIRE(nx_thread_join(t[1], nullptr) == 0);
  CHECK(count[0] == rounds);
  CHECK(count[1] == rounds);
  CHECK(turn == 0);
  CHECK(err[0] == 0);
  CHECK(err[1] == 0);
  CHECK(nx_cond_destroy(&cv) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

// A timed wait nobody signals returns NX_ETIMEDOUT once the absolute
// deadline has passed, holding the mutex again.
void timedwait_timeout_test() {
  nx_mutex_t m;
  nx_cond_t cv;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&cv) == 0);

  const long wait_ms = 200;
  REQUIRE(nx_mutex_lock(&m) == 0);
  double start = now_seconds(CLOCK_MONOTONIC);
  struct timespec deadline = realtime_after_ms(wait_ms);
  int rc;
  int spurious = 0;
  // A wait may return 0 early (spuriously): the predicate is "never", so
  // wait again, but give up after 5 s so a wait that never times out fails
  // instead of hanging.
  while ((rc = nx_cond_timedwait(&cv, &m, &deadline)) == 0 &&
         now_seconds(CLOCK_MONOTONIC) - start < 5.0)
    spurious++;
  double elapsed = now_seconds(CLOCK_MONOTONIC) - start;
  double real_now = now_seconds(CLOCK_REALTIME);
  CHECK(rc == NX_ETIMEDOUT);
  INFO("elapsed " << elapsed << " s, spurious wake-ups " << spurious);
  CHECK(elapsed >= (wait_ms - 20) / 1000.0);
  CHECK(real_now >= to_seconds(deadline) - 0.01);
  CHECK(elapsed < 5.0);
  // The mutex is held again: another thread cannot take it, we can unlock.
  int rc_try = 1;
  REQUIRE(run_in_thread([&] { rc_try = nx_mutex_trylock(&m); }) == 0);
  CHECK(rc_try == NX_EBUSY);
  CHECK(nx_mutex_unlock(&m) == 0);

  // A deadline already in the past times out at once (spurious wake-ups
  // aside: waited again, for at most 5 s).
  auto times_out_at_once = [&](const struct timespec *when) {
    double t0 = now_seconds(CLOCK_MONOTONIC);
    int r;
    while ((r = nx_cond_timedwait(&cv, &m, when)) == 0 &&
           now_seconds(CLOCK_MONOTONIC) - t0 < 5.0) {
    }
    CHECK(r == NX_ETIMEDOUT);
    CHECK(now_seconds(CLOCK_MONOTONIC) - t0 < 5.0);
  };
  REQUIRE(nx_mutex_lock(&m) == 0);
  struct timespec past = realtime_after_ms(0);
  past.tv_sec -= 1;
  times_out_at_once(&past);
  // So does one before the epoch (a negative tv_sec), which the kernel's
  // futex refuses instead of timing out.
  struct timespec before_epoch = {-1, 0};
  times_out_at_once(&before_epoch);
  CHECK(nx_mutex_unlock(&m) == 0);

  CHECK(nx_cond_destroy(&cv) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

// A timed wait that is signalled well before its deadline returns 0.
void timedwait_signalled_test() {
  nx_mutex_t m;
  nx_cond_t cv, ready_cv;
  REQUIRE(nx_mutex_init(&m) == 0);
  REQUIRE(nx_cond_init(&cv) == 0);
  REQUIRE(nx_cond_init(&ready_cv) == 0);
  bool waiting = false, flag = false, timed_out = false;
  int err = 0;
  std::function<void()> waiter = [&] {
    struct timespec deadline = realtime_after_ms(STUCK_SECONDS * 1000L);
    note(&err, nx_mutex_lock(&m));
    waiting = true;
    note(&err, nx_cond_signal(&ready_cv));
    while (!flag) {
      int rc = nx_cond_timedwait(&cv, &m, &deadline);
      if (rc == NX_ETIMEDOUT) {
        timed_out = true;
        break;
      }
      note(&err, rc);
    }
    note(&err, nx_mutex_unlock(&m));
  };
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, run_function, &waiter) == 0);
  int werr = 0;
  REQUIRE(nx_mutex_lock(&m) == 0);
  bool ready = wait_until(
      &ready_cv, &m, [&] { return waiting; }, &werr);
  flag = true;
  REQUIRE(nx_cond_signal(&cv) == 0);
  REQUIRE(nx_mutex_unlock(&m) == 0);
  REQUIRE(nx_thread_join(t, nullptr) == 0);
  CHECK(ready);
  CHECK_FALSE(timed_out);
  CHECK(err == 0);
  CHECK(werr == 0);
  CHECK(nx_cond_destroy(&cv) == 0);
  CHECK(nx_cond_destroy(&ready_cv) == 0);
  CHECK(nx_mutex_destroy(&m) == 0);
}

} // namespace

TEST_CASE("signal wakes consumers of a queue", "[cond]") { queue_test(); }

TEST_CASE("broadcast wakes every waiter", "[cond]") { broadcast_test(); }

TEST_CASE("wait/signal ping-pong without the runtime", "[cond]") {
  ping_pong(2000);
}

TEST_CASE("timed wait returns NX_ETIMEDOUT after the deadline", "[cond]") {
  timedwait_timeout_test();
}

TEST_CASE("timed wait returns 0 when signalled before the deadline", "[cond]") {
  timedwait_signalled_test();
}

/* Thread-specific keys. */

namespace {
std::atomic<int> dtor_calls{0};
std::atomic<void *> dtor_value{nullptr};

void count_dtor(void *v) {
  dtor_calls.fetch_add(1);
  dtor_value.store(v);
}

struct key_probe {
  nx_key_t key;
  void *value;
  void *got_before;
  void *got_after;
  int set_rc;
  bool use_exit;
};

void *key_thread(void *arg) {
  auto *p = static_cast<key_probe *>(arg);
  p->got_before = nx_key_get(p->key);
  p->set_rc = nx_key_set(p->key, p->value);
  p->got_after = nx_key_get(p->key);
  if (p->use_exit)
    nx_thread_exit(nullptr);
  return nullptr;
}
} // namespace

TEST_CASE("thread-specific keys", "[key]") {
  dtor_calls = 0;
  dtor_value = nullptr;
  nx_key_t key;
  REQUIRE(nx_key_create(&key, count_dtor) == 0);

  SECTION("a value is per thread, and the destructor runs at thread exit") {
    int main_value = 1, thread_value = 2;
    CHECK(nx_key_get(key) == nullptr);
    REQUIRE(nx_key_set(key, &main_value) == 0);
    CHECK(nx_key_get(key) == &main_value);

    key_probe p{key, &thread_value, nullptr, nullptr, 1, false};
    nx_thread_t t;
    REQUIRE(nx_thread_create(&t, key_thread, &p) == 0);
    REQUIRE(nx_thread_join(t, nullptr) == 0);
    CHECK(p.got_before == nullptr); // a new thread starts with NULL
    CHECK(p.set_rc == 0);
    CHECK(p.got_after == &thread_value);
    CHECK(dtor_calls.load() == 1);
    CHECK(dtor_value.load() == &thread_value);
    // The main thread's value is untouched.
    CHECK(nx_key_get(key) == &main_value);
    REQUIRE(nx_key_set(key, nullptr) == 0);
    CHECK(nx_key_get(key) == nullptr);
  }

  SECTION("the destructor also runs when the thread calls nx_thread_exit") {
    int thread_value = 3;
    key_probe p{key, &thread_value, nullptr, nullptr, 1, true};
    nx_thread_t t;
    REQUIRE(nx_thread_create(&t, key_thread, &p) == 0);
    REQUIRE(nx_thread_join(t, nullptr) == 0);
    CHECK(p.set_rc == 0);
    CHECK(dtor_calls.load() == 1);
    CHECK(dtor_value.load() == &thread_value);
  }

  SECTION("the destructor does not run for a NULL value") {
    key_probe p{key, nullptr, nullptr, nullptr, 1, false};
    nx_thread_t t;
    REQUIRE(nx_thread_create(&t, key_thread, &p) == 0);
    REQUIRE(nx_thread_join(t, nullptr) == 0);
    CHECK(p.set_rc == 0);
    CHECK(p.got_after == nullptr);
    CHECK(dtor_calls.load() == 0);
  }

  CHECK(nx_key_delete(key) == 0);
}

TEST_CASE("two keys hold separate values; a key may have no destructor",
          "[key]") {
  nx_key_t a, b;
  REQUIRE(nx_key_create(&a, nullptr) == 0);
  REQUIRE(nx_key_create(&b, nullptr) == 0);
  int x = 0, y = 0;
  REQUIRE(nx_key_set(a, &x) == 0);
  REQUIRE(nx_key_set(b, &y) == 0);
  CHECK(nx_key_get(a) == &x);
  CHECK(nx_key_get(b) == &y);

  // A thread that sets a value in a destructor-less key exits cleanly.
  key_probe p{a, &y, nullptr, nullptr, 1, false};
  nx_thread_t t;
  REQUIRE(nx_thread_create(&t, key_thread, &p) == 0);
  REQUIRE(nx_thread_join(t, nullptr) == 0);
  CHECK(p.set_rc == 0);
  CHECK(p.got_after == &y);
  CHECK(nx_key_get(a) == &x);

  REQUIRE(nx_key_set(a, nullptr) == 0);
  REQUIRE(nx_key_set(b, nullptr) == 0);
  CHECK(nx_key_delete(a) == 0);
  CHECK(nx_key_delete(b) == 0);
}

TEST_CASE("nx_key_create rejects a NULL key", "[key]") {
  CHECK(nx_key_create(nullptr, nullptr) == NX_EINVAL);
}

/* With the runtime: waits go through the progress hooks. */

TEST_CASE("with nx_init: 10,000 wait/signal round trips", "[cond][runtime]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  ping_pong(10000);
  CHECK(rt.finalize() == 0);
}

TEST_CASE("with nx_init: broadcast, queue and timed waits", "[cond][runtime]") {
  runtime_guard rt;
  REQUIRE(rt.init_rc() == 0);
  SECTION("broadcast") { broadcast_test(); }
  SECTION("queue") { queue_test(); }
  SECTION("timed wait times out") { timedwait_timeout_test(); }
  SECTION("timed wait signalled") { timedwait_signalled_test(); }
  SECTION("contended mutex") {
    nx_mutex_t m;
    REQUIRE(nx_mutex_init(&m) == 0);
    long counter = 0;
    std::function<void()> work = [&] {
      for (int i = 0; i < 20000; i++) {
        if (nx_mutex_lock(&m) != 0)
          continue;
        counter++;
        nx_mutex_unlock(&m);
      }
    };
    nx_thread_t t[3];
    for (auto &th : t)
      REQUIRE(nx_thread_create(&th, run_function, &work) == 0);
    for (auto &th : t)
      REQUIRE(nx_thread_join(th, nullptr) == 0);
    CHECK(counter == 60000);
    CHECK(nx_mutex_destroy(&m) == 0);
  }
  CHECK(rt.finalize() == 0);
}
