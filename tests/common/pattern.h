/* The payload pattern every multi-process test and its peer program use: a
 * byte is a function of a seed and its position, so both sides can check
 * contents without keeping a copy. C and C++. */
#ifndef NX_TESTS_PATTERN_H
#define NX_TESTS_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint8_t pattern_byte(uint64_t seed, size_t i) {
  uint64_t x =
      (uint64_t)i * 0x9e3779b97f4a7c15ull + seed * 0xbf58476d1ce4e5b9ull;
  return (uint8_t)((x >> 56) ^ (uint64_t)i);
}

/* Bytes i to i + 7 of the pattern as one word laid out in memory as they
 * are: fill and check read and write a word at a time, since a byte at a
 * time (the tests are built at -O0, and ThreadSanitizer checks each access)
 * took a large part of the multi-process tests' time for payloads of
 * megabytes. The bytes are pattern_byte's, whatever the byte order. */
static inline uint64_t pattern_word(uint64_t seed, size_t i) {
  uint64_t w = 0;
  for (unsigned k = 0; k < 8; k++) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    unsigned shift = 8 * (7 - k);
#else
    unsigned shift = 8 * k;
#endif
    w |= (uint64_t)pattern_byte(seed, i + k) << shift;
  }
  return w;
}

static inline void pattern_fill(uint8_t *p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = pattern_word(seed, i);
    memcpy(p + i, &w, 8);
  }
  for (; i < n; i++)
    p[i] = pattern_byte(seed, i);
}

/* Returns the first wrong position, or n when all are right. */
static inline size_t pattern_check(const uint8_t *p, size_t n, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    if (w != pattern_word(seed, i))
      break;
  }
  for (; i < n; i++)
    if (p[i] != pattern_byte(seed, i))
      return i;
  return n;
}

#endif /* NX_TESTS_PATTERN_H */
