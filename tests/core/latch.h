// A counter that test threads and handlers bump and the test waits on, with
// nexus mutexes and condition variables (so waiting drives progress).
#ifndef NX_TESTS_LATCH_H
#define NX_TESTS_LATCH_H

#include <ctime>

#include "nexus.h"

struct latch {
  nx_mutex_t m;
  nx_cond_t c;
  long count = 0;

  latch() {
    nx_mutex_init(&m);
    nx_cond_init(&c);
  }
  ~latch() {
    nx_cond_destroy(&c);
    nx_mutex_destroy(&m);
  }
  latch(const latch &) = delete;
  latch &operator=(const latch &) = delete;

  void add(long n = 1) {
    nx_mutex_lock(&m);
    count += n;
    nx_cond_broadcast(&c);
    nx_mutex_unlock(&m);
  }

  long get() {
    nx_mutex_lock(&m);
    long v = count;
    nx_mutex_unlock(&m);
    return v;
  }

  // Waits until count >= target or `seconds` pass; returns the count.
  long wait_for(long target, int seconds = 30) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    nx_mutex_lock(&m);
    while (count < target) {
      if (nx_cond_timedwait(&c, &m, &deadline) == NX_ETIMEDOUT)
        break;
    }
    long v = count;
    nx_mutex_unlock(&m);
    return v;
  }
};

#endif // NX_TESTS_LATCH_H
