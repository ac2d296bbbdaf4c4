/* Message buffers: typed put/get with per-value type tags, byte-order
 * conversion on get, and ownership. */
#include <stdlib.h>
#include <string.h>

#include "buffers/buf.h"
#include "buffers/frame.h"

int nx_format_native(void) { return nxi_format_native(); }

void nxi_buffer_seal(struct nx_buffer *b) {
  struct nxi_frame_hdr f = {.fmt = b->fmt,
                            .handler = b->handler,
                            .context = b->context,
                            .address = b->address,
                            .len = nxi_buffer_wire_len(b),
                            .source = b->source,
                            .order = b->order};
  /* The last value a large array: its receiver may place it. */
  if (__builtin_expect(b->tail_at != 0, 0) && b->tail_end == f.len) {
    f.flags = NX_FRAME_F_TAIL;
    f.lead = (uint16_t)b->tail_at;
  }
  nxi_frame_hdr_encode(b->hdr, &f);
  b->frame.iov[0].iov_base = b->hdr;
  b->frame.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  b->frame.iov[1].iov_base = b->data;
  b->frame.iov[1].iov_len = b->len;
  b->frame.iovcnt = 2;
  b->frame.iovs = b->frame.iov;
  b->frame.len = NX_FRAME_HDR_SIZE + b->len;
  if (b->xr != NULL && b->xr->bytes != 0)
    nxi_buffer_refs_iov(b);
}

/* Ownership. `refs` counts every holder; `urefs` the program's share, so a
 * release the program does not own is refused instead of freeing a buffer
 * the runtime still uses. Stand-alone and unsent buffers start with one
 * reference of the program's; a received buffer starts with the runtime's
 * only, dropped when its handler returns. */

int nx_buffer_create(size_t size_hint, nx_buffer_t **buf) {
  if (buf == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  struct nx_buffer *b = nxi_buffer_alloc(size_hint);
  if (b == NULL)
    return NX_ENOMEM;
  b->kind = NXI_BUF_STANDALONE;
  atomic_init(&b->refs, 1);
  atomic_store_explicit(&b->urefs, 1, memory_order_release);
  *buf = b;
  return 0;
}

int nx_buffer_retain(nx_buffer_t *b) {
  if (b == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL; /* an RSR buffer is given away by nx_rsr_send */
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->urefs, 1, memory_order_relaxed);
  if (b->own_release != NULL)
    nxi_buffer_own_track(b); /* a module's payload, kept: bufmem.c */
  return 0;
}

int nx_buffer_release(nx_buffer_t *b) {
  /* The pointer may be one the program gave away (sent, released), whose
   * slot is free or reused by now: only `urefs` may be read (bufmem.c),
   * and one of the program's references is taken from it first. An
   * unsent RSR buffer has the one reference: the program will not send
   * it. */
  if (b == NULL)
    return NX_EINVAL;
  unsigned u = atomic_load_explicit(&b->urefs, memory_order_relaxed);
  do {
    if (u == 0)
      return NX_EINVAL;
  } while (!atomic_compare_exchange_weak_explicit(
      &b->urefs, &u, u == NXI_UREFS_RSR ? 0 : u - 1, memory_order_acquire,
      memory_order_relaxed));
  nxi_buffer_unref(b);
  return 0;
}

int nx_buffer_bytes(const nx_buffer_t *b, const void **data, size_t *len) {
  if (b == NULL || data == NULL || len == NULL ||
      (b->xr != NULL && b->xr->bytes != 0) || b->place != NULL)
    return NX_EINVAL;
  *data = b->data;
  *len = b->len;
  return 0;
}

int nx_buffer_from_bytes(const void *data, size_t len, int format,
                         nx_buffer_t **buf) {
  if ((data == NULL && len != 0) || buf == NULL ||
      (format != NX_FORMAT_LITTLE && format != NX_FORMAT_BIG))
    return NX_EINVAL;
  nx_buffer_t *b;
  int r = nx_buffer_create(len, &b);
  if (r < 0)
    return r;
  if (len != 0)
    nxi_copy(b->data, data, len);
  b->len = len;
  b->fmt = (uint8_t)format;
  *buf = b;
  return 0;
}

int nx_buffer_set_format(nx_buffer_t *b, int format) {
  if (b == NULL || (format != NX_FORMAT_LITTLE && format != NX_FORMAT_BIG))
    return NX_EINVAL;
  if (b->kind == NXI_BUF_RECV)
    return NX_EINVAL;
  if (b->len != 0)
    return NX_EBUSY;
  b->fmt = (uint8_t)format;
  return 0;
}

int nx_buffer_format(const nx_buffer_t *b) {
  return b != NULL ? b->fmt : NX_EINVAL;
}

uint64_t nx_buffer_source(const nx_buffer_t *b) {
  return b != NULL && b->kind == NXI_BUF_RECV ? b->source : 0;
}

int nx_buffer_rewind(nx_buffer_t *b) {
  if (b == NULL)
    return NX_EINVAL;
  b->pos = 0;
  return 0;
}

/* The bytes of a placed tail, which are not in `data`. */
static size_t placed_len(const nx_buffer_t *b) {
  return b->place != NULL ? (size_t)(b->tail_end - b->tail_at) : 0;
}

size_t nx_buffer_length(const nx_buffer_t *b) {
  return b != NULL ? nxi_buffer_wire_len(b) + placed_len(b) : 0;
}

size_t nx_buffer_remaining(const nx_buffer_t *b) {
  if (b == NULL)
    return 0;
  return b->len - b->pos + (b->pos < b->len ? placed_len(b) : 0);
}

int nx_buffer_placement(const nx_buffer_t *b) {
  if (b == NULL || b->kind != NXI_BUF_RECV)
    return NX_EINVAL;
  return b->place_status;
}

/* Sizes. */

static size_t sizeof_array(size_t elem, size_t count) {
  return 1 + 4 + elem * count;
}

size_t nx_sizeof_int8(size_t n) { return sizeof_array(1, n); }
size_t nx_sizeof_int16(size_t n) { return sizeof_array(2, n); }
size_t nx_sizeof_int32(size_t n) { return sizeof_array(4, n); }
size_t nx_sizeof_int64(size_t n) { return sizeof_array(8, n); }
size_t nx_sizeof_float(size_t n) { return sizeof_array(4, n); }
size_t nx_sizeof_double(size_t n) { return sizeof_array(8, n); }
size_t nx_sizeof_char(size_t n) { return sizeof_array(1, n); }
size_t nx_sizeof_bytes(size_t n) { return sizeof_array(1, n); }

/* Writing. Each nx_put_* writes the common case inline: a writable
 * buffer of this machine's format with room for the value (for an array,
 * one too small to be a tail a receiver places, so that there is nothing
 * to note). Anything else, every error included, takes the general path
 * out of line behind one unlikely branch, which checks and converts. */

static __attribute__((noinline)) int
put_scalar_any(struct nx_buffer *b, uint8_t tag, const void *v, size_t size) {
  if (!nxi_buffer_writable(b))
    return NX_EINVAL;
  int r = nxi_buffer_reserve(b, 1 + size);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  p[0] = tag;
  nxi_copy_elems(p + 1, v, size, 1, nxi_buffer_swapped(b));
  b->len += 1 + size;
  return 0;
}

static inline int put_scalar(struct nx_buffer *b, uint8_t tag, const void *v,
                             size_t size) {
  if (__builtin_expect(!nxi_buffer_writable(b) || nxi_buffer_swapped(b) ||
                           b->cap - b->len < 1 + size,
                       0))
    return put_scalar_any(b, tag, v, size);
  uint8_t *p = b->data + b->len;
  p[0] = tag;
  memcpy(p + 1, v, size);
  b->len += 1 + size;
  return 0;
}

static __attribute__((noinline)) int put_array_any(struct nx_buffer *b,
                                                   uint8_t tag, const void *v,
                                                   size_t size, size_t count) {
  if (!nxi_buffer_writable(b) || (v == NULL && count != 0) ||
      count > UINT32_MAX)
    return NX_EINVAL;
  if (count > (SIZE_MAX - 5) / size)
    return NX_ENOMEM;
  int r = nxi_buffer_reserve(b, 5 + size * count);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  uint32_t n = (uint32_t)count;
  p[0] = (uint8_t)(tag | NXI_TAG_ARRAY);
  nxi_copy_elems(p + 1, (const uint8_t *)&n, 4, 1, nxi_buffer_swapped(b));
  if (count != 0)
    nxi_copy_elems(p + 5, v, size, count, nxi_buffer_swapped(b));
  b->len += 5 + size * count;
  size_t end = nxi_buffer_wire_len(b);
  nxi_buffer_tail_note(b, end - size * count, end);
  return 0;
}

/* Below NX_PLACE_MIN bytes of elements an array is never noted as a tail
 * (nxi_buffer_tail_note), and its count fits the u32 field. */
static inline int put_array(struct nx_buffer *b, uint8_t tag, const void *v,
                            size_t size, size_t count) {
  if (__builtin_expect(!nxi_buffer_writable(b) || nxi_buffer_swapped(b) ||
                           v == NULL || count >= NX_PLACE_MIN / size ||
                           b->cap - b->len < 5 + size * count,
                       0))
    return put_array_any(b, tag, v, size, count);
  uint8_t *p = b->data + b->len;
  uint32_t n = (uint32_t)count;
  p[0] = (uint8_t)(tag | NXI_TAG_ARRAY);
  memcpy(p + 1, &n, 4);
  /* The length first: nothing is then kept across a call to memcpy, and
   * the compiler needs no stack frame for the small copy. */
  b->len += 5 + size * count;
  nxi_copy_short(p + 5, v, size * count);
  return 0;
}

/* Reading: check everything first, so an error consumes nothing. As for
 * puts, each nx_get_* reads the common case inline (a readable buffer of
 * this machine's format, the exact tag, the value all there) and leaves
 * the rest, errors included, to the general path. */

static __attribute__((noinline)) int
get_scalar_any(struct nx_buffer *b, uint8_t tag, void *v, size_t size) {
  if (b == NULL || v == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  size_t left = b->len - b->pos;
  if (left < 1)
    return NX_ERANGE;
  const uint8_t *p = b->data + b->pos;
  if (p[0] != tag)
    return NX_ETYPE;
  if (left < 1 + size)
    return NX_ERANGE;
  nxi_copy_elems(v, p + 1, size, 1, nxi_buffer_swapped(b));
  b->pos += 1 + size;
  return 0;
}

static inline int get_scalar(struct nx_buffer *b, uint8_t tag, void *v,
                             size_t size) {
  if (__builtin_expect(b == NULL || v == NULL || b->kind == NXI_BUF_SEND ||
                           nxi_buffer_swapped(b) ||
                           b->len - b->pos < 1 + size || b->data[b->pos] != tag,
                       0))
    return get_scalar_any(b, tag, v, size);
  memcpy(v, b->data + b->pos + 1, size);
  b->pos += 1 + size;
  return 0;
}

/* An array's header at the read position: checks it against `tag` and
 * `count` and gives where its elements start (relative to the position)
 * and whether they need reversing. Arrays are `tag|ARRAY, count` then the
 * elements, or, written by a put by reference, `tag|ARRAY|PADDED, count,
 * k, k zero bytes` then the elements; a get in place may have set FLIPPED
 * after converting the elements where they are. */
static int array_at(const struct nx_buffer *b, uint8_t tag, size_t size,
                    size_t count, uint8_t **elems, size_t *adv, int *swap) {
  size_t left = b->len - b->pos;
  if (left == 0)
    return NX_ERANGE;
  const uint8_t *p = b->data + b->pos;
  if ((p[0] & (NXI_TAG_TYPE | NXI_TAG_ARRAY)) != (tag | NXI_TAG_ARRAY))
    return NX_ETYPE;
  size_t hdr = p[0] & NXI_TAG_PADDED ? 6 : 5;
  if (left < hdr)
    return NX_ERANGE;
  if (hdr == 6) {
    if (p[5] > 7)
      return NX_EPROTO;
    hdr += p[5];
    if (left < hdr)
      return NX_ERANGE;
  }
  uint32_t n;
  nxi_copy_elems((uint8_t *)&n, p + 1, 4, 1, nxi_buffer_swapped(b));
  if (n != count)
    return NX_ETYPE;
  *swap = nxi_buffer_swapped(b) ^ !!(p[0] & NXI_TAG_FLIPPED);
  if (b->place != NULL && b->pos + hdr == b->len) {
    /* The tail, placed (nx_handler_set_place): its elements are where
     * the placement callback said, and the lead ends with its header. */
    if (count * size != b->tail_end - b->tail_at)
      return NX_ERANGE;
    *elems = b->place;
    *adv = hdr;
    return 0;
  }
  if ((left - hdr) / size < count)
    return NX_ERANGE;
  *elems = b->data + b->pos + hdr;
  *adv = hdr + size * count;
  return 0;
}

/* Whether the array at the read position of a readable buffer is plain,
 * the common case: `tag|ARRAY` exactly (not padded, not flipped), `count`
 * elements all in the data, in this machine's byte order, and no tail
 * placed elsewhere. Its elements then start 5 bytes in. */
static inline int array_plain(const struct nx_buffer *b, uint8_t tag,
                              size_t size, size_t count) {
  size_t left = b->len - b->pos;
  const uint8_t *p = b->data + b->pos;
  uint32_t n;
  if (left < 5 || p[0] != (tag | NXI_TAG_ARRAY))
    return 0;
  memcpy(&n, p + 1, 4);
  return n == count && (left - 5) / size >= count && !nxi_buffer_swapped(b) &&
         b->place == NULL;
}

static __attribute__((noinline)) int get_array_any(struct nx_buffer *b,
                                                   uint8_t tag, void *v,
                                                   size_t size, size_t count) {
  if (b == NULL || (v == NULL && count != 0) || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  uint8_t *e;
  size_t adv;
  int swap;
  int r = array_at(b, tag, size, count, &e, &adv, &swap);
  if (r < 0)
    return r;
  if (count != 0 && e != v)
    nxi_copy_elems(v, e, size, count, swap);
  else if (count != 0 && swap && size > 1) {
    /* Got into the placed memory itself: converted where it is, once. */
    nxi_swap_elems(e, size, count);
    b->data[b->pos] ^= NXI_TAG_FLIPPED;
  }
  b->pos += adv;
  return 0;
}

static inline int get_array(struct nx_buffer *b, uint8_t tag, void *v,
                            size_t size, size_t count) {
  if (__builtin_expect(b == NULL || v == NULL || b->kind == NXI_BUF_SEND ||
                           !array_plain(b, tag, size, count),
                       0))
    return get_array_any(b, tag, v, size, count);
  const uint8_t *e = b->data + b->pos + 5;
  b->pos += 5 + size * count; /* first, as in put_array */
  if (e != v)
    nxi_copy_short(v, e, size * count);
  return 0;
}

/* In place: converts the elements where they are if they need it (and
 * marks the array FLIPPED), then gives them, or an aligned copy the
 * buffer keeps when they are not aligned for their type. */
static __attribute__((noinline)) int
get_array_ptr_any(struct nx_buffer *b, uint8_t tag, const void **v, size_t size,
                  size_t count) {
  if (b == NULL || v == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  uint8_t *e;
  size_t adv;
  int swap;
  int r = array_at(b, tag, size, count, &e, &adv, &swap);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->pos;
  if (swap && size > 1 && count != 0) {
    nxi_swap_elems(e, size, count);
    p[0] ^= NXI_TAG_FLIPPED;
  }
  const void *out = e;
  if ((uintptr_t)e % size != 0) {
    out = nxi_buffer_side_copy(b, e, size * count);
    if (out == NULL)
      return NX_ENOMEM;
  }
  *v = out;
  b->pos += adv;
  return 0;
}

static inline int get_array_ptr(struct nx_buffer *b, uint8_t tag,
                                const void **v, size_t size, size_t count) {
  if (__builtin_expect(b == NULL || v == NULL || b->kind == NXI_BUF_SEND ||
                           !array_plain(b, tag, size, count) ||
                           (uintptr_t)(b->data + b->pos + 5) % size != 0,
                       0))
    return get_array_ptr_any(b, tag, v, size, count);
  *v = b->data + b->pos + 5;
  b->pos += 5 + size * count;
  return 0;
}

#define NX_BUFFER_TYPES(XX)                                                    \
  XX(int8, int8_t, NXI_TAG_INT8)                                               \
  XX(uint8, uint8_t, NXI_TAG_UINT8)                                            \
  XX(int16, int16_t, NXI_TAG_INT16)                                            \
  XX(uint16, uint16_t, NXI_TAG_UINT16)                                         \
  XX(int32, int32_t, NXI_TAG_INT32)                                            \
  XX(uint32, uint32_t, NXI_TAG_UINT32)                                         \
  XX(int64, int64_t, NXI_TAG_INT64)                                            \
  XX(uint64, uint64_t, NXI_TAG_UINT64)                                         \
  XX(float, float, NXI_TAG_FLOAT)                                              \
  XX(double, double, NXI_TAG_DOUBLE)                                           \
  XX(char, char, NXI_TAG_CHAR)

#define NX_BUFFER_FUNCS(name, type, tag)                                       \
  int nx_put_##name(nx_buffer_t *b, type v) {                                  \
    return put_scalar(b, tag, &v, sizeof(type));                               \
  }                                                                            \
  int nx_get_##name(nx_buffer_t *b, type *v) {                                 \
    return get_scalar(b, tag, v, sizeof(type));                                \
  }                                                                            \
  int nx_put_##name##_array(nx_buffer_t *b, const type *v, size_t n) {         \
    return put_array(b, tag, v, sizeof(type), n);                              \
  }                                                                            \
  int nx_get_##name##_array(nx_buffer_t *b, type *v, size_t n) {               \
    return get_array(b, tag, v, sizeof(type), n);                              \
  }                                                                            \
  int nx_put_##name##_array_ref(nx_buffer_t *b, const type *v, size_t n,       \
                                nx_release_fn fn, void *arg) {                 \
    return nxi_put_array_ref(b, tag, v, sizeof(type), n, fn, arg);             \
  }                                                                            \
  int nx_get_##name##_array_ptr(nx_buffer_t *b, const type **v, size_t n) {    \
    return get_array_ptr(b, tag, (const void **)v, sizeof(type), n);           \
  }
NX_BUFFER_TYPES(NX_BUFFER_FUNCS)
#undef NX_BUFFER_FUNCS

/* Bytes are never converted: write them as a one-byte-element array. */
int nx_put_bytes(nx_buffer_t *b, const void *v, size_t n) {
  return put_array(b, NXI_TAG_BYTES, v, 1, n);
}

int nx_get_bytes(nx_buffer_t *b, void *v, size_t n) {
  return get_array(b, NXI_TAG_BYTES, v, 1, n);
}

int nx_put_bytes_ref(nx_buffer_t *b, const void *v, size_t n, nx_release_fn fn,
                     void *arg) {
  return nxi_put_array_ref(b, NXI_TAG_BYTES, v, 1, n, fn, arg);
}

int nx_get_bytes_ptr(nx_buffer_t *b, const void **v, size_t n) {
  return get_array_ptr(b, NXI_TAG_BYTES, v, 1, n);
}
