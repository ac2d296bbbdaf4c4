/* PVM message buffers: the buffer table, packing with counts and strides
 * (copied, or left in place until the send), unpacking in pieces of any
 * size, and the typed encoding that carries a buffer in an RSR. */
/* pvm_getmwid and pvm_setmwid are declared for PVM 3.3 programs only. */
#define PVM33COMPAT 1
#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pvm_internal.h"

static const size_t kind_size[K_MAX] = {
    [K_I8] = 1,  [K_I16] = 2, [K_I32] = 4, [K_I64] = 8,
    [K_F32] = 4, [K_F64] = 8, [K_STR] = 1};

static int arena_grow(struct pvmbuf *b, size_t bytes, size_t *off);
static int arena_room(struct pvmbuf *b, size_t bytes);
static struct seg *seg_add(struct pvmbuf *b);
static inline int pack_into(struct pvmbuf *b, int kind, const void *p, int n,
                            int stride, size_t esize);
static inline int unpack_from(struct pvmbuf *b, int kind, void *p, int n,
                              int stride, size_t esize);
static int pack_general(struct pvmbuf *b, int kind, const void *p, int n,
                        int stride, size_t esize);
static int unpack_general(struct pvmbuf *b, int kind, void *p, int n,
                          int stride, size_t esize);
static int seg_reserve(struct pvmbuf *b, int n);
static inline void copy_strided(void *dst, size_t dstride, const void *src,
                                size_t sstride, size_t n, size_t esize);

/* Freed buffers kept for the next ones, with their arena and run table:
 * a message costs no malloc or free once the cache is warm (every send's
 * pvm_initsend, every arrival's decode, every pvm_freebuf). Each slot is
 * taken and filled with one atomic exchange, so the handlers' thread and
 * the program's may both use it without a lock. */
#define CACHE_SLOTS 4
#define CACHE_MAX_BYTES (64 << 10) /* a larger arena goes back to malloc */
static _Atomic(struct pvmbuf *) cache[CACHE_SLOTS];

static void buf_release(struct pvmbuf *b) {
  free(b->data);
  free(b->segs);
  free(b);
}

/* Besides, the task's own thread (whose pvm_mytid started the task) keeps
 * one freed buffer for itself, taken and put back with no atomic: the
 * receive buffer its pvm_recv frees is what the next arrival, decoded on
 * that thread while it waits in pvm_recv, takes. pvm_exit empties it (on
 * another thread, the one buffer stays until the process ends). */
static NXPVM_TLS struct pvmbuf *own;
static NXPVM_TLS int own_thread;

void nxpvmi_buf_own_thread(void) { own_thread = 1; }

/* Makes `b` an empty buffer with id `id`, keeping its arena and run
 * table: every field but those four set, one by one (cheaper than
 * assigning a whole new struct, on the path of every message). */
static inline void buf_empty(struct pvmbuf *b, int id, int encoding) {
  b->id = id;
  b->encoding = encoding;
  b->len = 0;
  b->nseg = 0;
  b->rseg = 0;
  b->relem = 0;
  b->src = 0;
  b->tag = 0;
  b->ctx = 0;
  b->dst = 0;
  b->wid = 0;
  b->bytes = 0;
  b->queued = 0;
  b->held = NULL;
  b->next = NULL;
}

static int cacheable(const struct pvmbuf *b) {
  return b->cap <= CACHE_MAX_BYTES && b->segcap <= 64;
}

struct pvmbuf *nxpvmi_buf_new(int encoding) {
  struct pvmbuf *b = own;
  own = NULL;
  for (int i = 0; i < CACHE_SLOTS && b == NULL; i++)
    if (atomic_load_explicit(&cache[i], memory_order_relaxed) != NULL)
      b = atomic_exchange_explicit(&cache[i], NULL, memory_order_acquire);
  if (b != NULL)
    buf_empty(b, 0, encoding);
  else if ((b = calloc(1, sizeof(*b))) == NULL)
    return NULL;
  b->encoding = encoding;
  return b;
}

void nxpvmi_buf_free(struct pvmbuf *b) {
  if (b == NULL)
    return;
  if (b->held != NULL) {
    nx_buffer_release(b->held);
    b->held = NULL;
  }
  if (!cacheable(b)) {
    buf_release(b);
    return;
  }
  if (own_thread && own == NULL) {
    own = b;
    return;
  }
  for (int i = 0; i < CACHE_SLOTS && b != NULL; i++)
    if (atomic_load_explicit(&cache[i], memory_order_relaxed) == NULL)
      b = atomic_exchange_explicit(&cache[i], b, memory_order_acq_rel);
  if (b != NULL)
    buf_release(b); /* the cache is full (or the slot was just filled) */
}

/* pvm_exit: the cache goes too, once nothing is freed after. */
void nxpvmi_buf_cache_drain(void) {
  if (own != NULL)
    buf_release(own);
  own = NULL;
  own_thread = 0;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    struct pvmbuf *b = atomic_exchange(&cache[i], NULL);
    if (b != NULL)
      buf_release(b);
  }
}

/* A copy with every run in its own arena (in-place runs read now), for a
 * message a task sends itself. */
struct pvmbuf *nxpvmi_buf_clone(const struct pvmbuf *b) {
  struct pvmbuf *c = nxpvmi_buf_new(b->encoding);
  if (c == NULL)
    return NULL;
  for (int i = 0; i < b->nseg; i++) {
    const struct seg *s = &b->segs[i];
    size_t ks = kind_size[s->kind], off;
    struct seg *t;
    if (arena_grow(c, s->count * ks, &off) < 0 || (t = seg_add(c)) == NULL) {
      nxpvmi_buf_free(c);
      return NULL;
    }
    *t = (struct seg){s->kind, s->count, off, NULL, 1, ks};
    if (s->ref == NULL)
      memcpy(c->data + off, b->data + s->off, s->count * ks);
    else
      copy_strided(c->data + off, 1, s->ref, (size_t)s->stride,
                   s->count * ks / s->isize, s->isize);
  }
  c->bytes = b->bytes;
  c->ctx = b->ctx;
  c->src = b->src;
  c->tag = b->tag;
  c->dst = b->dst;
  c->wid = b->wid;
  return c;
}

/* Gives the buffer the lowest free id. */
int nxpvmi_buf_register(struct pvmbuf *b) {
  for (int i = 0; i < nxpvm.nbufs; i++)
    if (nxpvm.bufs[i] == NULL) {
      nxpvm.bufs[i] = b;
      return b->id = i + 1;
    }
  int n = nxpvm.nbufs ? 2 * nxpvm.nbufs : 16;
  struct pvmbuf **t = realloc(nxpvm.bufs, (size_t)n * sizeof(*t));
  if (t == NULL)
    return PvmNoMem;
  memset(t + nxpvm.nbufs, 0, (size_t)(n - nxpvm.nbufs) * sizeof(*t));
  nxpvm.bufs = t;
  int id = nxpvm.nbufs;
  nxpvm.nbufs = n;
  nxpvm.bufs[id] = b;
  return b->id = id + 1;
}

struct pvmbuf *nxpvmi_buf_get(int id) {
  if (id < 1 || id > nxpvm.nbufs)
    return NULL;
  return nxpvm.bufs[id - 1];
}

static void buf_unregister(struct pvmbuf *b) {
  if (b->id > 0 && b->id <= nxpvm.nbufs)
    nxpvm.bufs[b->id - 1] = NULL;
  if (nxpvm.sbuf == b->id)
    nxpvm.sbuf = 0;
  if (nxpvm.rbuf == b->id)
    nxpvm.rbuf = 0;
}

void nxpvmi_buf_drop_all(void) {
  for (int i = 0; i < nxpvm.nbufs; i++)
    if (nxpvm.bufs[i] != NULL && !nxpvm.bufs[i]->queued)
      nxpvmi_buf_free(nxpvm.bufs[i]);
  free(nxpvm.bufs);
  nxpvm.bufs = NULL;
  nxpvm.nbufs = 0;
  while (nxpvm.qhead != NULL) {
    struct pvmbuf *b = nxpvm.qhead;
    nxpvm.qhead = b->next;
    nxpvmi_buf_free(b);
  }
  nxpvm.qtail = NULL;
}

/* Room for `bytes` more at the end of the arena; returns the offset. The
 * runs lie one after the other with no padding (every read of a run goes
 * through memcpy), so an arena whose runs are all its own is the values as
 * they go on the wire (nxpvmi_encode_msg copies it whole). */
static int arena_grow(struct pvmbuf *b, size_t bytes, size_t *off) {
  if (arena_room(b, bytes) < 0)
    return PvmNoMem;
  *off = b->len;
  b->len += bytes;
  return 0;
}

/* Room for `bytes` more at the end of the arena, its length unchanged. */
static int arena_room(struct pvmbuf *b, size_t bytes) {
  if (b->len + bytes <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + bytes)
    cap *= 2;
  char *d = realloc(b->data, cap);
  if (d == NULL)
    return PvmNoMem;
  b->data = d;
  b->cap = cap;
  return 0;
}

/* Room for `n` runs in all. */
static int seg_reserve(struct pvmbuf *b, int n) {
  struct seg *s = realloc(b->segs, (size_t)n * sizeof(*s));
  if (s == NULL)
    return PvmNoMem;
  b->segs = s;
  b->segcap = n;
  return 0;
}

static struct seg *seg_add(struct pvmbuf *b) {
  if (b->nseg == b->segcap && seg_reserve(b, b->segcap ? 2 * b->segcap : 4) < 0)
    return NULL;
  return &b->segs[b->nseg++];
}

static inline void copy_strided(void *dst, size_t dstride, const void *src,
                                size_t sstride, size_t n, size_t esize) {
  /* One item (the commonest pack and unpack): with the item size a
   * constant where this is inlined, a move instead of a call. */
  if (n == 1) {
    memcpy(dst, src, esize);
    return;
  }
  if (dstride == 1 && sstride == 1) {
    memcpy(dst, src, n * esize);
    return;
  }
  for (size_t i = 0; i < n; i++)
    memcpy((char *)dst + i * dstride * esize,
           (const char *)src + i * sstride * esize, esize);
}

/* Appends `n` elements of `kind` (each `esize` bytes; complex values are
 * two) taken every `stride` elements from `p` to the active send buffer. */
int nxpvmi_pack(int kind, const void *p, int n, int stride, size_t esize) {
  return pack_into(nxpvmi_buf_get(nxpvm.sbuf), kind, p, n, stride, esize);
}

/* Appends to the arena of `b`, which has room for the values and the run
 * table for one more run: extends the last run when it is of the same
 * kind and in the arena (fewer headers on the wire, and unpacking does
 * not care), else adds one. */
static inline int pack_append(struct pvmbuf *b, int kind, const void *p, int n,
                              int stride, size_t esize) {
  size_t count = (size_t)n * (esize / kind_size[kind]); /* 2 a complex */
  size_t bytes = count * kind_size[kind];
  struct seg *last = b->nseg > 0 ? &b->segs[b->nseg - 1] : NULL;
  if (last != NULL && kind != K_STR && last->kind == kind &&
      last->ref == NULL && last->count + count <= UINT32_MAX &&
      last->off + last->count * kind_size[kind] == b->len)
    last->count += count;
  else
    b->segs[b->nseg++] = (struct seg){kind, count, b->len, NULL, 1, esize};
  copy_strided(b->data + b->len, 1, p, (size_t)stride, (size_t)n, esize);
  b->len += bytes;
  b->bytes += bytes;
  return PvmOk;
}

/* The same into buffer `b`. The common case inline: nothing to check
 * fails, and the arena and run table have room. */
static inline int pack_into(struct pvmbuf *b, int kind, const void *p, int n,
                            int stride, size_t esize) {
  if (b == NULL || n <= 0 || stride < 1 || p == NULL ||
      (b->encoding == PvmDataInPlace && kind != K_STR) ||
      b->len + (size_t)n * esize > b->cap || b->nseg == b->segcap)
    return pack_general(b, kind, p, n, stride, esize);
  return pack_append(b, kind, p, n, stride, esize);
}

/* Every other case of pack_into: checks, in-place runs, growing. */
static int pack_general(struct pvmbuf *b, int kind, const void *p, int n,
                        int stride, size_t esize) {
  if (b == NULL)
    return PvmNoBuf;
  if (n < 0 || stride < 1 || (p == NULL && n > 0))
    return PvmBadParam;
  if (n == 0)
    return PvmOk;
  size_t count = (size_t)n * (esize / kind_size[kind]);
  if (b->encoding == PvmDataInPlace && kind != K_STR) {
    struct seg *s = seg_add(b);
    if (s == NULL)
      return PvmNoMem;
    *s = (struct seg){kind, count, 0, p, stride, esize};
    b->bytes += count * kind_size[kind];
    return PvmOk;
  }
  if (arena_room(b, count * kind_size[kind]) < 0 ||
      (b->nseg == b->segcap &&
       seg_reserve(b, b->segcap ? 2 * b->segcap : 4) < 0))
    return PvmNoMem;
  return pack_append(b, kind, p, n, stride, esize);
}

/* Takes `n` elements of `kind` from the active receive buffer into `p`,
 * every `stride` elements, crossing packed runs as needed. */
int nxpvmi_unpack(int kind, void *p, int n, int stride, size_t esize) {
  return unpack_from(nxpvmi_buf_get(nxpvm.rbuf), kind, p, n, stride, esize);
}

/* The same from buffer `b`. The common case inline: the values wanted
 * all in the current run, of their kind. */
static inline int unpack_from(struct pvmbuf *b, int kind, void *p, int n,
                              int stride, size_t esize) {
  if (b == NULL || n <= 0 || stride < 1 || p == NULL || b->rseg >= b->nseg)
    return unpack_general(b, kind, p, n, stride, esize);
  struct seg *s = &b->segs[b->rseg];
  size_t want = (size_t)n * (esize / kind_size[kind]); /* in values */
  if (s->kind != kind || s->ref != NULL || s->count - b->relem < want)
    return unpack_general(b, kind, p, n, stride, esize);
  copy_strided(p, (size_t)stride, b->data + s->off + b->relem * kind_size[kind],
               1, (size_t)n, esize);
  b->relem += want;
  if (b->relem == s->count) {
    b->rseg++;
    b->relem = 0;
  }
  return PvmOk;
}

/* Every case of unpack_from: checks, in-place runs, values that cross
 * runs. */
static int unpack_general(struct pvmbuf *b, int kind, void *p, int n,
                          int stride, size_t esize) {
  if (b == NULL)
    return PvmNoBuf;
  if (n < 0 || stride < 1 || (p == NULL && n > 0))
    return PvmBadParam;
  size_t per = esize / kind_size[kind];
  size_t want = (size_t)n; /* in program elements */
  size_t done = 0;
  while (done < want) {
    if (b->rseg >= b->nseg)
      return PvmNoData;
    struct seg *s = &b->segs[b->rseg];
    if (s->kind != kind)
      return PvmNoData;
    size_t avail = (s->count - b->relem) / per;
    if (avail == 0)
      return PvmNoData;
    size_t take = want - done < avail ? want - done : avail;
    const char *src =
        s->ref == NULL   ? b->data + s->off + b->relem * kind_size[kind]
        : s->stride == 1 ? (const char *)s->ref + b->relem * kind_size[kind]
                         : s->ref;
    copy_strided((char *)p + done * (size_t)stride * esize, (size_t)stride, src,
                 1, take, esize);
    done += take;
    b->relem += take * per;
    if (b->relem == s->count) {
      b->rseg++;
      b->relem = 0;
    }
  }
  return PvmOk;
}

/* pack_into and unpack_from are inline so that the pvm_pk and pvm_upk
 * calls, whose kind and item size are constants, get them folded in. */
int nxpvmi_pack_into(struct pvmbuf *b, int kind, const void *p, int n,
                     int stride, size_t esize) {
  return pack_into(b, kind, p, n, stride, esize);
}

int nxpvmi_unpack_from(struct pvmbuf *b, int kind, void *p, int n, int stride,
                       size_t esize) {
  return unpack_from(b, kind, p, n, stride, esize);
}

/* A buffer on the wire is one byte array, the last value of its RSR:
 *
 *   u8 flags (F_SRC: a source tid follows; F_CTX: a message context)
 *   varint tag, [varint src], [varint ctx], varint nseg
 *   nseg times: u8 kind, varint count
 *   the runs' values, one after the other, in the sender's byte order
 *
 * (varints: unsigned LEB128 of the 32-bit value). Byte arrays are never
 * converted, so the receiver reverses the values itself when the RSR's
 * format (nx_buffer_format) is not its own: receiver makes right, as with
 * nexus's typed values. One array instead of a typed nexus value per
 * field and run keeps an 8-byte message's RSR small enough for the
 * modules' short-message paths (UCX's inline send) and costs one put and
 * one get. A small array is the rest of the RSR (its length is what
 * remains); a larger one is preceded by its length (u64) and put by
 * reference from a block freed when nexus is done with it. Without
 * F_SRC the source is the sending task (nx_buffer_source). */
enum { F_SRC = 1, F_CTX = 2 };
#define BLOB_INLINE 1024 /* larger arrays are put by reference */

static size_t put_varint(uint8_t *p, uint32_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

static inline int get_varint(const uint8_t **p, const uint8_t *end,
                             uint32_t *v) {
  if (*p < end && **p < 0x80) { /* one byte: most tags, counts and tids */
    *v = *(*p)++;
    return 0;
  }
  uint32_t x = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (*p == end)
      return -1;
    uint8_t c = *(*p)++;
    x |= (uint32_t)(c & 0x7f) << shift;
    if ((c & 0x80) == 0) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* Copies `count` elements of `size` bytes, reversing each when `swap`. */
static void copy_swapped(uint8_t *dst, const uint8_t *src, size_t size,
                         size_t count, int swap) {
  if (!swap || size == 1) {
    memcpy(dst, src, size * count);
    return;
  }
  for (size_t i = 0; i < count; i++, dst += size, src += size)
    for (size_t k = 0; k < size; k++)
      dst[k] = src[size - 1 - k];
}

static void blob_release(void *arg, const void *v, int status) {
  (void)v;
  (void)status;
  free(arg);
}

/* The values of run `s` of `b` into `dst` (in-place runs read now). */
static void run_values(uint8_t *dst, const struct pvmbuf *b,
                       const struct seg *s, int swap) {
  size_t ks = kind_size[s->kind];
  if (s->ref == NULL) {
    copy_swapped(dst, (const uint8_t *)b->data + s->off, ks, s->count, swap);
  } else if (s->stride == 1) {
    copy_swapped(dst, s->ref, ks, s->count, swap);
  } else {
    /* An in-place strided run: gather its items now. */
    size_t is = s->isize, items = s->count * ks / is;
    for (size_t k = 0; k < items; k++)
      copy_swapped(dst + k * is,
                   (const uint8_t *)s->ref + k * (size_t)s->stride * is, ks,
                   is / ks, swap);
  }
}

/* Puts buffer `b` as message (`src`, `tag`) into `o`, last. */
int nxpvmi_encode_msg(nx_buffer_t *o, const struct pvmbuf *b, int src,
                      int tag) {
  /* Only NXPVM_FOREIGN_FORMAT's buffers are written in another order. */
  int swap = nxpvm.fake_format && nx_buffer_format(o) != nx_format_native();
  int flags = (src != nxpvm.mytid ? F_SRC : 0) | (b->ctx != 0 ? F_CTX : 0);
  size_t total = 1 + 5 * 4 + (size_t)b->nseg * 6 + b->bytes;
  uint8_t stack[BLOB_INLINE];
  uint8_t *blob = stack;
  if (total > sizeof(stack) && (blob = malloc(total)) == NULL)
    return NX_ENOMEM;
  size_t n = 0;
  blob[n++] = (uint8_t)flags;
  n += put_varint(blob + n, (uint32_t)tag);
  if (flags & F_SRC)
    n += put_varint(blob + n, (uint32_t)src);
  if (flags & F_CTX)
    n += put_varint(blob + n, (uint32_t)b->ctx);
  n += put_varint(blob + n, (uint32_t)b->nseg);
  for (int i = 0; i < b->nseg; i++) {
    blob[n++] = (uint8_t)b->segs[i].kind;
    n += put_varint(blob + n, (uint32_t)b->segs[i].count);
  }
  if (b->len == b->bytes && !swap) {
    /* Every run in the arena (an in-place run would make len < bytes):
     * the arena is the values, in order. */
    if (b->len > 0) /* an empty buffer may have no arena */
      memcpy(blob + n, b->data, b->len);
    n += b->len;
  } else {
    for (int i = 0; i < b->nseg; i++) {
      const struct seg *s = &b->segs[i];
      size_t bytes = s->count * kind_size[s->kind];
      if (s->ref == NULL && !swap)
        memcpy(blob + n, b->data + s->off, bytes);
      else
        run_values(blob + n, b, s, swap);
      n += bytes;
    }
  }
  if (blob == stack)
    return nx_put_bytes(o, blob, n);
  int rc = nx_put_uint64(o, n);
  if (rc == 0)
    rc = nx_put_bytes_ref(o, blob, n, blob_release, blob);
  if (rc < 0)
    free(blob);
  return rc;
}

int nxpvmi_encode(nx_buffer_t *o, const struct pvmbuf *b) {
  return nxpvmi_encode_msg(o, b, 0, 0);
}

/* The inverse: the rest of `in` into a new buffer, its values converted
 * to this machine's byte order. A malformed message is refused
 * (NX_EPROTO), never trusted; NX_ETYPE, with nothing read, when the next
 * value of `in` is neither a byte array nor its length. The run table is read
 * once, straight into the new buffer's runs (a bad one frees it again): the hot
 * path of every arrival. */
int nxpvmi_decode(nx_buffer_t *in, struct pvmbuf **out) {
  return nxpvmi_decode_from(in, nxpvmi_tid_of_context(nx_buffer_source(in)),
                            out);
}

/* The same, with the sending task's tid known (the source of a message
 * without F_SRC). */
int nxpvmi_decode_from(nx_buffer_t *in, int sender, struct pvmbuf **out) {
  /* A small array is the rest of the RSR (tried first: most are); a
   * larger one follows its length. A get that fails reads nothing. */
  const void *v;
  size_t hdr =
      nx_sizeof_bytes(0); /* what a byte array takes beside its bytes */
  size_t len = 0, rest = nx_buffer_remaining(in);
  uint64_t big;
  int rc;
  if (rest >= hdr && nx_get_bytes_ptr(in, &v, rest - hdr) == 0)
    len = rest - hdr;
  else if ((rc = nx_get_uint64(in, &big)) == NX_ETYPE)
    return NX_ETYPE; /* the next value is neither: nothing was read */
  else if (rc == 0 && nx_get_bytes_ptr(in, &v, (size_t)big) == 0)
    len = (size_t)big;
  else
    return NX_EPROTO;
  const uint8_t *p = v, *end = p + len;
  uint32_t tag, src = 0, ctx = 0, nseg;
  if (p == end)
    return NX_EPROTO;
  int flags = *p++;
  if (get_varint(&p, end, &tag) < 0 ||
      ((flags & F_SRC) && get_varint(&p, end, &src) < 0) ||
      ((flags & F_CTX) && get_varint(&p, end, &ctx) < 0) ||
      get_varint(&p, end, &nseg) < 0 || nseg > (size_t)(end - p) / 2)
    return NX_EPROTO;
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  if (b == NULL)
    return NX_ENOMEM;
  if (nseg > (uint32_t)b->segcap && seg_reserve(b, (int)nseg) < 0)
    goto nomem;
  /* The run table, checked whole before anything is copied; each run's
   * values lie where the ones before it end. */
  size_t values = 0;
  for (uint32_t i = 0; i < nseg; i++) {
    uint32_t count;
    int kind = p < end ? *p++ : 0;
    if (kind < K_I8 || kind >= K_MAX || get_varint(&p, end, &count) < 0 ||
        count == 0)
      goto bad;
    b->segs[i] = (struct seg){kind, count, values, NULL, 1, kind_size[kind]};
    values += (size_t)count * kind_size[kind];
  }
  if (values != (size_t)(end - p))
    goto bad;
  /* The values as they came, one copy, each run where it lies (unaligned:
   * every read of a run goes through memcpy). */
  size_t at;
  if (values > b->cap && arena_grow(b, values, &at) < 0)
    goto nomem;
  b->len = values;
  b->nseg = (int)nseg;
  b->bytes = values;
  b->ctx = (int)ctx;
  b->tag = (int)tag;
  b->src = flags & F_SRC ? (int)src : sender;
  if (nx_buffer_format(in) != nx_format_native()) {
    for (uint32_t i = 0; i < nseg; i++) {
      const struct seg *s = &b->segs[i];
      copy_swapped((uint8_t *)b->data + s->off, p + s->off, s->isize, s->count,
                   1);
    }
  } else if (values > 0) {
    memcpy(b->data, p, values);
  }
  *out = b;
  return 0;
bad:
  nxpvmi_buf_free(b);
  return NX_EPROTO;
nomem:
  nxpvmi_buf_free(b);
  return NX_ENOMEM;
}

/* A direct message, pvm_psend's form for an array of NX_PLACE_MIN bytes or
 * more (pvm_msg.c, "Receive placement"): typed values, the array last
 *
 *   u16 NXPVM_DIRECT, u32 seq, i32 tag, i32 ctx, u8 kind, u64 count,
 *   the array (count elements of the kind, put by reference)
 *
 * so that nexus marks it for placement and converts its byte order; `seq`
 * counts the messages the sender sent this task before it. The source is
 * the sending task. */
int nxpvmi_encode_direct(nx_buffer_t *o, uint32_t seq, int tag, int ctx,
                         int kind, const void *p, size_t count,
                         nx_release_fn fn, void *arg) {
  int rc = nx_put_uint16(o, NXPVM_DIRECT);
  if (rc == 0)
    rc = nx_put_uint32(o, seq);
  if (rc == 0)
    rc = nx_put_int32(o, tag);
  if (rc == 0)
    rc = nx_put_int32(o, ctx);
  if (rc == 0)
    rc = nx_put_uint8(o, (uint8_t)kind);
  if (rc == 0)
    rc = nx_put_uint64(o, count);
  if (rc < 0)
    return rc;
  switch (kind) {
  case K_I8: return nx_put_int8_array_ref(o, p, count, fn, arg);
  case K_I16: return nx_put_int16_array_ref(o, p, count, fn, arg);
  case K_I32: return nx_put_int32_array_ref(o, p, count, fn, arg);
  case K_I64: return nx_put_int64_array_ref(o, p, count, fn, arg);
  case K_F32: return nx_put_float_array_ref(o, p, count, fn, arg);
  case K_F64: return nx_put_double_array_ref(o, p, count, fn, arg);
  default: return NX_EINVAL;
  }
}

/* The array of a direct message into `v` (converted to this machine's
 * order where it lies when `v` is where it was placed). */
static int get_run(nx_buffer_t *in, int kind, void *v, size_t count) {
  switch (kind) {
  case K_I8: return nx_get_int8_array(in, v, count);
  case K_I16: return nx_get_int16_array(in, v, count);
  case K_I32: return nx_get_int32_array(in, v, count);
  case K_I64: return nx_get_int64_array(in, v, count);
  case K_F32: return nx_get_float_array(in, v, count);
  case K_F64: return nx_get_double_array(in, v, count);
  default: return NX_EPROTO;
  }
}

/* The array of a direct message where it lies in the RSR (`*v`), in this
 * machine's order. */
static int get_run_ptr(nx_buffer_t *in, int kind, const void **v,
                       size_t count) {
  switch (kind) {
  case K_I8: return nx_get_int8_array_ptr(in, (const int8_t **)v, count);
  case K_I16: return nx_get_int16_array_ptr(in, (const int16_t **)v, count);
  case K_I32: return nx_get_int32_array_ptr(in, (const int32_t **)v, count);
  case K_I64: return nx_get_int64_array_ptr(in, (const int64_t **)v, count);
  case K_F32: return nx_get_float_array_ptr(in, (const float **)v, count);
  case K_F64: return nx_get_double_array_ptr(in, (const double **)v, count);
  default: return NX_EPROTO;
  }
}

/* The inverse, from the u16 on: NX_ETYPE with nothing read when the next
 * value is not a u16. Into a new buffer of one run that stays where it
 * lies in the RSR, which the buffer retains (`held`) until it is freed: no
 * copy until pvm_upk* (or pvm_precv) copies the values out. When `at` is
 * not NULL (the message was placed there), the values are read at `at`
 * itself, which costs no copy either, and the new buffer holds the
 * message's tag, context and length but no values. */
int nxpvmi_decode_direct(nx_buffer_t *in, int sender, struct pvmbuf **out,
                         void *at) {
  uint16_t form;
  uint32_t seq;
  int32_t tag, ctx;
  uint8_t kind;
  uint64_t count;
  int rc = nx_get_uint16(in, &form);
  if (rc < 0)
    return rc;
  if (form != NXPVM_DIRECT || nx_get_uint32(in, &seq) < 0 ||
      nx_get_int32(in, &tag) < 0 || nx_get_int32(in, &ctx) < 0 ||
      nx_get_uint8(in, &kind) < 0 || nx_get_uint64(in, &count) < 0 ||
      kind < K_I8 || kind >= K_STR || count == 0 || count > UINT32_MAX ||
      tag < 0)
    return NX_EPROTO;
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  if (b == NULL)
    return NX_ENOMEM;
  size_t bytes = (size_t)count * kind_size[kind];
  if (at == NULL && b->segcap < 1 && seg_reserve(b, 1) < 0) {
    nxpvmi_buf_free(b);
    return NX_ENOMEM;
  }
  const void *v = NULL;
  rc = at != NULL ? get_run(in, kind, at, (size_t)count)
                  : get_run_ptr(in, kind, &v, (size_t)count);
  if (rc == 0 && at == NULL && (rc = nx_buffer_retain(in)) == 0)
    b->held = in;
  if (rc < 0) {
    nxpvmi_buf_free(b);
    return rc == NX_ENOMEM ? NX_ENOMEM : NX_EPROTO;
  }
  if (at == NULL) {
    b->segs[0] = (struct seg){kind, (size_t)count, 0, v, 1, kind_size[kind]};
    b->nseg = 1;
  }
  b->bytes = bytes;
  b->tag = tag;
  b->ctx = ctx;
  b->src = sender;
  *out = b;
  return 0;
}

/* ---- the PVM calls ---- */

int pvm_mkbuf(int encoding) {
  if (encoding != PvmDataDefault && encoding != PvmDataRaw &&
      encoding != PvmDataInPlace)
    return nxpvmi_err("pvm_mkbuf", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_new(encoding);
  if (b == NULL)
    return nxpvmi_err("pvm_mkbuf", PvmNoMem);
  int id = nxpvmi_buf_register(b);
  if (id < 0) {
    nxpvmi_buf_free(b);
    return nxpvmi_err("pvm_mkbuf", id);
  }
  return id;
}

int pvm_freebuf(int bufid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_freebuf", PvmBadParam);
  if (b == NULL)
    return nxpvmi_err("pvm_freebuf", PvmNoSuchBuf);
  if (b->queued) {
    /* A probed message that was never received: take it out of the queue. */
    nx_mutex_lock(&nxpvm.m);
    struct pvmbuf **pp = &nxpvm.qhead, *prev = NULL;
    while (*pp != NULL && *pp != b)
      prev = *pp, pp = &(*pp)->next;
    if (*pp == b) {
      *pp = b->next;
      if (nxpvm.qtail == b)
        nxpvm.qtail = prev;
    }
    nx_mutex_unlock(&nxpvm.m);
  }
  buf_unregister(b);
  nxpvmi_buf_free(b);
  return PvmOk;
}

/* Whether send buffer `b` may be emptied in place by pvm_initsend: what
 * freeing it and making a new one would give, the same id included (no
 * lower id is free), without the trip through the buffer cache. */
static int reusable(const struct pvmbuf *b) {
  if (b == NULL || b->id == nxpvm.rbuf || b->queued || b->held != NULL ||
      b->cap > CACHE_MAX_BYTES || b->segcap > 64)
    return 0;
  for (int i = 0; i < b->id - 1; i++)
    if (nxpvm.bufs[i] == NULL)
      return 0;
  return 1;
}

int pvm_initsend(int encoding) {
  if (encoding != PvmDataDefault && encoding != PvmDataRaw &&
      encoding != PvmDataInPlace)
    return nxpvmi_err("pvm_initsend", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.sbuf);
  if (reusable(b)) {
    buf_empty(b, b->id, encoding);
    return b->id;
  }
  if (nxpvm.sbuf > 0)
    pvm_freebuf(nxpvm.sbuf);
  int id = pvm_mkbuf(encoding);
  if (id < 0)
    return id;
  nxpvm.sbuf = id;
  return id;
}

int pvm_getsbuf(void) { return nxpvm.sbuf; }
int pvm_getrbuf(void) { return nxpvm.rbuf; }

int pvm_setsbuf(int bufid) {
  if (bufid < 0 || (bufid > 0 && nxpvmi_buf_get(bufid) == NULL))
    return nxpvmi_err("pvm_setsbuf", bufid < 0 ? PvmBadParam : PvmNoSuchBuf);
  int old = nxpvm.sbuf;
  nxpvm.sbuf = bufid;
  return old;
}

int pvm_setrbuf(int bufid) {
  if (bufid < 0 || (bufid > 0 && nxpvmi_buf_get(bufid) == NULL))
    return nxpvmi_err("pvm_setrbuf", bufid < 0 ? PvmBadParam : PvmNoSuchBuf);
  int old = nxpvm.rbuf;
  nxpvm.rbuf = bufid;
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b != NULL && b->queued) {
    /* Made active: it leaves the receive queue. */
    nx_mutex_lock(&nxpvm.m);
    struct pvmbuf **pp = &nxpvm.qhead, *prev = NULL;
    while (*pp != NULL && *pp != b)
      prev = *pp, pp = &(*pp)->next;
    if (*pp == b) {
      *pp = b->next;
      if (nxpvm.qtail == b)
        nxpvm.qtail = prev;
    }
    b->queued = 0;
    nx_mutex_unlock(&nxpvm.m);
  }
  return old;
}

int pvm_bufinfo(int bufid, int *bytes, int *msgtag, int *tid) {
  if (bufid <= 0)
    return nxpvmi_err("pvm_bufinfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_bufinfo", PvmNoSuchBuf);
  if (bytes != NULL)
    *bytes = (int)b->bytes;
  if (msgtag != NULL)
    *msgtag = b->tag;
  if (tid != NULL)
    *tid = b->src;
  return PvmOk;
}

#define PK(name, ctype, kind)                                                  \
  int pvm_pk##name(ctype *xp, int nitem, int stride) {                         \
    int rc = pack_into(nxpvmi_buf_get(nxpvm.sbuf), kind, xp, nitem, stride,    \
                       sizeof(ctype));                                         \
    return rc < 0 ? nxpvmi_err("pvm_pk" #name, rc) : rc;                       \
  }                                                                            \
  int pvm_upk##name(ctype *xp, int nitem, int stride) {                        \
    int rc = unpack_from(nxpvmi_buf_get(nxpvm.rbuf), kind, xp, nitem, stride,  \
                         sizeof(ctype));                                       \
    return rc < 0 ? nxpvmi_err("pvm_upk" #name, rc) : rc;                      \
  }

PK(byte, char, K_I8)
PK(short, short, K_I16)
PK(ushort, unsigned short, K_I16)
PK(int, int, K_I32)
PK(uint, unsigned int, K_I32)
PK(long, long, K_I64)
PK(ulong, unsigned long, K_I64)
PK(float, float, K_F32)
PK(double, double, K_F64)

/* A complex is two floats (two doubles): one item of twice the size. */
int pvm_pkcplx(float *xp, int nitem, int stride) {
  int rc = nxpvmi_pack(K_F32, xp, nitem, stride, 2 * sizeof(float));
  return rc < 0 ? nxpvmi_err("pvm_pkcplx", rc) : rc;
}
int pvm_upkcplx(float *xp, int nitem, int stride) {
  int rc = nxpvmi_unpack(K_F32, xp, nitem, stride, 2 * sizeof(float));
  return rc < 0 ? nxpvmi_err("pvm_upkcplx", rc) : rc;
}
int pvm_pkdcplx(double *xp, int nitem, int stride) {
  int rc = nxpvmi_pack(K_F64, xp, nitem, stride, 2 * sizeof(double));
  return rc < 0 ? nxpvmi_err("pvm_pkdcplx", rc) : rc;
}
int pvm_upkdcplx(double *xp, int nitem, int stride) {
  int rc = nxpvmi_unpack(K_F64, xp, nitem, stride, 2 * sizeof(double));
  return rc < 0 ? nxpvmi_err("pvm_upkdcplx", rc) : rc;
}

/* A string is one run of its characters and the NUL, so pvm_upkstr knows
 * where it ends. */
int pvm_pkstr(char *sp) {
  if (sp == NULL)
    return nxpvmi_err("pvm_pkstr", PvmBadParam);
  int rc = nxpvmi_pack(K_STR, sp, (int)strlen(sp) + 1, 1, 1);
  return rc < 0 ? nxpvmi_err("pvm_pkstr", rc) : rc;
}

int pvm_upkstr(char *sp) {
  struct pvmbuf *b = nxpvmi_buf_get(nxpvm.rbuf);
  if (b == NULL)
    return nxpvmi_err("pvm_upkstr", PvmNoBuf);
  if (sp == NULL)
    return nxpvmi_err("pvm_upkstr", PvmBadParam);
  if (b->rseg >= b->nseg || b->segs[b->rseg].kind != K_STR || b->relem != 0)
    return nxpvmi_err("pvm_upkstr", PvmNoData);
  struct seg *s = &b->segs[b->rseg];
  memcpy(sp, b->data + s->off, s->count);
  sp[s->count - 1] = '\0';
  b->rseg++;
  return PvmOk;
}

/* Typed helpers for psend/precv and the collectives. */
int nxpvmi_type_size(int t) {
  switch (t) {
  case PVM_BYTE: return 1;
  case PVM_SHORT:
  case PVM_USHORT: return (int)sizeof(short);
  case PVM_INT:
  case PVM_UINT: return (int)sizeof(int);
  case PVM_FLOAT: return (int)sizeof(float);
  case PVM_CPLX: return 2 * (int)sizeof(float);
  case PVM_DOUBLE: return (int)sizeof(double);
  case PVM_DCPLX: return 2 * (int)sizeof(double);
  case PVM_LONG:
  case PVM_ULONG: return (int)sizeof(long);
  default: return 0;
  }
}

static int type_kind(int t) {
  switch (t) {
  case PVM_BYTE: return K_I8;
  case PVM_SHORT:
  case PVM_USHORT: return K_I16;
  case PVM_INT:
  case PVM_UINT: return K_I32;
  case PVM_FLOAT:
  case PVM_CPLX: return K_F32;
  case PVM_DOUBLE:
  case PVM_DCPLX: return K_F64;
  case PVM_LONG:
  case PVM_ULONG: return K_I64;
  default: return 0;
  }
}

int nxpvmi_kind_of_type(int datatype) { return type_kind(datatype); }

/* Bytes of one element of `kind` (0 for no kind). */
size_t nxpvmi_kind_size(int kind) {
  return kind > 0 && kind < K_MAX ? kind_size[kind] : 0;
}

int nxpvmi_pack_type(int datatype, const void *p, int n) {
  int k = type_kind(datatype);
  if (k == 0)
    return PvmBadParam;
  return nxpvmi_pack(k, p, n, 1, (size_t)nxpvmi_type_size(datatype));
}

int nxpvmi_unpack_type(int datatype, void *p, int n) {
  int k = type_kind(datatype);
  if (k == 0)
    return PvmBadParam;
  return nxpvmi_unpack(k, p, n, 1, (size_t)nxpvmi_type_size(datatype));
}

/* ---- message info, messages inside messages, formatted packing ---- */

int pvm_getminfo(int bufid, struct pvmminfo *info) {
  if (bufid <= 0 || info == NULL)
    return nxpvmi_err("pvm_getminfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_getminfo", PvmNoSuchBuf);
  *info = (struct pvmminfo){.len = (int)b->bytes,
                            .ctx = b->ctx,
                            .tag = b->tag,
                            .wid = b->wid,
                            .enc = b->encoding,
                            .crc = 0,
                            .src = b->src,
                            .dst = b->dst};
  return PvmOk;
}

/* Sets what PVM lets a program set: context, tag, wait id, source and
 * destination (the length and encoding follow the contents). */
int pvm_setminfo(int bufid, struct pvmminfo *info) {
  if (bufid <= 0 || info == NULL)
    return nxpvmi_err("pvm_setminfo", PvmBadParam);
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (b == NULL)
    return nxpvmi_err("pvm_setminfo", PvmNoSuchBuf);
  b->ctx = info->ctx;
  b->tag = info->tag;
  b->wid = info->wid;
  b->src = info->src;
  b->dst = info->dst;
  return PvmOk;
}

int pvm_getmwid(int bufid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_getmwid", PvmBadParam);
  return b == NULL ? nxpvmi_err("pvm_getmwid", PvmNoSuchBuf) : b->wid;
}

int pvm_setmwid(int bufid, int wid) {
  struct pvmbuf *b = nxpvmi_buf_get(bufid);
  if (bufid < 0)
    return nxpvmi_err("pvm_setmwid", PvmBadParam);
  if (b == NULL)
    return nxpvmi_err("pvm_setmwid", PvmNoSuchBuf);
  b->wid = wid;
  return PvmOk;
}

/* The header a packed message carries, in ints, before its runs' kinds and
 * counts and then the runs themselves. */
enum {
  MH_LEN,
  MH_CTX,
  MH_TAG,
  MH_WID,
  MH_ENC,
  MH_CRC,
  MH_SRC,
  MH_DST,
  MH_NSEG,
  MH_N
};

/* Appends message `bufid`'s runs (and, with `header`, its header) to the
 * active send buffer. In-place runs are read now, through a copy. */
static int pack_message(const char *fn, int bufid, int header) {
  struct pvmbuf *sb = nxpvmi_buf_get(nxpvm.sbuf);
  struct pvmbuf *m = nxpvmi_buf_get(bufid);
  if (bufid <= 0)
    return nxpvmi_err(fn, PvmBadParam);
  if (m == NULL)
    return nxpvmi_err(fn, PvmNoSuchBuf);
  if (sb == NULL)
    return nxpvmi_err(fn, PvmNoBuf);
  if (m == sb)
    return nxpvmi_err(fn, PvmBadParam);
  struct pvmbuf *c = nxpvmi_buf_clone(m);
  if (c == NULL)
    return nxpvmi_err(fn, PvmNoMem);
  int rc = PvmOk;
  if (header) {
    int h[MH_N] = {
        [MH_LEN] = (int)m->bytes, [MH_CTX] = m->ctx,      [MH_TAG] = m->tag,
        [MH_WID] = m->wid,        [MH_ENC] = m->encoding, [MH_SRC] = m->src,
        [MH_DST] = m->dst,        [MH_NSEG] = c->nseg};
    rc = nxpvmi_pack_into(sb, K_I32, h, MH_N, 1, sizeof(int));
    for (int i = 0; rc == 0 && i < c->nseg; i++) {
      int kc[2] = {c->segs[i].kind, (int)c->segs[i].count};
      rc = nxpvmi_pack_into(sb, K_I32, kc, 2, 1, sizeof(int));
    }
  }
  for (int i = 0; rc == 0 && i < c->nseg; i++) {
    const struct seg *s = &c->segs[i];
    size_t ks = kind_size[s->kind];
    if (s->count > (size_t)0x7fffffff)
      rc = PvmOverflow;
    else
      rc =
          nxpvmi_pack_into(sb, s->kind, c->data + s->off, (int)s->count, 1, ks);
  }
  nxpvmi_buf_free(c);
  return rc < 0 ? nxpvmi_err(fn, rc) : PvmOk;
}

int pvm_pkmesg(int bufid) { return pack_message("pvm_pkmesg", bufid, 1); }

int pvm_pkmesgbody(int bufid) {
  return pack_message("pvm_pkmesgbody", bufid, 0);
}

/* Takes a message packed by pvm_pkmesg out of the active receive buffer
 * into a new buffer, and returns its id. */
int pvm_upkmesg(void) {
  struct pvmbuf *rb = nxpvmi_buf_get(nxpvm.rbuf);
  if (rb == NULL)
    return nxpvmi_err("pvm_upkmesg", PvmNoBuf);
  int h[MH_N];
  int rc = nxpvmi_unpack_from(rb, K_I32, h, MH_N, 1, sizeof(int));
  if (rc < 0)
    return nxpvmi_err("pvm_upkmesg", rc);
  if (h[MH_NSEG] < 0 || (size_t)h[MH_NSEG] > rb->bytes)
    return nxpvmi_err("pvm_upkmesg", PvmBadMsg);
  struct pvmbuf *m =
      nxpvmi_buf_new(h[MH_ENC] == PvmDataInPlace ? PvmDataRaw : h[MH_ENC]);
  int *kc = malloc(2 * (size_t)h[MH_NSEG] * sizeof(int) + 1);
  if (m == NULL || kc == NULL) {
    rc = PvmNoMem;
    goto err;
  }
  rc = nxpvmi_unpack_from(rb, K_I32, kc, 2 * h[MH_NSEG], 1, sizeof(int));
  for (int i = 0; rc == 0 && i < h[MH_NSEG]; i++) {
    int kind = kc[2 * i], count = kc[2 * i + 1];
    size_t off;
    struct seg *s;
    if (kind < K_I8 || kind >= K_MAX || count <= 0 ||
        (size_t)count * kind_size[kind] > rb->bytes) {
      rc = PvmBadMsg;
      break;
    }
    if (arena_grow(m, (size_t)count * kind_size[kind], &off) < 0 ||
        (s = seg_add(m)) == NULL) {
      rc = PvmNoMem;
      break;
    }
    *s = (struct seg){kind, (size_t)count, off, NULL, 1, kind_size[kind]};
    rc = nxpvmi_unpack_from(rb, kind, m->data + off, count, 1, kind_size[kind]);
    m->bytes += (size_t)count * kind_size[kind];
  }
  if (rc < 0)
    goto err;
  free(kc);
  m->ctx = h[MH_CTX];
  m->tag = h[MH_TAG];
  m->wid = h[MH_WID];
  m->src = h[MH_SRC];
  m->dst = h[MH_DST];
  rc = nxpvmi_buf_register(m);
  if (rc < 0) {
    nxpvmi_buf_free(m);
    return nxpvmi_err("pvm_upkmesg", rc);
  }
  return rc;
err:
  free(kc);
  nxpvmi_buf_free(m);
  return nxpvmi_err("pvm_upkmesg", rc);
}

/* One conversion of a pvm_packf/pvm_unpackf format: `%[*|n][.*|.n][hlu]c`
 * with c one of c d f x s. A count or a stride makes the argument an
 * address; without either, pvm_packf takes a value. */
struct fmtconv {
  int cnt, std, isv, h, l;
  char c;
};

static const char *fmt_next(const char *p, va_list *ap, struct fmtconv *f) {
  *f = (struct fmtconv){.cnt = 1, .std = 1, .isv = 1};
  if (*p == '*') {
    f->cnt = va_arg(*ap, int);
    f->isv = 0;
    p++;
  } else if (isdigit((unsigned char)*p)) {
    f->cnt = (int)strtol(p, (char **)&p, 10);
    f->isv = 0;
  }
  if (*p == '.') {
    f->isv = 0;
    p++;
    if (*p == '*') {
      f->std = va_arg(*ap, int);
      p++;
    } else if (isdigit((unsigned char)*p)) {
      f->std = (int)strtol(p, (char **)&p, 10);
    }
  }
  for (;; p++) {
    if (*p == 'h')
      f->h = 1;
    else if (*p == 'l')
      f->l = 1;
    else if (*p != 'u')
      break;
  }
  f->c = *p;
  return *p != '\0' ? p + 1 : p;
}

int pvm_packf(const char *fmt, ...) {
  if (fmt == NULL)
    return nxpvmi_err("pvm_packf", PvmBadParam);
  va_list ap;
  va_start(ap, fmt);
  const char *p = fmt;
  int rc = PvmOk;
  if (p[0] == '%' && p[1] == '+') {
    rc = pvm_initsend(va_arg(ap, int));
    p += 2;
  }
  if (rc >= 0 && nxpvmi_buf_get(nxpvm.sbuf) == NULL)
    rc = PvmNoBuf;
  while (rc >= 0 && *p != '\0') {
    if (*p++ != '%')
      continue;
    struct fmtconv f;
    p = fmt_next(p, &ap, &f);
    char c;
    short h;
    int n;
    long l;
    float fl;
    double d;
    switch (f.c) {
    case 'c':
      c = f.isv ? (char)va_arg(ap, int) : 0;
      rc = nxpvmi_pack(K_I8, f.isv ? &c : va_arg(ap, char *), f.cnt, f.std, 1);
      break;
    case 'd':
      if (f.l) {
        l = f.isv ? va_arg(ap, long) : 0;
        rc = nxpvmi_pack(K_I64, f.isv ? &l : va_arg(ap, long *), f.cnt, f.std,
                         sizeof(long));
      } else if (f.h) {
        h = f.isv ? (short)va_arg(ap, int) : 0;
        rc = nxpvmi_pack(K_I16, f.isv ? &h : va_arg(ap, short *), f.cnt, f.std,
                         sizeof(short));
      } else {
        n = f.isv ? va_arg(ap, int) : 0;
        rc = nxpvmi_pack(K_I32, f.isv ? &n : va_arg(ap, int *), f.cnt, f.std,
                         sizeof(int));
      }
      break;
    case 'f':
      if (f.l) {
        d = f.isv ? va_arg(ap, double) : 0;
        rc = nxpvmi_pack(K_F64, f.isv ? &d : va_arg(ap, double *), f.cnt, f.std,
                         sizeof(double));
      } else {
        fl = f.isv ? (float)va_arg(ap, double) : 0;
        rc = nxpvmi_pack(K_F32, f.isv ? &fl : va_arg(ap, float *), f.cnt, f.std,
                         sizeof(float));
      }
      break;
    case 'x': /* complex values are always passed by address */
      if (f.l)
        rc = nxpvmi_pack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                         2 * sizeof(double));
      else
        rc = nxpvmi_pack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                         2 * sizeof(float));
      break;
    case 's': rc = pvm_pkstr(va_arg(ap, char *)); break;
    default: rc = PvmBadParam;
    }
  }
  va_end(ap);
  return rc < 0 ? nxpvmi_err("pvm_packf", rc) : PvmOk;
}

int pvm_unpackf(const char *fmt, ...) {
  if (fmt == NULL)
    return nxpvmi_err("pvm_unpackf", PvmBadParam);
  va_list ap;
  va_start(ap, fmt);
  const char *p = fmt;
  int rc = nxpvmi_buf_get(nxpvm.rbuf) == NULL ? PvmNoBuf : PvmOk;
  while (rc >= 0 && *p != '\0') {
    if (*p++ != '%')
      continue;
    struct fmtconv f;
    p = fmt_next(p, &ap, &f);
    switch (f.c) {
    case 'c':
      rc = nxpvmi_unpack(K_I8, va_arg(ap, char *), f.cnt, f.std, 1);
      break;
    case 'd':
      if (f.l)
        rc = nxpvmi_unpack(K_I64, va_arg(ap, long *), f.cnt, f.std,
                           sizeof(long));
      else if (f.h)
        rc = nxpvmi_unpack(K_I16, va_arg(ap, short *), f.cnt, f.std,
                           sizeof(short));
      else
        rc = nxpvmi_unpack(K_I32, va_arg(ap, int *), f.cnt, f.std, sizeof(int));
      break;
    case 'f':
      if (f.l)
        rc = nxpvmi_unpack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                           sizeof(double));
      else
        rc = nxpvmi_unpack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                           sizeof(float));
      break;
    case 'x':
      if (f.l)
        rc = nxpvmi_unpack(K_F64, va_arg(ap, double *), f.cnt, f.std,
                           2 * sizeof(double));
      else
        rc = nxpvmi_unpack(K_F32, va_arg(ap, float *), f.cnt, f.std,
                           2 * sizeof(float));
      break;
    case 's': rc = pvm_upkstr(va_arg(ap, char *)); break;
    default: rc = PvmBadParam;
    }
  }
  va_end(ap);
  return rc < 0 ? nxpvmi_err("pvm_unpackf", rc) : PvmOk;
}
