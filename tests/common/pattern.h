/* The payload pattern every multi-process test and its peer program use: a
 * byte is a function of a seed and its position, so both sides can check
 * contents without keeping a copy. C and C++. */
#ifndef NX_TESTS_PATTERN_H
#define NX_TESTS_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint8_t pattern_byte(uint64_t seed, size_t i) {
  uint64_t x =
      (uint64_t)i * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;
  return (uint8_t)((x >> 56) ^ (uint64_t)i);
}

static inline void pattern_fill(uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = pattern_byte(seed, i);
}

/* Returns the first wrong position, or n when all are right. */
static inline size_t pattern_check(const uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern_byte(seed, i))
      return i;
  return n;
}

#endif /* NX_TESTS_PATTERN_H */
