/* Message buffers inside the core: the struct behind nx_buffer_t, its memory
 * (bufmem.c) and the helpers the gp encoding shares (buffer.c). */
#ifndef NXI_BUF_H
#define NXI_BUF_H

#include "base/mpscq.h"
#include "base/rt.h"
#include "nxu_copy.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Buffers. A slot of type-stable memory (bufmem.c) holds the struct, the
 * frame header and up to 192 payload bytes; a larger payload is apart. */
enum nxi_buf_kind {
  NXI_BUF_STANDALONE = 0, /* nx_buffer_create: put and get */
  NXI_BUF_SEND = 1,       /* nx_rsr_init: put only, consumed by send */
  NXI_BUF_RECV = 2        /* delivered to a handler: get only */
};

/* Each value starts with a one-byte tag; arrays set NXI_TAG_ARRAY and are
 * followed by a 32-bit count in the buffer's byte order. */
enum {
  NXI_TAG_INT8 = 1,
  NXI_TAG_UINT8,
  NXI_TAG_INT16,
  NXI_TAG_UINT16,
  NXI_TAG_INT32,
  NXI_TAG_UINT32,
  NXI_TAG_INT64,
  NXI_TAG_UINT64,
  NXI_TAG_FLOAT,
  NXI_TAG_DOUBLE,
  NXI_TAG_CHAR,
  NXI_TAG_BYTES,
  NXI_TAG_GP,
  NXI_TAG_TYPE = 0x1f,    /* the type bits */
  NXI_TAG_FLIPPED = 0x20, /* array elements in the order opposite `fmt` */
  NXI_TAG_PADDED = 0x40,  /* array with a pad byte count: aligned elements */
  NXI_TAG_ARRAY = 0x80
};

/* The values a buffer holds by reference (nx_put_*_ref, bufref.c), in put
 * order. A ref with `p` NULL was copied into the data; its callback is
 * still owed. */
struct nxi_ref {
  size_t at;     /* where in the data the referenced bytes belong */
  const void *v; /* the program's pointer, given back to fn */
  const void *p; /* v while held by reference, else NULL */
  size_t len;
  nx_release_fn fn;
  void *arg;
};
struct nxi_refs {
  uint32_t n, cap;
  uint32_t live; /* refs with p != NULL, at most NX_BUFFER_REFS_MAX */
  int status;    /* passed to the callbacks */
  size_t bytes;  /* payload bytes held by reference */
  struct nxi_ref *r;
  struct iovec iov[NX_FRAME_IOV_MAX];
};

/* Copies of unaligned arrays that a get in place made (bufref.c). */
struct nxi_side {
  struct nxi_side *next;
  _Alignas(16) uint8_t data[];
};

struct nx_context;
struct nxi_peer;

struct nx_buffer {
  /* First, and never poisoned while the slot is free (bufmem.c): read by
   * nx_rsr_send and nx_buffer_release through pointers the program may no
   * longer hold. The program's share of `refs`: NXI_UREFS_RSR for an
   * unsent RSR buffer, else a count; 0 once the program holds none, and
   * in a free slot. Changed only atomically, by compare-and-swap where a
   * stale pointer may race. */
  atomic_uint urefs;
  struct nx_buffer *free_next; /* in a list of free slots (bufmem.c) */
  nx_frame_t frame; /* what modules see; iov[0] = hdr, iov[1] = payload */
  struct nxi_qnode qnode;
  uint8_t *data;
  size_t cap;
  size_t len;
  size_t pos;
  atomic_uint refs; /* all references; the last one frees */
  uint8_t kind;
  uint8_t fmt;
  uint8_t data_heap; /* data was reallocated outside the block */
  uint8_t ctl;       /* SEND: the runtime's own message, outside the ledger:
                      * its header flags (NXI_FRAME_F_*, ledger.h), or 0 */
  uint32_t handler;
  uint64_t context;
  uint64_t address;
  uint64_t source; /* the sending context's id (header), or 0 */
  uint32_t order;  /* its number in an ordered stream (order.h), or 0 */
  uint16_t hflags; /* the header's flags (ledger.h), as sent or received */
  /* Receive placement (docs/design.md): the payload offset where the
   * trailing array's elements start (the lead), 0 when there is none, and
   * the payload's length they run to. SEND: set by the last array put,
   * valid while nothing follows it (tail_end is the payload's length);
   * RECV: as the header said. */
  uint32_t tail_at;
  int32_t place_status; /* RECV: what nx_buffer_placement answers */
  uint64_t tail_end;
  void *place; /* RECV: where the tail's elements were placed, or NULL */
  struct nxi_dlist *dl;   /* SEND: destination's descriptors (not owned) */
  struct nx_context *ctx; /* RECV, queued for a thread: target (ref) */
  nx_handler_fn fn;
  struct nxi_fiber *fiber; /* RECV, threaded: the stack its handler runs on */
  struct nxi_refs *xr;     /* SEND: values put by reference, or NULL */
  struct nxi_side *side;   /* copies made by gets in place, or NULL */
  struct nxi_ostream *ostream; /* RECV, ordered: admitted to run (order.h) */
  struct nx_buffer *held_next; /* RECV, ordered: held beside it */
  struct nxi_peer *peer;       /* SEND: its entry in the ledger (ledger.h) */
  uint64_t seq;                /* ... and that entry's place there */
  uint8_t gen;                 /* ... and the generation of its route */
  uint8_t own_tracked;         /* RECV, owned: on the list of retained ones */
  uint8_t traced;              /* SEND: its NXT_SEND is in the trace */
  uint8_t threaded; /* RECV: for a threaded or new-thread handler (trace) */
  /* RECV: a payload the module owns (frame_wrap): `data` is the module's,
   * given back with own_release(own_arg, data); NULL otherwise. */
  void (*own_release)(void *arg, void *data);
  void *own_arg;
  struct nx_buffer *own_prev, *own_next; /* the list of retained ones */
  uint8_t hdr[NX_FRAME_HDR_SIZE];
  _Alignas(16) uint8_t inline_data[];
};

/* Payloads above this get a block of their own (bufmem.c), below it
 * malloc. */
#define NXI_INLINE_MAX (64 * 1024)

/* Memory (bufmem.c): a buffer with room for `cap` payload bytes, and its
 * end; large payload blocks for a buffer that grows. The common case of
 * both is inline (once per RSR each, on both of its ends): a slot from
 * this thread's cache and back, no call. The rest is bufmem.c's. */
#define NXI_INLINE_MIN 192 /* payload bytes inside the slot */
#if defined(__SANITIZE_ADDRESS__)
#define NXI_SLOT_CACHE_MAX 0 /* slots reused late, so use-after-free shows */
#else
#define NXI_SLOT_CACHE_MAX 64
#endif
struct nxi_slot_cache {
  struct nx_buffer *head; /* linked by free_next */
  int count;
  int registered; /* drained into the shared list when the thread ends */
};
extern NXI_TLS struct nxi_slot_cache nxi_slot_cache;
struct nx_buffer *nxi_slot_get_shared(void);
void nxi_slot_put_slow(struct nx_buffer *b);
struct nx_buffer *nxi_buffer_data_apart(struct nx_buffer *b, size_t cap);
void nxi_buffer_free_extras(struct nx_buffer *b);
static inline struct nx_buffer *nxi_buffer_alloc(size_t cap);
static inline void nxi_buffer_free(struct nx_buffer *b);
void *nxi_block_get(size_t n, size_t *size);
void nxi_block_put(void *p, size_t size);

/* `urefs` of an unsent RSR buffer (nx_rsr_init): nx_rsr_send and
 * nx_buffer_release take it by compare-and-swap to 0, so a second send or a
 * release after the send finds 0 and is refused (bufmem.c says why reading
 * it is safe). */
#define NXI_UREFS_RSR 0x80000000u

/* Payloads a module owns (bufmem.c; frame_wrap in protocol.h). own makes
 * `data` (len bytes) a fresh buffer's payload, given back with
 * release(arg, data) when the buffer is freed. own_track puts a retained one
 * on the list that unwrap_all empties at nx_finalize, before the modules
 * go; unwrap copies one payload into the core's memory and gives the
 * module's back (a gateway passing the buffer on). Both unwraps return 0
 * or NX_ENOMEM (the payload is then lost: the buffer reads as empty). */
void nxi_buffer_own(struct nx_buffer *b, void *data, size_t len,
                    void (*release)(void *arg, void *data), void *arg);
void nxi_buffer_own_track(struct nx_buffer *b);
int nxi_buffer_unwrap(struct nx_buffer *b);
void nxi_buffer_unwrap_all(void);
/* Drops one reference to `b`; the last one frees it. A count of one is
 * the caller's alone: nobody else can be retaining it (that needs a
 * reference), so it is freed without a locked operation. */
static inline void nxi_buffer_unref(struct nx_buffer *b) {
  if (atomic_load_explicit(&b->refs, memory_order_acquire) == 1 ||
      atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
    nxi_buffer_free(b);
}
/* Releases the runtime's hold on a handler's buffer. */
static inline void nxi_buffer_handler_done(struct nx_buffer *b) {
  nxi_buffer_unref(b);
}
/* Encodes the frame header from the buffer's fields and sets up the iovs. */
void nxi_buffer_seal(struct nx_buffer *b);
/* Moves the payload to a larger block, with room for `extra` more bytes
 * (bufmem.c); 0 or NX_ENOMEM. */
int nxi_buffer_grow(struct nx_buffer *b, size_t extra);
/* Makes room for `extra` more payload bytes; 0 or NX_ENOMEM. Inline: a put
 * almost always finds the room there, and then costs no call. */
static inline int nxi_buffer_reserve(struct nx_buffer *b, size_t extra) {
  if (__builtin_expect(b->cap - b->len >= extra, 1))
    return 0;
  return nxi_buffer_grow(b, extra);
}

/* References (bufref.c). The payload's length on the wire (data and
 * references). */
static inline size_t nxi_buffer_wire_len(const struct nx_buffer *b) {
  return b->len + (b->xr != NULL ? b->xr->bytes : 0);
}
/* Notes a put array's elements, [at, end) of the payload, as the tail
 * that a receiver may place, if they are large enough; a later put makes
 * the payload end elsewhere (nxi_buffer_seal looks). */
static inline void nxi_buffer_tail_note(struct nx_buffer *b, size_t at,
                                        size_t end) {
  if (end - at >= NX_PLACE_MIN && at <= UINT16_MAX) {
    b->tail_at = (uint32_t)at;
    b->tail_end = end;
  }
}
/* Sets up the frame's iovecs over the data and the references. */
void nxi_buffer_refs_iov(struct nx_buffer *b);
/* Copies the referenced values into the data and calls their callbacks
 * (status 0); 0 or NX_ENOMEM. Seal again before sending. */
int nxi_buffer_flatten(struct nx_buffer *b);
/* The status the callbacks will get, if the buffer holds references. */
static inline void nxi_buffer_refs_status(struct nx_buffer *b, int status) {
  if (b->xr != NULL)
    b->xr->status = status;
}
/* Calls the callbacks owed (bufmem.c; nxi_buffer_free calls them too). */
void nxi_buffer_refs_done(struct nx_buffer *b);

static inline int nxi_buffer_writable(const struct nx_buffer *b) {
  return b != NULL && b->kind != NXI_BUF_RECV;
}

/* This machine's data format (nx_format_native). */
static inline int nxi_format_native(void) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  return NX_FORMAT_LITTLE;
#else
  return NX_FORMAT_BIG;
#endif
}

static inline int nxi_buffer_swapped(const struct nx_buffer *b) {
  return b->fmt != nxi_format_native();
}

/* Copies `n` payload bytes. glibc 2.36's memcpy copies from 2 KiB up to
 * the L2 size (1 MiB here) with `rep movsb`, which on this machine's AMD
 * EPYC (family 25, model 17) runs 10-20 times slower when the destination
 * lies 1 to 63 bytes past the source within a page: the case of a program
 * array put into a payload at offset 5 of a page-aligned block. That case
 * is copied with 16-byte vector moves instead. bench/bench_copy.c times
 * both in one run (2026-11-26, memcpy / nxi_copy): 13.9x at 4 KiB, 13.1x
 * at 64 KiB and 128 KiB, 13.5x at 1020 KiB; unskewed copies and other
 * skews take plain memcpy (0.99-1.01x). From 1 MiB on glibc no longer
 * uses `rep movsb` and the vector loop lost (0.79x), hence the bound. */
static inline void nxi_copy(void *dst, const void *src, size_t n) {
#if defined(__SSE2__)
  size_t skew = ((uintptr_t)dst - (uintptr_t)src) & 4095;
  if (n >= 4096 && n < ((size_t)1 << 20) && skew != 0 && skew < 64) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)s);
      __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
      __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
      _mm_storeu_si128((__m128i *)d, a);
      _mm_storeu_si128((__m128i *)(d + 16), b);
      _mm_storeu_si128((__m128i *)(d + 32), c);
      _mm_storeu_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
    return;
  }
#endif
  memcpy(dst, src, n);
}

/* Copies `n` payload bytes as nxi_copy does, a small value's (up to 32
 * bytes, a few elements: the common RSR) inline (nxu_copy.h). The typed
 * puts and gets use it on their inline path (buffer.c). */
static inline void nxi_copy_short(void *dst, const void *src, size_t n) {
  if (n <= 32)
    nxu_copy_small(dst, src, n);
  else
    nxi_copy(dst, src, n);
}

/* Copies `count` elements of `size` bytes, reversing each one's bytes when
 * `swap` is set. */
static inline void nxi_copy_elems(uint8_t *dst, const uint8_t *src, size_t size,
                                  size_t count, int swap) {
  if (!swap || size == 1) {
    nxi_copy(dst, src, size * count);
    return;
  }
  for (size_t i = 0; i < count; i++, dst += size, src += size)
    for (size_t j = 0; j < size; j++)
      dst[j] = src[size - 1 - j];
}

/* Reverses the bytes of each of `count` elements of `size` bytes. */
static inline void nxi_swap_elems(uint8_t *p, size_t size, size_t count) {
  for (size_t i = 0; i < count; i++, p += size)
    for (size_t j = 0; j < size / 2; j++) {
      uint8_t t = p[j];
      p[j] = p[size - 1 - j];
      p[size - 1 - j] = t;
    }
}

/* A put by reference of `count` elements of `size` bytes (bufref.c). */
int nxi_put_array_ref(struct nx_buffer *b, uint8_t tag, const void *v,
                      size_t size, size_t count, nx_release_fn fn, void *arg);
/* An aligned copy of `len` bytes that lives as long as the buffer; NULL
 * when out of memory. */
void *nxi_buffer_side_copy(struct nx_buffer *b, const void *p, size_t len);

/* Zeroes `n` bytes (a constant) at `p` with 16-byte stores. gcc makes a
 * memset of the buffer's ~300 bytes of fields a `rep stos`, which counts
 * an instruction per 8 bytes (44 per buffer, callgrind): most of what an
 * RSR's buffer cost to make (docs/performance.md). */
static inline void nxi_zero_fields(void *p, size_t n) {
#if defined(__SSE2__)
  uint8_t *d = p;
  __m128i z = _mm_setzero_si128();
  __asm__("" : "+x"(z)); /* opaque: not turned back into a memset */
  /* Unrolled whole (n is a constant): at 19 stores gcc kept the loop, 3
   * instructions a store more (callgrind). */
#pragma GCC unroll 32
  for (; n >= 16; n -= 16, d += 16)
    _mm_storeu_si128((__m128i *)d, z);
  memset(d, 0, n);
#else
  memset(p, 0, n);
#endif
}

static inline struct nx_buffer *nxi_buffer_alloc(size_t cap) {
  if (cap > SIZE_MAX / 2)
    return NULL; /* a hint no memory can hold */
  struct nx_buffer *b = nxi_slot_cache.head;
  if (__builtin_expect(b != NULL, 1)) {
    nxi_slot_cache.head = b->free_next;
    nxi_slot_cache.count--;
  } else if ((b = nxi_slot_get_shared()) == NULL) {
    return NULL;
  }
  /* Every field but `urefs` and `free_next` (which a stale pointer's check
   * may read at any time) and the header bytes (written when sealed or
   * received) starts at zero. */
  nxi_zero_fields(&b->frame, offsetof(struct nx_buffer, hdr) -
                                 offsetof(struct nx_buffer, frame));
  atomic_init(&b->refs, 1);
  b->data = b->inline_data;
  b->cap = NXI_INLINE_MIN;
  b->fmt = (uint8_t)nxi_format_native();
  if (__builtin_expect(cap > NXI_INLINE_MIN, 0))
    return nxi_buffer_data_apart(b, cap);
  return b;
}

/* Frees the slot: `urefs` reads 0 from here on, which refuses the pointer
 * (rsr.c, buffer.c). The usual buffer holds nothing beside its slot: no
 * call; it goes into this thread's cache. */
static inline void nxi_buffer_free(struct nx_buffer *b) {
  if (__builtin_expect(b->own_release != NULL || b->own_tracked ||
                           b->xr != NULL || b->side != NULL || b->data_heap,
                       0))
    nxi_buffer_free_extras(b);
  atomic_store_explicit(&b->urefs, 0, memory_order_release);
  if (__builtin_expect(!nxi_slot_cache.registered ||
                           nxi_slot_cache.count >= NXI_SLOT_CACHE_MAX,
                       0)) {
    nxi_slot_put_slow(b);
    return;
  }
  b->free_next = nxi_slot_cache.head;
  nxi_slot_cache.head = b;
  nxi_slot_cache.count++;
}

#endif /* NXI_BUF_H */
