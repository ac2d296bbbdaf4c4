/* libfm typed values: every intrinsic Fortran type and kind as a message value
 * (type code, count, length, then the values through nexus's typed puts, so
 * byte order converts on receipt). */
#include <stdlib.h>
#include <string.h>

#include "fm_internal.h"

/* How a value is carried: in units of a nexus type. */
enum unit {
  U_NONE = 0,
  U_I8,
  U_I16,
  U_I32,
  U_I64,
  U_F32,
  U_F64,
  U_W128, /* 128 bits as two uint64, low word first */
  U_X87,  /* x87 extended: uint64 significand, uint16 sign and exponent */
  U_CHAR
};

struct type_info {
  uint8_t unit;
  uint8_t units; /* units per value */
  uint8_t size;  /* bytes in memory per value */
};

static const struct type_info types[FM_TYPE_MAX + 1] = {
    [FM_TYPE_INT8] = {U_I8, 1, 1},
    [FM_TYPE_INT16] = {U_I16, 1, 2},
    [FM_TYPE_INT32] = {U_I32, 1, 4},
    [FM_TYPE_INT64] = {U_I64, 1, 8},
    [FM_TYPE_INT128] = {U_W128, 1, 16},
    [FM_TYPE_FLOAT] = {U_F32, 1, 4},
    [FM_TYPE_DOUBLE] = {U_F64, 1, 8},
    [FM_TYPE_REAL10] = {U_X87, 1, 16},
    [FM_TYPE_REAL16] = {U_W128, 1, 16},
    [FM_TYPE_COMPLEX4] = {U_F32, 2, 8},
    [FM_TYPE_COMPLEX8] = {U_F64, 2, 16},
    [FM_TYPE_COMPLEX10] = {U_X87, 2, 32},
    [FM_TYPE_COMPLEX16] = {U_W128, 2, 32},
    [FM_TYPE_LOGICAL1] = {U_I8, 1, 1},
    [FM_TYPE_LOGICAL2] = {U_I16, 1, 2},
    [FM_TYPE_LOGICAL4] = {U_I32, 1, 4},
    [FM_TYPE_LOGICAL8] = {U_I64, 1, 8},
    [FM_TYPE_LOGICAL16] = {U_W128, 1, 16},
    [FM_TYPE_CHAR] = {U_CHAR, 1, 1},
    [FM_TYPE_UCS4] = {U_I32, 1, 4},
    [FM_TYPE_PORT] = {U_NONE, 1, sizeof(fm_port_t)},
};

static _Atomic size_t zerocopy_min = 32768;

size_t fm_zerocopy_min(size_t bytes) {
  return atomic_exchange(&zerocopy_min, bytes);
}

size_t fmi_zerocopy_min(void) { return atomic_load(&zerocopy_min); }

size_t fm_type_size(int type) {
  return type > 0 && type <= FM_TYPE_MAX ? types[type].size : 0;
}

int fmi_type_is_char(int type) {
  return type == FM_TYPE_CHAR || type == FM_TYPE_UCS4;
}

/* Whether a contiguous array of `type` is got by one typed array get of
 * exactly its bytes into the array itself (so its elements may be written
 * there before the get: fm.c, "Receive placement"). Not x87 values (two
 * arrays, moved through a copy) nor characters (cut or padded). */
int fmi_type_placeable(int type) {
  if (type <= 0 || type > FM_TYPE_MAX)
    return 0;
  int u = types[type].unit;
  return u != U_NONE && u != U_X87 && u != U_CHAR;
}

static int big_endian(void) {
  const uint16_t one = 1;
  uint8_t first;
  memcpy(&first, &one, 1);
  return first == 0;
}

/* Which way values go: into a message (the memory is only read) or out of
 * one into memory. */
enum dir { PUT, GET };

/* Swaps the two words of each 128-bit unit (big-endian hosts keep the high
 * word first; the wire has the low word first). */
static void w128_swap(uint64_t *w, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t t = w[2 * i];
    w[2 * i] = w[2 * i + 1];
    w[2 * i + 1] = t;
  }
}

static int w128_move(nx_buffer_t *b, void *v, size_t n, enum dir d) {
  if (d == GET) {
    int r = nx_get_uint64_array(b, v, 2 * n);
    if (r == 0 && big_endian())
      w128_swap(v, n);
    return r;
  }
  if (!big_endian())
    return nx_put_uint64_array(b, v, 2 * n);
  uint64_t *t = malloc(n * 16); /* the caller's values stay as they are */
  if (t == NULL)
    return FM_ENOMEM;
  memcpy(t, v, n * 16);
  w128_swap(t, n);
  int r = nx_put_uint64_array(b, t, 2 * n);
  free(t);
  return r;
}

/* x87 values sit in 16 bytes: significand (8), sign and exponent (2), then
 * padding. They travel as the two parts, each converted. */
static int x87_move(nx_buffer_t *b, void *v, size_t n, enum dir d) {
  uint64_t *sig = malloc(n * 8);
  uint16_t *se = malloc(n * 2);
  int r = FM_ENOMEM;
  if (sig != NULL && se != NULL) {
    for (size_t i = 0; d == PUT && i < n; i++) {
      memcpy(&sig[i], (const char *)v + 16 * i, 8);
      memcpy(&se[i], (const char *)v + 16 * i + 8, 2);
    }
    r = d == PUT ? nx_put_uint64_array(b, sig, n)
                 : nx_get_uint64_array(b, sig, n);
    if (r == 0)
      r = d == PUT ? nx_put_uint16_array(b, se, n)
                   : nx_get_uint16_array(b, se, n);
    for (size_t i = 0; d == GET && r == 0 && i < n; i++) {
      memset((char *)v + 16 * i, 0, 16);
      memcpy((char *)v + 16 * i, &sig[i], 8);
      memcpy((char *)v + 16 * i + 8, &se[i], 2);
    }
  }
  free(sig);
  free(se);
  return r;
}

/* `n` values of `type` between contiguous memory and the message, in the
 * units of their nexus type: one table of units for both ways. */
static int units_move(nx_buffer_t *b, int type, void *v, size_t n, enum dir d) {
  if (type <= 0 || type > FM_TYPE_MAX || types[type].unit == U_NONE)
    return FM_ETYPE;
  size_t u = n * types[type].units;
  if (u == 0)
    return 0;
#define MOVE(t)                                                                \
  (d == PUT ? nx_put_##t##_array(b, v, u) : nx_get_##t##_array(b, v, u))
  switch (types[type].unit) {
  case U_I8: return MOVE(int8);
  case U_I16: return MOVE(int16);
  case U_I32: return MOVE(int32);
  case U_I64: return MOVE(int64);
  case U_F32: return MOVE(float);
  case U_F64: return MOVE(double);
  case U_W128: return w128_move(b, v, u, d);
  case U_X87: return x87_move(b, v, u, d);
  case U_CHAR: return MOVE(char);
  default: return FM_ETYPE;
  }
#undef MOVE
}

int fmi_units_put(nx_buffer_t *b, int type, const void *v, size_t n) {
  return units_move(b, type, (void *)(uintptr_t)v, n, PUT); /* only read */
}

int fmi_units_get(nx_buffer_t *b, int type, void *v, size_t n) {
  return units_move(b, type, v, n, GET);
}

/* By reference (zero copy): the units nexus can send from the caller's
 * memory as they are. 1 when `type` has none (the caller copies), else 0
 * or the put's error; on 0, `fn(arg, ...)` is called exactly once. */
int fmi_units_put_ref(nx_buffer_t *b, int type, const void *v, size_t n,
                      nx_release_fn fn, void *arg) {
  if (type <= 0 || type > FM_TYPE_MAX || n == 0)
    return 1;
  size_t u = n * types[type].units;
  switch (types[type].unit) {
  case U_I8: return nx_put_int8_array_ref(b, v, u, fn, arg);
  case U_I16: return nx_put_int16_array_ref(b, v, u, fn, arg);
  case U_I32: return nx_put_int32_array_ref(b, v, u, fn, arg);
  case U_I64: return nx_put_int64_array_ref(b, v, u, fn, arg);
  case U_F32: return nx_put_float_array_ref(b, v, u, fn, arg);
  case U_F64: return nx_put_double_array_ref(b, v, u, fn, arg);
  case U_CHAR: return nx_put_char_array_ref(b, v, u, fn, arg);
  case U_W128:
    return big_endian() ? 1 : nx_put_uint64_array_ref(b, v, 2 * u, fn, arg);
  default: return 1;
  }
}

int fmi_value_head_put(nx_buffer_t *b, int type, uint64_t count, uint32_t len) {
  int r = nx_put_int32(b, type);
  if (r == 0)
    r = nx_put_uint64(b, count);
  if (r == 0)
    r = nx_put_uint32(b, len);
  return r;
}

/* A value's head: its type, count and length (characters per value for the
 * character types, 0 or more; 1 for the others). A value of another kind (a
 * port) is FM_ETYPE. */
int fmi_value_head_get(nx_buffer_t *b, int *type, uint64_t *count,
                       uint32_t *len) {
  int32_t t;
  int r = nx_get_int32(b, &t);
  if (r == NX_ETYPE)
    return FM_ETYPE;
  if (r == 0)
    r = nx_get_uint64(b, count);
  if (r == 0)
    r = nx_get_uint32(b, len);
  if (r == 0 && (fm_type_size(t) == 0 || t == FM_TYPE_PORT ||
                 (!fmi_type_is_char(t) && *len != 1)))
    r = NX_EPROTO;
  if (r == 0)
    *type = t;
  return r;
}

int fm_put_values(nx_buffer_t *msg, int type, const void *v, size_t count) {
  if (msg == NULL || (v == NULL && count > 0) || fm_type_size(type) == 0 ||
      type == FM_TYPE_PORT)
    return FM_EINVAL;
  int r = fmi_value_head_put(msg, type, count, 1);
  if (r == 0)
    r = fmi_units_put(msg, type, v, count);
  return r;
}

int fm_get_values(nx_buffer_t *msg, int type, void *v, size_t count) {
  if (msg == NULL || (v == NULL && count > 0) || fm_type_size(type) == 0 ||
      type == FM_TYPE_PORT)
    return FM_EINVAL;
  int t;
  uint64_t n;
  uint32_t len;
  int r = fmi_value_head_get(msg, &t, &n, &len);
  if (r != 0)
    return r;
  if (t != type || n * len != count)
    return FM_ETYPE;
  return fmi_units_get(msg, type, v, count);
}
