/* Small copies, shared by the core (typed puts and gets, buffers/buf.h) and
 * the modules (a received payload, protocols/ucx): a value or a few, which
 * most RSRs carry, moved inline in two overlapping loads and stores of
 * one width instead of a call into the C library, which costs several
 * times that (docs/performance.md). */
#ifndef NXU_COPY_H
#define NXU_COPY_H

#include <stdint.h>
#include <string.h>

/* Copies `n` bytes from `src` to `dst` (not overlapping): up to 32 inline,
 * more with memcpy. */
static inline void nxu_copy_small(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  if (n >= 16 && n <= 32) {
    uint8_t a[16], b[16];
    memcpy(a, s, 16);
    memcpy(b, s + n - 16, 16);
    memcpy(d, a, 16);
    memcpy(d + n - 16, b, 16);
  } else if (n >= 8 && n < 16) {
    uint64_t a, b;
    memcpy(&a, s, 8);
    memcpy(&b, s + n - 8, 8);
    memcpy(d, &a, 8);
    memcpy(d + n - 8, &b, 8);
  } else if (n >= 4 && n < 8) {
    uint32_t a, b;
    memcpy(&a, s, 4);
    memcpy(&b, s + n - 4, 4);
    memcpy(d, &a, 4);
    memcpy(d + n - 4, &b, 4);
  } else if (n > 0 && n < 4) {
    uint8_t a = s[0], m = s[n / 2], b = s[n - 1];
    d[0] = a;
    d[n / 2] = m;
    d[n - 1] = b;
  } else if (n > 32) {
    memcpy(d, s, n);
  }
}

#endif
