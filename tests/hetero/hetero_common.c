/* The values, packing and checks both halves of the big-endian test share
 * (hetero.h), and the handlers of the third context a gp is passed on to. */
#include "hetero.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

const char *hx_role = "?";
enum hx_dir hx_incoming = HX_TO_HOST;
nx_gp_t hx_coord = NX_GP_NULL;
int hx_refs_put, hx_refs_released, hx_refs_bad;
static atomic_int failed_total;

const uint32_t hx_fig3_count[HX_FIG3_SIZES] = {0,   1,    8,     64,
                                               512, 4096, 32768, HX_FIG3_MAX};

void hx_expect(struct hx_check *ck, int ok, const char *fmt, ...) {
  ck->checks++;
  if (ok)
    return;
  ck->failed++;
  atomic_fetch_add(&failed_total, 1);
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "hetero %s: FAILED: ", hx_role);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

void hx_rc(struct hx_check *ck, int rc, const char *what) {
  hx_expect(ck, rc == 0, "%s returned %s", what, nx_err_name(rc));
}

int hx_failed(void) { return atomic_load(&failed_total); }

int hx_remote_format(void) {
  const char *same = getenv("HETERO_SAME_ORDER");
  int native = nx_format_native();
  if (same != NULL && strcmp(same, "1") == 0)
    return native;
  return native == NX_FORMAT_LITTLE ? NX_FORMAT_BIG : NX_FORMAT_LITTLE;
}

static const char *format_name(int f) {
  return f == NX_FORMAT_LITTLE ? "LITTLE" : f == NX_FORMAT_BIG ? "BIG" : "?";
}

void hx_check_format(struct hx_check *ck, nx_buffer_t *buf, int want) {
  int got = nx_buffer_format(buf);
  hx_expect(ck, got == want, "nx_buffer_format is %s (%d), expected %s",
            format_name(got), got, format_name(want));
}

/* Hex of a value, in memory order, for messages. */
static const char *hex(const void *p, size_t n, char *out) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n && i < 16; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
  return out;
}

/* Every type, with two scalar values and the elements of its arrays, all
 * chosen so that no value reads the same with its bytes reversed. */
#define HX_TYPES(X)                                                            \
  X(int8, int8_t)                                                              \
  X(uint8, uint8_t)                                                            \
  X(int16, int16_t)                                                            \
  X(uint16, uint16_t)                                                          \
  X(int32, int32_t)                                                            \
  X(uint32, uint32_t)                                                          \
  X(int64, int64_t)                                                            \
  X(uint64, uint64_t)                                                          \
  X(float, float)                                                              \
  X(double, double)                                                            \
  X(char, char)

static const int8_t int8_sc[2] = {-100, 0x7e};
static const uint8_t uint8_sc[2] = {200, 1};
static const int16_t int16_sc[2] = {0x1234, -0x1235};
static const uint16_t uint16_sc[2] = {0xfedc, 0x00ff};
static const int32_t int32_sc[2] = {0x12345678, -123456789};
static const uint32_t uint32_sc[2] = {0xdeadbeefu, 0x01020304u};
static const int64_t int64_sc[2] = {0x0123456789abcdefll,
                                    -0x0123456789abcdefll};
static const uint64_t uint64_sc[2] = {0xfedcba9876543210ull, 0xffull};
static const float float_sc[2] = {3.14159265f, -1.0e-30f};
static const double double_sc[2] = {2.718281828459045, -1.0 / 3.0};
static const char char_sc[2] = {'Z', 'a'};

static int8_t int8_el(uint32_t i) { return (int8_t)(i * 37u - 100u); }
static uint8_t uint8_el(uint32_t i) { return (uint8_t)(i * 41u + 3u); }
static int16_t int16_el(uint32_t i) {
  return (int16_t)(uint16_t)(0x8201u + i * 0x1111u);
}
static uint16_t uint16_el(uint32_t i) {
  return (uint16_t)(0xfe01u - i * 0x0102u);
}
static int32_t int32_el(uint32_t i) {
  return (int32_t)(0x89abcdefu + i * 0x01010101u);
}
static uint32_t uint32_el(uint32_t i) {
  return 0xdeadbeefu ^ (i * 0x11111111u);
}
static int64_t int64_el(uint32_t i) {
  return (int64_t)(0x0123456789abcdefull * (i + 1u));
}
static uint64_t uint64_el(uint32_t i) {
  return 0xfedcba9876543210ull - i * 0x0101010101010101ull;
}
static float float_el(uint32_t i) { return (float)i * 1.5f - 3.25f; }
static double double_el(uint32_t i) { return (double)i / 3.0 - 1.0; }
static char char_el(uint32_t i) { return "nexus-on-s390x!"[i % 15]; }
static uint8_t bytes_el(uint32_t i) { return (uint8_t)(0xa0u + 7u * i); }

#define HX_N 7     /* elements of each copied array */
#define HX_ZC_N 33 /* elements of each array put by reference */

static int pack_scalars(nx_buffer_t *buf) {
  int rc = 0;
  for (int k = 0; k < 2; k++) {
#define PUT(name, type)                                                        \
  if (rc == 0)                                                                 \
    rc = nx_put_##name(buf, name##_sc[k]);
    HX_TYPES(PUT)
#undef PUT
  }
  return rc;
}

static void check_scalars(struct hx_check *ck, nx_buffer_t *buf) {
  char h1[40], h2[40];
  for (int k = 0; k < 2; k++) {
#define GET(name, type)                                                        \
  {                                                                            \
    type v;                                                                    \
    memset(&v, 0x5a, sizeof(v));                                               \
    hx_rc(ck, nx_get_##name(buf, &v), "nx_get_" #name);                        \
    hx_expect(ck, memcmp(&v, &name##_sc[k], sizeof(v)) == 0,                   \
              #name " scalar %d: got %s, expected %s", k,                      \
              hex(&v, sizeof(v), h1), hex(&name##_sc[k], sizeof(v), h2));      \
  }
    HX_TYPES(GET)
#undef GET
  }
}

static int pack_arrays(nx_buffer_t *buf) {
  int rc = 0;
#define PUT(name, type)                                                        \
  if (rc == 0) {                                                               \
    type a[HX_N];                                                              \
    for (uint32_t i = 0; i < HX_N; i++)                                        \
      a[i] = name##_el(i);                                                     \
    rc = nx_put_##name##_array(buf, a, HX_N);                                  \
  }
  HX_TYPES(PUT)
#undef PUT
  uint8_t bytes[13];
  for (uint32_t i = 0; i < sizeof(bytes); i++)
    bytes[i] = bytes_el(i);
  double none = 0;
  if (rc == 0)
    rc = nx_put_bytes(buf, bytes, sizeof(bytes));
  if (rc == 0)
    rc = nx_put_double_array(buf, &none, 0);
  return rc;
}

static void check_arrays(struct hx_check *ck, nx_buffer_t *buf) {
  char h1[40], h2[40];
#define GET(name, type)                                                        \
  {                                                                            \
    type got[HX_N], want[HX_N];                                                \
    memset(got, 0x5a, sizeof(got));                                            \
    for (uint32_t i = 0; i < HX_N; i++)                                        \
      want[i] = name##_el(i);                                                  \
    hx_rc(ck, nx_get_##name##_array(buf, got, HX_N),                           \
          "nx_get_" #name "_array");                                           \
    for (uint32_t i = 0; i < HX_N; i++)                                        \
      hx_expect(ck, memcmp(&got[i], &want[i], sizeof(type)) == 0,              \
                #name " array [%u]: got %s, expected %s", i,                   \
                hex(&got[i], sizeof(type), h1),                                \
                hex(&want[i], sizeof(type), h2));                              \
  }
  HX_TYPES(GET)
#undef GET
  uint8_t bytes[13], want[13];
  for (uint32_t i = 0; i < sizeof(want); i++)
    want[i] = bytes_el(i);
  hx_rc(ck, nx_get_bytes(buf, bytes, sizeof(bytes)), "nx_get_bytes");
  hx_expect(ck, memcmp(bytes, want, sizeof(want)) == 0,
            "nx_get_bytes: got %s, expected %s (bytes are never converted)",
            hex(bytes, sizeof(bytes), h1), hex(want, sizeof(want), h2));
  double none = 42;
  hx_rc(ck, nx_get_double_array(buf, &none, 0), "nx_get_double_array (0)");
  hx_expect(ck, none == 42, "an empty array wrote its destination");
  hx_expect(ck, nx_buffer_remaining(buf) == 0, "%zu bytes left over",
            nx_buffer_remaining(buf));
}

/* The arrays put by reference stay here until released: each process
 * sends them once. Filled before the first put. */
static double zc_double[HX_ZC_N];
static int32_t zc_int32[HX_ZC_N];
static uint16_t zc_uint16[HX_ZC_N];
static int64_t zc_int64[HX_ZC_N];
static float zc_float[HX_ZC_N];
static uint8_t zc_bytes[HX_ZC_N];

static void zc_fill(void) {
  for (uint32_t i = 0; i < HX_ZC_N; i++) {
    zc_double[i] = double_el(i);
    zc_int32[i] = int32_el(i);
    zc_uint16[i] = uint16_el(i);
    zc_int64[i] = int64_el(i);
    zc_float[i] = float_el(i);
    zc_bytes[i] = bytes_el(i);
  }
}

void hx_release_cb(void *arg, const void *v, int status) {
  (void)arg, (void)v;
  if (status != 0) {
    fprintf(stderr, "hetero %s: FAILED: a reference was released with %s\n",
            hx_role, nx_err_name(status));
    __atomic_fetch_add(&hx_refs_bad, 1, __ATOMIC_SEQ_CST);
  }
  __atomic_fetch_add(&hx_refs_released, 1, __ATOMIC_SEQ_CST);
}

/* By reference, with copying puts between them so that the referenced
 * arrays do not start where their alignment falls by chance, and one
 * copied double array the receiver reads in place too. */
static int pack_zerocopy(nx_buffer_t *buf) {
  zc_fill();
  int rc = 0, refs = 0;
#define REF(call)                                                              \
  if (rc == 0 && (rc = (call)) == 0)                                           \
    refs++;
  REF(nx_put_double_array_ref(buf, zc_double, HX_ZC_N, hx_release_cb, NULL));
  if (rc == 0)
    rc = nx_put_char(buf, 'x');
  REF(nx_put_int32_array_ref(buf, zc_int32, HX_ZC_N, hx_release_cb, NULL));
  REF(nx_put_uint16_array_ref(buf, zc_uint16, HX_ZC_N, hx_release_cb, NULL));
  if (rc == 0)
    rc = nx_put_int8(buf, -1);
  REF(nx_put_int64_array_ref(buf, zc_int64, HX_ZC_N, hx_release_cb, NULL));
  REF(nx_put_float_array_ref(buf, zc_float, HX_ZC_N, hx_release_cb, NULL));
  REF(nx_put_bytes_ref(buf, zc_bytes, HX_ZC_N, hx_release_cb, NULL));
#undef REF
  if (rc == 0)
    rc = nx_put_char(buf, 'y');
  if (rc == 0)
    rc = nx_put_double_array(buf, zc_double, HX_ZC_N);
  __atomic_fetch_add(&hx_refs_put, refs, __ATOMIC_SEQ_CST);
  return rc;
}

/* Pointers into the buffer from one in-place pass over it. */
struct zc_ptrs {
  const double *d, *dcopy;
  const int32_t *i32;
  const uint16_t *u16;
  const int64_t *i64;
  const float *f;
  const void *b;
};

#define ALIGNED(p, type) (((uintptr_t)(p) % sizeof(type)) == 0)

/* One pass with nx_get_*_ptr: every pointer aligned, every value right. */
static void zc_pass_ptr(struct hx_check *ck, nx_buffer_t *buf,
                        struct zc_ptrs *p, int pass) {
  char c = 0;
  int8_t s8 = 0;
  memset(p, 0, sizeof(*p));
  hx_rc(ck, nx_get_double_array_ptr(buf, &p->d, HX_ZC_N),
        "nx_get_double_array_ptr");
  hx_rc(ck, nx_get_char(buf, &c), "nx_get_char");
  hx_rc(ck, nx_get_int32_array_ptr(buf, &p->i32, HX_ZC_N),
        "nx_get_int32_array_ptr");
  hx_rc(ck, nx_get_uint16_array_ptr(buf, &p->u16, HX_ZC_N),
        "nx_get_uint16_array_ptr");
  hx_rc(ck, nx_get_int8(buf, &s8), "nx_get_int8");
  hx_rc(ck, nx_get_int64_array_ptr(buf, &p->i64, HX_ZC_N),
        "nx_get_int64_array_ptr");
  hx_rc(ck, nx_get_float_array_ptr(buf, &p->f, HX_ZC_N),
        "nx_get_float_array_ptr");
  hx_rc(ck, nx_get_bytes_ptr(buf, &p->b, HX_ZC_N), "nx_get_bytes_ptr");
  hx_rc(ck, nx_get_char(buf, &c), "nx_get_char");
  hx_rc(ck, nx_get_double_array_ptr(buf, &p->dcopy, HX_ZC_N),
        "nx_get_double_array_ptr (copied array)");
  if (p->d == NULL || p->dcopy == NULL || p->i32 == NULL || p->u16 == NULL ||
      p->i64 == NULL || p->f == NULL || p->b == NULL)
    return;
  hx_expect(ck,
            ALIGNED(p->d, double) && ALIGNED(p->dcopy, double) &&
                ALIGNED(p->i32, int32_t) && ALIGNED(p->u16, uint16_t) &&
                ALIGNED(p->i64, int64_t) && ALIGNED(p->f, float),
            "pass %d: a pointer from nx_get_*_array_ptr is misaligned", pass);
  uint32_t bad = 0;
  for (uint32_t i = 0; i < HX_ZC_N; i++) {
    uint8_t byte = ((const uint8_t *)p->b)[i];
    if (p->d[i] != double_el(i) || p->dcopy[i] != double_el(i) ||
        p->i32[i] != int32_el(i) || p->u16[i] != uint16_el(i) ||
        p->i64[i] != int64_el(i) || p->f[i] != float_el(i) ||
        byte != bytes_el(i))
      bad++;
  }
  hx_expect(ck, bad == 0, "pass %d: %u elements read in place are wrong", pass,
            bad);
}

/* Back to the start of an item's values: past the item number that
 * hx_send_item puts first. */
static void rewind_item(struct hx_check *ck, nx_buffer_t *buf) {
  int32_t item = -1;
  hx_rc(ck, nx_buffer_rewind(buf), "nx_buffer_rewind");
  hx_rc(ck, nx_get_int32(buf, &item), "nx_get_int32 (item, again)");
}

static void check_zerocopy(struct hx_check *ck, nx_buffer_t *buf) {
  /* In place (converted where they are when the order is foreign)... */
  struct zc_ptrs first, again;
  zc_pass_ptr(ck, buf, &first, 1);
  hx_expect(ck, nx_buffer_remaining(buf) == 0, "%zu bytes left over",
            nx_buffer_remaining(buf));
  /* ...then by copy: the converted arrays are marked and not reversed
   * again... */
  rewind_item(ck, buf);
  double d[HX_ZC_N], dcopy[HX_ZC_N];
  int32_t i32[HX_ZC_N];
  uint16_t u16[HX_ZC_N];
  int64_t i64[HX_ZC_N];
  float f[HX_ZC_N];
  uint8_t b[HX_ZC_N];
  char c;
  int8_t s8;
  hx_rc(ck, nx_get_double_array(buf, d, HX_ZC_N), "nx_get_double_array");
  hx_rc(ck, nx_get_char(buf, &c), "nx_get_char");
  hx_rc(ck, nx_get_int32_array(buf, i32, HX_ZC_N), "nx_get_int32_array");
  hx_rc(ck, nx_get_uint16_array(buf, u16, HX_ZC_N), "nx_get_uint16_array");
  hx_rc(ck, nx_get_int8(buf, &s8), "nx_get_int8");
  hx_rc(ck, nx_get_int64_array(buf, i64, HX_ZC_N), "nx_get_int64_array");
  hx_rc(ck, nx_get_float_array(buf, f, HX_ZC_N), "nx_get_float_array");
  hx_rc(ck, nx_get_bytes(buf, b, HX_ZC_N), "nx_get_bytes");
  hx_rc(ck, nx_get_char(buf, &c), "nx_get_char");
  hx_rc(ck, nx_get_double_array(buf, dcopy, HX_ZC_N), "nx_get_double_array");
  uint32_t bad = 0;
  for (uint32_t i = 0; i < HX_ZC_N; i++)
    if (d[i] != double_el(i) || dcopy[i] != double_el(i) ||
        i32[i] != int32_el(i) || u16[i] != uint16_el(i) ||
        i64[i] != int64_el(i) || f[i] != float_el(i) || b[i] != bytes_el(i))
      bad++;
  hx_expect(ck, bad == 0,
            "%u elements read by copy after the in-place pass are wrong", bad);
  /* ...and in place once more: the same values, and for the arrays put by
   * reference (padded, so aligned where they are) the same pointers. The
   * copied double array is misaligned and each get in place copies it
   * again (bufref.c), so its pointer may differ. */
  rewind_item(ck, buf);
  zc_pass_ptr(ck, buf, &again, 2);
  hx_expect(ck,
            again.d == first.d && again.i32 == first.i32 &&
                again.u16 == first.u16 && again.i64 == first.i64 &&
                again.f == first.f && again.b == first.b,
            "a second in-place pass gave other pointers");
}

/* A stand-alone buffer's packed bytes, moved as opaque bytes with their
 * format beside them (as a program would through a file or a pipe) and
 * read again through nx_buffer_from_bytes. */
static int pack_bufbytes(nx_buffer_t *buf) {
  nx_buffer_t *inner;
  const void *data;
  size_t len;
  uint64_t u64[3] = {uint64_el(0), uint64_el(1), uint64_el(2)};
  int rc = nx_buffer_create(64, &inner);
  if (rc != 0)
    return rc;
  if ((rc = nx_put_int32(inner, int32_sc[1])) == 0 &&
      (rc = nx_put_double(inner, double_sc[1])) == 0 &&
      (rc = nx_put_uint64_array(inner, u64, 3)) == 0 &&
      (rc = nx_buffer_bytes(inner, &data, &len)) == 0 &&
      (rc = nx_put_int32(buf, nx_buffer_format(inner))) == 0 &&
      (rc = nx_put_uint32(buf, (uint32_t)len)) == 0)
    rc = nx_put_bytes(buf, data, len);
  nx_buffer_release(inner);
  return rc;
}

static void check_bufbytes(struct hx_check *ck, nx_buffer_t *buf) {
  int32_t format = 0, i32 = 0;
  uint32_t len = 0;
  uint8_t data[256];
  double d = 0;
  uint64_t u64[3] = {0};
  nx_buffer_t *inner = NULL;
  hx_rc(ck, nx_get_int32(buf, &format), "bufbytes: nx_get_int32");
  hx_rc(ck, nx_get_uint32(buf, &len), "bufbytes: nx_get_uint32");
  hx_expect(ck, format == hx_remote_format(),
            "bufbytes: the sender's stand-alone buffer had format %d",
            (int)format);
  if (len > sizeof(data)) {
    hx_expect(ck, 0, "bufbytes: %u bytes", (unsigned)len);
    return;
  }
  hx_rc(ck, nx_get_bytes(buf, data, len), "bufbytes: nx_get_bytes");
  hx_rc(ck, nx_buffer_from_bytes(data, len, format, &inner),
        "nx_buffer_from_bytes");
  if (inner == NULL)
    return;
  hx_check_format(ck, inner, hx_remote_format());
  hx_rc(ck, nx_get_int32(inner, &i32), "bufbytes: nx_get_int32 (inner)");
  hx_rc(ck, nx_get_double(inner, &d), "bufbytes: nx_get_double (inner)");
  hx_rc(ck, nx_get_uint64_array(inner, u64, 3),
        "bufbytes: nx_get_uint64_array (inner)");
  hx_expect(ck, i32 == int32_sc[1], "bufbytes: int32 %08x",
            (unsigned)(uint32_t)i32);
  hx_expect(ck, d == double_sc[1], "bufbytes: double %a", d);
  hx_expect(ck,
            u64[0] == uint64_el(0) && u64[1] == uint64_el(1) &&
                u64[2] == uint64_el(2),
            "bufbytes: uint64 array %016llx ...", (unsigned long long)u64[0]);
  nx_buffer_release(inner);
}

int hx_pack(nx_buffer_t *buf, int item) {
  switch (item) {
  case HX_SCALARS: return pack_scalars(buf);
  case HX_ARRAYS: return pack_arrays(buf);
  case HX_ZEROCOPY: return pack_zerocopy(buf);
  case HX_BUFBYTES: return pack_bufbytes(buf);
  default: return NX_EINVAL;
  }
}

void hx_check_item(struct hx_check *ck, nx_buffer_t *buf, int item) {
  switch (item) {
  case HX_SCALARS: check_scalars(ck, buf); break;
  case HX_ARRAYS: check_arrays(ck, buf); break;
  case HX_ZEROCOPY: check_zerocopy(ck, buf); break;
  case HX_BUFBYTES: check_bufbytes(ck, buf); break;
  default: hx_expect(ck, 0, "unknown item %d", item);
  }
}

int hx_send_item(const nx_gp_t *gp, const char *name, int item) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, gp, name, 1024);
  if (rc != 0)
    return rc;
  if ((rc = nx_put_int32(b, item)) != 0 || (rc = hx_pack(b, item)) != 0) {
    nx_buffer_release(b);
    return rc;
  }
  return nx_rsr_send(b);
}

double hx_fig3_value(uint32_t i) { return (double)i * 0.5 + 1.0 / 3.0; }

void hx_send_verdict(int item, int row, const struct hx_check *ck) {
  nx_buffer_t *b;
  int rc = nx_rsr_init_name(&b, &hx_coord, "verdict", 64);
  if (rc == 0) {
    nx_put_int32(b, item);
    nx_put_int32(b, row);
    nx_put_int32(b, (int32_t)hx_incoming);
    nx_put_int32(b, ck->checks);
    nx_put_int32(b, ck->failed);
    rc = nx_rsr_send(b);
  }
  if (rc != 0) {
    fprintf(stderr, "hetero %s: FAILED: sending a verdict: %s\n", hx_role,
            nx_err_name(rc));
    atomic_fetch_add(&failed_total, 1);
  }
}

/* What "via" carries besides the echoed gp. */
static const uint64_t via_magic = 0x0123456789abcdefull;
static const int16_t via_i16[3] = {0x1234, -2, 0x7f01};
static const char via_text[8] = "via gp!";

/* "relay" (a third context): a gp arrives from a context of this process;
 * RSR "via" goes to it, over tcp, carrying the gp itself back. */
static void on_relay(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)ctx, (void)addr;
  struct hx_check ck = {0, 0};
  nx_gp_t target = NX_GP_NULL;
  hx_check_format(&ck, buf, nx_format_native());
  hx_rc(&ck, nx_get_gp(buf, &target), "relay: nx_get_gp");
  const char *proto = nx_gp_protocol(&target);
  hx_expect(&ck, proto != NULL && strcmp(proto, "tcp") == 0,
            "relay: the gp passed on is reached by %s, expected tcp",
            proto != NULL ? proto : "nothing");
  nx_buffer_t *out;
  int rc = nx_rsr_init_name(&out, &target, "via", 256);
  if (rc == 0) {
    nx_put_uint64(out, via_magic);
    nx_put_double(out, -1.0 / 3.0);
    nx_put_int16_array(out, via_i16, 3);
    nx_put_gp(out, &target);
    nx_put_char_array(out, via_text, sizeof(via_text));
    rc = nx_rsr_send(out);
  }
  hx_rc(&ck, rc, "relay: sending via");
  nx_gp_release(&target);
  hx_send_verdict(HX_GP, 0, &ck);
}

/* "via" (a third context): the RSR sent through a gp that went to the
 * other machine and came back in a buffer of its order. */
static void on_via(nx_context_t *ctx, void *addr, nx_buffer_t *buf) {
  (void)addr;
  struct hx_check ck = {0, 0};
  uint64_t magic = 0;
  double third = 0;
  int16_t i16[3] = {0};
  nx_gp_t echo = NX_GP_NULL;
  char text[sizeof(via_text)] = {0};
  hx_check_format(&ck, buf, hx_remote_format());
  hx_rc(&ck, nx_get_uint64(buf, &magic), "via: nx_get_uint64");
  hx_rc(&ck, nx_get_double(buf, &third), "via: nx_get_double");
  hx_rc(&ck, nx_get_int16_array(buf, i16, 3), "via: nx_get_int16_array");
  hx_rc(&ck, nx_get_gp(buf, &echo), "via: nx_get_gp");
  hx_rc(&ck, nx_get_char_array(buf, text, sizeof(text)),
        "via: nx_get_char_array");
  hx_expect(&ck, magic == via_magic, "via: uint64 %016llx",
            (unsigned long long)magic);
  hx_expect(&ck, third == -1.0 / 3.0, "via: double %a", third);
  hx_expect(&ck, memcmp(i16, via_i16, sizeof(i16)) == 0,
            "via: int16 array %04x %04x %04x", (unsigned)(uint16_t)i16[0],
            (unsigned)(uint16_t)i16[1], (unsigned)(uint16_t)i16[2]);
  hx_expect(&ck, memcmp(text, via_text, sizeof(text)) == 0, "via: text");
  /* The gp went to the other machine and back: it must still name this
   * context, and its descriptors this process (reached by local). */
  hx_expect(&ck, nx_gp_context(&echo) == nx_context_id(ctx),
            "via: the echoed gp names context %016llx, this is %016llx",
            (unsigned long long)nx_gp_context(&echo),
            (unsigned long long)nx_context_id(ctx));
  const char *proto = nx_gp_protocol(&echo);
  hx_expect(&ck, proto != NULL && strcmp(proto, "local") == 0,
            "via: the echoed gp is reached by %s, expected local",
            proto != NULL ? proto : "nothing");
  nx_gp_release(&echo);
  hx_send_verdict(HX_GP, 0, &ck);
}

int hx_third_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  int rc =
      nx_handler_register(ctx, "relay", on_relay, NX_HANDLER_NONTHREADED, NULL);
  if (rc == 0)
    rc = nx_handler_register(ctx, "via", on_via, NX_HANDLER_NONTHREADED, NULL);
  return rc;
}

void hx_machine(char out[16]) {
  struct utsname u;
  memset(out, 0, 16);
  if (uname(&u) == 0)
    memcpy(out, u.machine, strnlen(u.machine, 15));
  else
    out[0] = '?';
}
