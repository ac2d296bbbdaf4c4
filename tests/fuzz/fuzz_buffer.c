/* libFuzzer target: the buffer getters (nexus/src/buffers/buffer.c, gp.c) on
 * arbitrary bytes. The first byte picks the format; each following pair of
 * bytes picks a getter (every type, its array form, bytes, gps, gets in
 * place) and an array count; the rest is the buffer. A getter may fail,
 * never read out of bounds or crash; a get in place gives aligned values
 * equal to what a copying get then reads. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nexus.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* gps need the runtime (descriptor lists); scripts/fuzz points
   * NX_PROTO_PATH at the build's local module. */
  setenv("NX_PROTOCOLS", "local", 0);
  setenv("NX_PROGRESS", "poll", 0);
  NXT_ASSERT(nx_init(NULL, NULL) == 0);
  return 0;
}

#define STEPS 16

/* A get in place of `n` elements of `size` bytes; on success the pointer
 * is aligned, and a copying get of the same array reads the same bytes. */
static void in_place(nx_buffer_t *b, int which, size_t n, void *copy) {
  const void *p = NULL;
  size_t size = which == 0 ? 2 : which == 1 ? 8 : 1;
  size_t before = nx_buffer_remaining(b);
  int r = which == 0   ? nx_get_int16_array_ptr(b, (const int16_t **)&p, n)
          : which == 1 ? nx_get_double_array_ptr(b, (const double **)&p, n)
                       : nx_get_bytes_ptr(b, &p, n);
  if (r != 0)
    return;
  NXT_ASSERT((uintptr_t)p % size == 0);
  /* Step back over the array and read it again by copy. */
  size_t used = before - nx_buffer_remaining(b);
  size_t at = nx_buffer_length(b) - before;
  nx_buffer_t *again;
  const void *all;
  size_t len;
  if (nx_buffer_bytes(b, &all, &len) != 0 ||
      nx_buffer_from_bytes((const uint8_t *)all + at, used, nx_buffer_format(b),
                           &again) != 0)
    return;
  r = which == 0   ? nx_get_int16_array(again, copy, n)
      : which == 1 ? nx_get_double_array(again, copy, n)
                   : nx_get_bytes(again, copy, n);
  NXT_ASSERT(r == 0);
  NXT_ASSERT(memcmp(copy, p, n * size) == 0);
  nx_buffer_release(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 + 2 * STEPS)
    return 0;
  int fmt = (data[0] & 1) ? NX_FORMAT_BIG : NX_FORMAT_LITTLE;
  const uint8_t *ops = data + 1;
  nx_buffer_t *b;
  if (nx_buffer_from_bytes(data + 1 + 2 * STEPS, size - 1 - 2 * STEPS, fmt,
                           &b) != 0)
    return 0;
  union {
    int8_t i8[64];
    uint8_t u8[64];
    int16_t i16[64];
    uint16_t u16[64];
    int32_t i32[64];
    uint32_t u32[64];
    int64_t i64[64];
    uint64_t u64[64];
    float f[64];
    double d[64];
    char c[64];
  } v;
  for (int i = 0; i < STEPS; i++) {
    size_t n = ops[2 * i + 1] % 65;
    switch (ops[2 * i] % 28) {
    case 0: nx_get_int8(b, v.i8); break;
    case 1: nx_get_uint8(b, v.u8); break;
    case 2: nx_get_int16(b, v.i16); break;
    case 3: nx_get_uint16(b, v.u16); break;
    case 4: nx_get_int32(b, v.i32); break;
    case 5: nx_get_uint32(b, v.u32); break;
    case 6: nx_get_int64(b, v.i64); break;
    case 7: nx_get_uint64(b, v.u64); break;
    case 8: nx_get_float(b, v.f); break;
    case 9: nx_get_double(b, v.d); break;
    case 10: nx_get_char(b, v.c); break;
    case 11: nx_get_int8_array(b, v.i8, n); break;
    case 12: nx_get_uint8_array(b, v.u8, n); break;
    case 13: nx_get_int16_array(b, v.i16, n); break;
    case 14: nx_get_uint16_array(b, v.u16, n); break;
    case 15: nx_get_int32_array(b, v.i32, n); break;
    case 16: nx_get_uint32_array(b, v.u32, n); break;
    case 17: nx_get_int64_array(b, v.i64, n); break;
    case 18: nx_get_uint64_array(b, v.u64, n); break;
    case 19: nx_get_float_array(b, v.f, n); break;
    case 20: nx_get_double_array(b, v.d, n); break;
    case 21: nx_get_char_array(b, v.c, n); break;
    case 22: nx_get_bytes(b, v.u8, n); break;
    case 23: in_place(b, 0, n, v.i16); break;
    case 24: in_place(b, 1, n, v.d); break;
    case 25: in_place(b, 2, n, v.u8); break;
    default: {
      nx_gp_t gp = NX_GP_NULL;
      if (nx_get_gp(b, &gp) == 0) {
        (void)nx_gp_protocol(&gp); /* resolves a route from the list */
        nx_gp_release(&gp);
      }
    }
    }
  }
  nx_buffer_release(b);
  return 0;
}
