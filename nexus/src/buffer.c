/* Message buffers: typed put/get with per-value type tags, byte-order conversion on get, and ownership. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buffer_cache.h"
#include "internal.h"
#include "nxmod_env.h"

/* Each value starts with a one-byte tag; arrays set NXI_TAG_ARRAY and are
 * followed by a 32-bit count in the buffer's byte order. */
enum {
  TAG_INT8 = 1,
  TAG_UINT8,
  TAG_INT16,
  TAG_UINT16,
  TAG_INT32,
  TAG_UINT32,
  TAG_INT64,
  TAG_UINT64,
  TAG_FLOAT,
  TAG_DOUBLE,
  TAG_CHAR,
  TAG_BYTES,
  TAG_GP,
  TAG_ARRAY = 0x80
};

/* The smallest payload room; RSRs that fit share the per-thread cache. */
#define INLINE_MIN 192
/* Payloads above this get an allocation of their own. */
#define INLINE_MAX (64 * 1024)

int nx_format_native(void) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return NX_FORMAT_LITTLE;
#else
  return NX_FORMAT_BIG;
#endif
}

/* A per-thread cache of buffers of the standard capacity, so the common
 * small RSR costs no malloc/free. A thread's cache is freed when the thread
 * ends. AddressSanitizer builds skip it, to keep use-after-free checks. */
#if defined(__SANITIZE_ADDRESS__)
#define CACHE_MAX 0
#else
#define CACHE_MAX 64
#endif

struct buffer_cache {
  struct nx_buffer *head;
  int count;
  int registered;
};

static NXI_TLS struct buffer_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_drain(void *arg) {
  struct buffer_cache *c = arg;
  while (c->head != NULL) {
    struct nx_buffer *b = c->head;
    c->head = b->ctx_next;
    free(b);
  }
  c->count = 0;
}

static void cache_key_create(void) {
  pthread_key_create(&cache_key, cache_drain);
}

static struct nx_buffer *raw_alloc(size_t cap) {
  if (cap == INLINE_MIN && cache.head != NULL) {
    struct nx_buffer *b = cache.head;
    cache.head = b->ctx_next;
    cache.count--;
    return b;
  }
  return malloc(sizeof(struct nx_buffer) + cap);
}

/* A cache of large payload blocks. A payload above INLINE_MAX is a block of
 * its own, and glibc serves blocks that large with mmap and munmap: every
 * large RSR then costs a page fault per 4 KiB touched (about 120 per 1 MiB
 * round trip, both processes together). So freed blocks wait here for the
 * next payload of their size class instead. Classes: four per doubling
 * from INLINE_MAX up to BLOCK_MAX (a block is rounded up by at most a
 * quarter), plus BLOCK_SLACK bytes each; at most BLOCK_PER_CLASS blocks a
 * class and at most `cap` bytes in all (NX_BUFFER_CACHE; 0 turns the cache
 * off). One lock for all threads: large payloads are often allocated on
 * one thread (the sender, the driver that reads a frame) and freed on
 * another, and the lock costs nothing beside a copy of 64 KiB. The cache
 * is open from nx_init to nx_finalize, which frees it; blocks freed
 * outside that time go back to malloc. Under AddressSanitizer a cached
 * block is poisoned, so a use after free still reports until the block is
 * reused. */
#define BLOCK_MIN ((size_t)INLINE_MAX)
#define BLOCK_MAX ((size_t)16 << 20)
#define BLOCK_STEPS 4 /* classes per doubling */
#define BLOCK_SLACK ((size_t)4096)
#define BLOCK_CLASSES (8 * BLOCK_STEPS) /* 64 KiB << 8 = 16 MiB */
#define BLOCK_PER_CLASS 4
#define BLOCK_CACHE_DEFAULT ((size_t)64 << 20)
#define BLOCK_ALIGN ((size_t)4096) /* where a block starts: see block_new */

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BLOCK_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define BLOCK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define BLOCK_POISON(p, n) ((void)(p), (void)(n))
#define BLOCK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static struct {
  pthread_mutex_t lock;
  int open;
  size_t cap;   /* bytes the cache may hold */
  size_t bytes; /* bytes it holds */
  int count[BLOCK_CLASSES];
  void *slot[BLOCK_CLASSES][BLOCK_PER_CLASS];
  uint64_t hits, misses;
} blocks = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The class of a block of `n` bytes (INLINE_MAX < n) and its size; -1 for
 * blocks too large to cache. Each class has BLOCK_SLACK bytes beyond its
 * step, so that a round size plus the tags and arguments put beside it
 * (1 MiB of bytes is 1 MiB + 5) stays in the round size's class. */
static int block_class(size_t n, size_t *size) {
  n = n > BLOCK_SLACK ? n - BLOCK_SLACK : 0;
  if (n > BLOCK_MAX)
    return -1;
  size_t base = BLOCK_MIN;
  int k = 0;
  for (; base * 2 < n; base *= 2)
    k++;
  size_t step = base / BLOCK_STEPS;
  size_t i = n <= base ? 1 : (n - base + step - 1) / step;
  *size = base + i * step + BLOCK_SLACK;
  return k * BLOCK_STEPS + (int)i - 1;
}

static size_t class_size(int c) {
  size_t base = BLOCK_MIN << (c / BLOCK_STEPS);
  return base + (size_t)(c % BLOCK_STEPS + 1) * (base / BLOCK_STEPS) +
         BLOCK_SLACK;
}

/* A new block, page-aligned. glibc serves blocks this large with mmap,
 * and its pointer then sits 16 bytes into a page; on the EPYC machines we
 * measure on, the kernel's copy of a payload that starts 16 or 64 bytes
 * into a page (sendmsg copying it out, readv copying into it) runs at a
 * third of the speed of one that starts at the page: a 1 MiB RSR round
 * trip over tcp took 1.2-1.7 ms instead of 0.6-0.8 ms
 * (docs/performance.md). */
static void *block_new(size_t size) {
  void *p;
  return posix_memalign(&p, BLOCK_ALIGN, size) == 0 ? p : NULL;
}

/* A block for a payload of `n` bytes (n > INLINE_MAX), and in *size its
 * size: rounded up to its class and taken from the cache when one is
 * there, so that it can go back to the cache when it is freed. */
static void *block_get(size_t n, size_t *size) {
  int c = -1;
  if (__atomic_load_n(&blocks.cap, __ATOMIC_RELAXED) != 0)
    c = block_class(n, size);
  if (c < 0) {
    *size = n;
    return block_new(n);
  }
  void *p = NULL;
  pthread_mutex_lock(&blocks.lock);
  if (blocks.count[c] > 0) {
    p = blocks.slot[c][--blocks.count[c]];
    blocks.bytes -= *size;
    blocks.hits++;
  } else {
    blocks.misses++;
  }
  pthread_mutex_unlock(&blocks.lock);
  if (p == NULL)
    return block_new(*size);
  BLOCK_UNPOISON(p, *size);
  return p;
}

static void block_put(void *p, size_t size) {
  size_t csize;
  int c = block_class(size, &csize);
  if (c >= 0 && csize == size) {
    pthread_mutex_lock(&blocks.lock);
    int keep = blocks.open && blocks.count[c] < BLOCK_PER_CLASS &&
               blocks.cap - blocks.bytes >= size;
    if (keep) {
      BLOCK_POISON(p, size);
      blocks.slot[c][blocks.count[c]++] = p;
      blocks.bytes += size;
    }
    pthread_mutex_unlock(&blocks.lock);
    if (keep)
      return;
  }
  free(p);
}

int nxi_buffer_cache_init(void) {
  size_t cap;
  char why[128];
  if (nxmod_env_size("NX_BUFFER_CACHE", BLOCK_CACHE_DEFAULT, 0, SIZE_MAX,
                     &cap, why, sizeof(why)) < 0) {
    nxi_log(0, NULL, "%s", why);
    return NX_EINVAL;
  }
  pthread_mutex_lock(&blocks.lock);
  __atomic_store_n(&blocks.cap, cap, __ATOMIC_RELAXED);
  blocks.open = 1;
  blocks.hits = blocks.misses = 0;
  pthread_mutex_unlock(&blocks.lock);
  return 0;
}

void nxi_buffer_cache_finalize(void) {
  pthread_mutex_lock(&blocks.lock);
  blocks.open = 0;
  for (int c = 0; c < BLOCK_CLASSES; c++)
    while (blocks.count[c] > 0) {
      void *p = blocks.slot[c][--blocks.count[c]];
      BLOCK_UNPOISON(p, class_size(c));
      free(p);
    }
  blocks.bytes = 0;
  pthread_mutex_unlock(&blocks.lock);
}

void nxi_buffer_cache_stats_get(struct nxi_buffer_cache_stats *st) {
  pthread_mutex_lock(&blocks.lock);
  st->cap = blocks.cap;
  st->bytes = blocks.bytes;
  st->blocks = 0;
  for (int c = 0; c < BLOCK_CLASSES; c++)
    st->blocks += (size_t)blocks.count[c];
  st->hits = blocks.hits;
  st->misses = blocks.misses;
  pthread_mutex_unlock(&blocks.lock);
}

struct nx_buffer *nxi_buffer_alloc(size_t cap) {
  if (cap < INLINE_MIN)
    cap = INLINE_MIN;
  if (cap > SIZE_MAX / 2 - sizeof(struct nx_buffer))
    return NULL; /* a hint no memory can hold */
  /* Large payloads live apart from the struct, in blocks of their own
   * (block_get), so growing one moves the payload, not the struct. */
  int apart = cap > INLINE_MAX;
  struct nx_buffer *b = raw_alloc(apart ? INLINE_MIN : cap);
  if (b == NULL)
    return NULL;
  /* Every field but the header bytes and the frame (written when sealed or
   * received) starts at zero. */
  memset(b, 0, offsetof(struct nx_buffer, hdr));
  atomic_init(&b->refs, 1);
  atomic_init(&b->urefs, 0);
  b->data = b->inline_data;
  b->cap = apart ? INLINE_MIN : cap;
  if (apart) {
    size_t size;
    uint8_t *d = block_get(cap, &size);
    if (d == NULL) {
      free(b);
      return NULL;
    }
    b->data = d;
    b->data_heap = 1;
    b->cap = size;
  }
  b->fmt = (uint8_t)nx_format_native();
  return b;
}

void nxi_buffer_free(struct nx_buffer *b) {
  if (b->data_heap) {
    block_put(b->data, b->cap);
  } else if (b->cap == INLINE_MIN && cache.count < CACHE_MAX) {
    if (!cache.registered) {
      pthread_once(&cache_once, cache_key_create);
      pthread_setspecific(cache_key, &cache);
      cache.registered = 1;
    }
    b->ctx_next = cache.head;
    cache.head = b;
    cache.count++;
    return;
  }
  free(b);
}

void nxi_buffer_seal(struct nx_buffer *b) {
  uint8_t *h = b->hdr;
  nxi_le32(h + 0, NX_FRAME_MAGIC);
  h[4] = NX_FRAME_VERSION;
  h[5] = b->fmt;
  nxi_le16(h + 6, 0);
  nxi_le32(h + 8, b->handler);
  nxi_le32(h + 12, 0);
  nxi_le64(h + 16, b->context);
  nxi_le64(h + 24, b->address);
  nxi_le64(h + 32, b->len);
  b->frame.iov[0].iov_base = h;
  b->frame.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  b->frame.iov[1].iov_base = b->data;
  b->frame.iov[1].iov_len = b->len;
  b->frame.iovcnt = 2;
  b->frame.len = NX_FRAME_HDR_SIZE + b->len;
}

/* Ownership. `refs` counts every holder; `urefs` the program's share, so a
 * release the program does not own is refused instead of freeing a buffer
 * the runtime still uses. Stand-alone and unsent buffers start with one
 * reference of the program's; a received buffer starts with the runtime's
 * only, dropped when its handler returns. */

static void buffer_unref(struct nx_buffer *b) {
  /* A count of one is ours alone: nobody else can be retaining it (that
   * needs a reference), so free it without a locked operation. */
  if (atomic_load_explicit(&b->refs, memory_order_acquire) == 1 ||
      atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
    nxi_buffer_free(b);
}

void nxi_buffer_handler_done(struct nx_buffer *b) { buffer_unref(b); }

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
  atomic_init(&b->urefs, 1);
  *buf = b;
  return 0;
}

int nx_buffer_retain(nx_buffer_t *b) {
  if (b == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL; /* an RSR buffer is given away by nx_rsr_send */
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->urefs, 1, memory_order_relaxed);
  return 0;
}

int nx_buffer_release(nx_buffer_t *b) {
  if (b == NULL)
    return NX_EINVAL;
  unsigned r = atomic_load_explicit(&b->urefs, memory_order_relaxed);
  do {
    if (r == 0)
      return NX_EINVAL; /* not the program's to release */
  } while (!atomic_compare_exchange_weak_explicit(
      &b->urefs, &r, r - 1, memory_order_relaxed, memory_order_relaxed));
  buffer_unref(b);
  return 0;
}

int nx_buffer_bytes(const nx_buffer_t *b, const void **data, size_t *len) {
  if (b == NULL || data == NULL || len == NULL)
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
    memcpy(b->data, data, len);
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

int nx_buffer_rewind(nx_buffer_t *b) {
  if (b == NULL)
    return NX_EINVAL;
  b->pos = 0;
  return 0;
}

size_t nx_buffer_length(const nx_buffer_t *b) { return b != NULL ? b->len : 0; }

size_t nx_buffer_remaining(const nx_buffer_t *b) {
  return b != NULL ? b->len - b->pos : 0;
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

/* Writing. */

static int reserve(struct nx_buffer *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return 0;
  if (extra > SIZE_MAX / 2 - b->len)
    return NX_ENOMEM;
  size_t cap = b->cap * 2;
  if (cap < b->len + extra)
    cap = b->len + extra;
  /* Not realloc: a large block must stay page-aligned (block_new). */
  uint8_t *d = cap > INLINE_MAX ? block_get(cap, &cap) : malloc(cap);
  if (d == NULL)
    return NX_ENOMEM;
  memcpy(d, b->data, b->len);
  if (b->data_heap)
    block_put(b->data, b->cap);
  b->data = d;
  b->data_heap = 1;
  b->cap = cap;
  return 0;
}

static int writable(const struct nx_buffer *b) {
  return b != NULL && b->kind != NXI_BUF_RECV;
}

static int swapped(const struct nx_buffer *b) {
  return b->fmt != nx_format_native();
}

/* Copies `count` elements of `size` bytes, reversing each one's bytes when
 * `swap` is set. */
static void copy_elems(uint8_t *dst, const uint8_t *src, size_t size,
                       size_t count, int swap) {
  if (!swap || size == 1) {
    memcpy(dst, src, size * count);
    return;
  }
  for (size_t i = 0; i < count; i++, dst += size, src += size)
    for (size_t j = 0; j < size; j++)
      dst[j] = src[size - 1 - j];
}

static int put_scalar(struct nx_buffer *b, uint8_t tag, const void *v,
                      size_t size) {
  if (!writable(b))
    return NX_EINVAL;
  int r = reserve(b, 1 + size);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  p[0] = tag;
  copy_elems(p + 1, v, size, 1, swapped(b));
  b->len += 1 + size;
  return 0;
}

static int put_array(struct nx_buffer *b, uint8_t tag, const void *v,
                     size_t size, size_t count) {
  if (!writable(b) || (v == NULL && count != 0) || count > UINT32_MAX)
    return NX_EINVAL;
  if (count > (SIZE_MAX - 5) / size)
    return NX_ENOMEM;
  int r = reserve(b, 5 + size * count);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  uint32_t n = (uint32_t)count;
  p[0] = (uint8_t)(tag | TAG_ARRAY);
  copy_elems(p + 1, (const uint8_t *)&n, 4, 1, swapped(b));
  if (count != 0)
    copy_elems(p + 5, v, size, count, swapped(b));
  b->len += 5 + size * count;
  return 0;
}

/* Reading: check everything first, so an error consumes nothing. */

static int get_scalar(struct nx_buffer *b, uint8_t tag, void *v, size_t size) {
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
  copy_elems(v, p + 1, size, 1, swapped(b));
  b->pos += 1 + size;
  return 0;
}

static int get_array(struct nx_buffer *b, uint8_t tag, void *v, size_t size,
                     size_t count) {
  if (b == NULL || (v == NULL && count != 0) || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  size_t left = b->len - b->pos;
  if (left < 5)
    return left == 0 ? NX_ERANGE
                     : (b->data[b->pos] != (tag | TAG_ARRAY) ? NX_ETYPE
                                                             : NX_ERANGE);
  const uint8_t *p = b->data + b->pos;
  if (p[0] != (tag | TAG_ARRAY))
    return NX_ETYPE;
  uint32_t n;
  copy_elems((uint8_t *)&n, p + 1, 4, 1, swapped(b));
  if (n != count)
    return NX_ETYPE;
  if ((left - 5) / size < count)
    return NX_ERANGE;
  if (count != 0)
    copy_elems(v, p + 5, size, count, swapped(b));
  b->pos += 5 + size * count;
  return 0;
}

#define NX_BUFFER_TYPES(XX)                                                    \
  XX(int8, int8_t, TAG_INT8)                                                   \
  XX(uint8, uint8_t, TAG_UINT8)                                                \
  XX(int16, int16_t, TAG_INT16)                                                \
  XX(uint16, uint16_t, TAG_UINT16)                                             \
  XX(int32, int32_t, TAG_INT32)                                                \
  XX(uint32, uint32_t, TAG_UINT32)                                             \
  XX(int64, int64_t, TAG_INT64)                                                \
  XX(uint64, uint64_t, TAG_UINT64)                                             \
  XX(float, float, TAG_FLOAT)                                                  \
  XX(double, double, TAG_DOUBLE)                                               \
  XX(char, char, TAG_CHAR)

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
  }
NX_BUFFER_TYPES(NX_BUFFER_FUNCS)
#undef NX_BUFFER_FUNCS

/* Bytes are never converted: write them as a one-byte-element array. */
int nx_put_bytes(nx_buffer_t *b, const void *v, size_t n) {
  return put_array(b, TAG_BYTES, v, 1, n);
}

int nx_get_bytes(nx_buffer_t *b, void *v, size_t n) {
  return get_array(b, TAG_BYTES, v, 1, n);
}

/* Global pointers: tag, context and address in the buffer's byte order,
 * then the descriptor list in its own fixed (little-endian) encoding. */

size_t nx_sizeof_gp(const struct nx_gp *gp) {
  return 1 + 8 + 8 + (gp != NULL && gp->protos != NULL ? gp->protos->len : 1);
}

int nx_put_gp(nx_buffer_t *b, const struct nx_gp *gp) {
  if (!writable(b) || gp == NULL)
    return NX_EINVAL;
  size_t dlen = gp->protos != NULL ? gp->protos->len : 1;
  int r = reserve(b, 17 + dlen);
  if (r < 0)
    return r;
  uint8_t *p = b->data + b->len;
  p[0] = TAG_GP;
  copy_elems(p + 1, (const uint8_t *)&gp->context, 8, 1, swapped(b));
  copy_elems(p + 9, (const uint8_t *)&gp->address, 8, 1, swapped(b));
  if (gp->protos != NULL)
    memcpy(p + 17, gp->protos->blob, dlen);
  else
    p[17] = 0; /* a null gp: no descriptors */
  b->len += 17 + dlen;
  return 0;
}

int nx_get_gp(nx_buffer_t *b, struct nx_gp *gp) {
  if (b == NULL || gp == NULL || b->kind == NXI_BUF_SEND)
    return NX_EINVAL;
  size_t left = b->len - b->pos;
  if (left < 1)
    return NX_ERANGE;
  const uint8_t *p = b->data + b->pos;
  if (p[0] != TAG_GP)
    return NX_ETYPE;
  if (left < 18)
    return NX_ERANGE;
  size_t dlen;
  int r = nxi_dlist_parse_len(p + 17, left - 17, &dlen);
  if (r < 0)
    return r;
  struct nx_gp g;
  copy_elems((uint8_t *)&g.context, p + 1, 8, 1, swapped(b));
  copy_elems((uint8_t *)&g.address, p + 9, 8, 1, swapped(b));
  g.protos = NULL;
  if (p[17] != 0) {
    r = nxi_dlist_intern(p + 17, dlen, &g.protos);
    if (r < 0)
      return r;
    atomic_store_explicit(&g.protos->proc, (uint32_t)(g.context >> 32),
                          memory_order_relaxed);
  } else if (g.context != 0) {
    return NX_EPROTO; /* a gp to a context must say how to reach it */
  }
  b->pos += 17 + dlen;
  *gp = g;
  return 0;
}
