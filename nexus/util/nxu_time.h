/* Monotonic time for deadlines and spin budgets, shared by the core and the
 * modules. */
#ifndef NXU_TIME_H
#define NXU_TIME_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC: for intervals only, never dates. */
static inline uint64_t nxu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t nxu_now_ms(void) { return nxu_now_ns() / 1000000u; }

/* The CLOCK_REALTIME time `ns` from now (the timed waits' clock). */
static inline struct timespec nxu_realtime_in(uint64_t ns) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(ns / 1000000000u);
  ts.tv_nsec += (long)(ns % 1000000000u);
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Whether CLOCK_REALTIME has reached `abstime` (the timed waits' clock). */
static inline int nxu_realtime_past(const struct timespec *abstime) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec > abstime->tv_sec ||
         (ts.tv_sec == abstime->tv_sec && ts.tv_nsec >= abstime->tv_nsec);
}

#endif /* NXU_TIME_H */
