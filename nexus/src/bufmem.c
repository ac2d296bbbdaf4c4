/* Memory behind message buffers: a per-thread cache of small buffers and a
 * shared cache of large payload blocks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "buffer_cache.h"
#include "nxu_opt.h"

/* The smallest payload room; RSRs that fit share the per-thread cache. */
#define INLINE_MIN 192
#define INLINE_MAX NXI_INLINE_MAX

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
void *nxi_block_get(size_t n, size_t *size) {
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

void nxi_block_put(void *p, size_t size) {
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
  uint64_t v;
  char why[128];
  if (nxu_opt_number("NX_BUFFER_CACHE", &v, why, sizeof(why)) < 0) {
    nxi_log(0, NULL, "%s", why);
    return NX_EINVAL;
  }
  size_t cap = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
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
    uint8_t *d = nxi_block_get(cap, &size);
    if (d == NULL) {
      free(b);
      return NULL;
    }
    b->data = d;
    b->data_heap = 1;
    b->cap = size;
  }
  b->fmt = (uint8_t)nxi_format_native();
  return b;
}

void nxi_buffer_refs_done(struct nx_buffer *b) {
  /* Each callback once: the list is emptied before any runs, so a
   * callback that frees or reuses memory cannot see it again. */
  struct nxi_refs *x = b->xr;
  uint32_t n = x->n;
  x->n = 0;
  x->live = 0;
  x->bytes = 0;
  for (uint32_t i = 0; i < n; i++)
    x->r[i].fn(x->r[i].arg, x->r[i].v, x->status);
}

/* What zero copy hung on a buffer: callbacks still owed (for a buffer
 * released unsent, or an RSR that failed), and aligned copies. */
static void refs_free(struct nx_buffer *b) {
  if (b->xr != NULL) {
    nxi_buffer_refs_done(b);
    free(b->xr->r);
    free(b->xr);
    b->xr = NULL;
  }
  while (b->side != NULL) {
    struct nxi_side *s = b->side;
    b->side = s->next;
    free(s);
  }
}

int nxi_buffer_reserve(struct nx_buffer *b, size_t extra) {
  if (b->cap - b->len >= extra)
    return 0;
  if (extra > SIZE_MAX / 2 - b->len)
    return NX_ENOMEM;
  size_t cap = b->cap * 2;
  if (cap < b->len + extra)
    cap = b->len + extra;
  /* Not realloc: a large block must stay page-aligned (bufmem.c). */
  uint8_t *d = cap > NXI_INLINE_MAX ? nxi_block_get(cap, &cap) : malloc(cap);
  if (d == NULL)
    return NX_ENOMEM;
  memcpy(d, b->data, b->len);
  if (b->data_heap)
    nxi_block_put(b->data, b->cap);
  b->data = d;
  b->data_heap = 1;
  b->cap = cap;
  return 0;
}

static void own_end(struct nx_buffer *b);

void nxi_buffer_free(struct nx_buffer *b) {
  if (b->own_release != NULL || b->own_tracked)
    own_end(b);
  if (b->xr != NULL || b->side != NULL)
    refs_free(b);
  if (b->data_heap) {
    nxi_block_put(b->data, b->cap);
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

/* Payloads a module owns (frame_wrap): the module's memory is the payload
 * until the buffer is freed, when it goes back with own_release. A buffer
 * the program retained may outlive the module (nx_finalize unloads it), so
 * retained ones sit on a list, and nx_finalize copies their payloads out
 * and gives the module's memory back before the modules go
 * (nxi_buffer_unwrap_all). Only retained ones: the others the runtime
 * frees before it unloads the modules, so the usual RSR takes no lock
 * here. The list's lock is taken before a module's (release runs under
 * it at nx_finalize); no module frees a retained buffer under its own. */
static struct {
  pthread_mutex_t lock;
  struct nx_buffer *head;
} owned = {.lock = PTHREAD_MUTEX_INITIALIZER};

void nxi_buffer_own(struct nx_buffer *b, void *data, size_t len,
                    void (*release)(void *arg, void *data), void *arg) {
  b->data = data;
  b->len = len;
  b->own_release = release;
  b->own_arg = arg;
}

void nxi_buffer_own_track(struct nx_buffer *b) {
  pthread_mutex_lock(&owned.lock);
  if (b->own_release != NULL && !b->own_tracked) {
    b->own_prev = NULL;
    b->own_next = owned.head;
    if (owned.head != NULL)
      owned.head->own_prev = b;
    owned.head = b;
    b->own_tracked = 1;
  }
  pthread_mutex_unlock(&owned.lock);
}

static void own_unlink(struct nx_buffer *b) {
  if (b->own_prev != NULL)
    b->own_prev->own_next = b->own_next;
  else
    owned.head = b->own_next;
  if (b->own_next != NULL)
    b->own_next->own_prev = b->own_prev;
}

/* Frees: the module's memory goes back, and the buffer (made with room for
 * INLINE_MIN bytes, data_heap 0) is freed as any other. A retained one
 * that nx_finalize unwrapped holds core memory by now. */
static void own_end(struct nx_buffer *b) {
  void (*release)(void *, void *) = b->own_release;
  if (b->own_tracked) {
    pthread_mutex_lock(&owned.lock);
    release = b->own_release;
    if (release != NULL)
      own_unlink(b);
    b->own_release = NULL;
    pthread_mutex_unlock(&owned.lock);
  } else {
    b->own_release = NULL;
  }
  if (release != NULL) {
    release(b->own_arg, b->data);
    b->data = b->inline_data;
  }
}

/* Copies the payload into the core's memory and gives the module's back. */
static int own_copy(struct nx_buffer *b) {
  void *data = b->data;
  size_t len = b->len, cap = INLINE_MIN;
  uint8_t *d = b->inline_data;
  if (len > INLINE_MIN)
    d = len > INLINE_MAX ? nxi_block_get(len, &cap) : malloc(cap = len);
  int r = 0;
  if (d == NULL) {
    nxi_log(0, NULL,
            "no memory for a copy of a received payload of %zu "
            "bytes: the buffer is now empty",
            len);
    d = b->inline_data;
    cap = INLINE_MIN;
    b->len = 0;
    r = NX_ENOMEM;
  } else {
    memcpy(d, data, len);
  }
  b->own_release(b->own_arg, data);
  b->own_release = NULL;
  b->data = d;
  b->cap = cap;
  b->data_heap = d != b->inline_data;
  b->frame.iov[1].iov_base = d;
  b->frame.iov[1].iov_len = b->len;
  return r;
}

int nxi_buffer_unwrap(struct nx_buffer *b) {
  if (b->own_release == NULL)
    return 0;
  if (!b->own_tracked)
    return own_copy(b);
  pthread_mutex_lock(&owned.lock);
  int r = 0;
  if (b->own_release != NULL) {
    own_unlink(b);
    r = own_copy(b);
  }
  pthread_mutex_unlock(&owned.lock);
  return r;
}

void nxi_buffer_unwrap_all(void) {
  pthread_mutex_lock(&owned.lock);
  while (owned.head != NULL) {
    struct nx_buffer *b = owned.head;
    own_unlink(b);
    own_copy(b);
  }
  pthread_mutex_unlock(&owned.lock);
}

/* The buffers the program holds, so that nx_rsr_send and
 * nx_buffer_release refuse one it gave away (sent, released) without reading
 * memory the runtime may have freed meanwhile (docs/design.md, "Buffer
 * ownership"): unsent RSR buffers (NXI_LIVE_RSR: made by nx_rsr_init,
 * neither sent nor released) and buffers the program holds references to
 * (NXI_LIVE_HELD: stand-alone, or received and retained). A buffer's `urefs`
 * changes only under its shard's lock, so an entry is there exactly while
 * urefs > 0. Sharded by address. Unsent RSR buffers, the hot path (one
 * insert at init, one removal at send, usually the last entry), sit in a
 * short array scanned from its end; held buffers, which may be many and
 * long-lived (fm and pvm queues), in an open-addressing hash set (linear
 * probing) that the RSR path never touches. Entries are stored
 * complemented (0 marks an empty slot), so LeakSanitizer does not take the
 * registry for a reference and still reports a buffer the program leaks. */
#define LIVE_SHARDS 64
static struct live_shard {
  atomic_bool busy;
  uint32_t n, cap;   /* unsent RSR buffers */
  uint32_t hn, mask; /* held buffers; slots - 1 (0 while there is no set) */
  uintptr_t *v;      /* unsent RSR buffers, complemented */
  uintptr_t *slot;   /* held buffers, complemented; 0 = empty */
} live[LIVE_SHARDS];

static struct live_shard *live_shard(const struct nx_buffer *b) {
  uintptr_t a = (uintptr_t)b;
  return &live[(a >> 6 ^ a >> 12) % LIVE_SHARDS];
}

static void live_lock(struct live_shard *s) {
  while (atomic_exchange_explicit(&s->busy, 1, memory_order_acquire))
    ;
}

static void live_unlock(struct live_shard *s) {
  atomic_store_explicit(&s->busy, 0, memory_order_release);
}

/* The unsent RSR buffers. */

static int rsr_add(struct live_shard *s, const struct nx_buffer *b) {
  if (s->n == s->cap) {
    uint32_t cap = s->cap ? s->cap * 2 : 16;
    uintptr_t *v = realloc(s->v, cap * sizeof(*v));
    if (v == NULL)
      return NX_ENOMEM;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = ~(uintptr_t)b;
  return 0;
}

/* Removes `b`; 1 if it was there. */
static int rsr_take(struct live_shard *s, const struct nx_buffer *b) {
  uintptr_t e = ~(uintptr_t)b;
  for (uint32_t i = s->n; i-- > 0;)
    if (s->v[i] == e) {
      s->v[i] = s->v[--s->n];
      return 1;
    }
  return 0;
}

/* The held buffers. */

static uint32_t held_home(const struct live_shard *s, uintptr_t e) {
  uint64_t h = (uint64_t)(~e >> 4) * 0x9e3779b97f4a7c15u;
  return (uint32_t)(h >> 32) & s->mask;
}

/* The slot holding `b`, or -1. */
static int64_t held_find(const struct live_shard *s,
                         const struct nx_buffer *b) {
  uintptr_t e = ~(uintptr_t)b;
  if (s->slot == NULL)
    return -1;
  for (uint32_t i = held_home(s, e);; i = (i + 1) & s->mask) {
    if (s->slot[i] == 0)
      return -1;
    if (s->slot[i] == e)
      return i;
  }
}

static void held_put(struct live_shard *s, uintptr_t e) {
  uint32_t i = held_home(s, e);
  while (s->slot[i] != 0)
    i = (i + 1) & s->mask;
  s->slot[i] = e;
  s->hn++;
}

/* Adds `b`, growing the set past half full. */
static int held_add(struct live_shard *s, const struct nx_buffer *b) {
  if (s->slot == NULL || 2 * (s->hn + 1) > s->mask + 1) {
    uint32_t size = s->slot == NULL ? 16 : 2 * (s->mask + 1);
    uintptr_t *old = s->slot;
    uint32_t old_size = old == NULL ? 0 : s->mask + 1;
    uintptr_t *v = calloc(size, sizeof(*v));
    if (v == NULL)
      return NX_ENOMEM;
    s->slot = v;
    s->mask = size - 1;
    s->hn = 0;
    for (uint32_t i = 0; i < old_size; i++)
      if (old[i] != 0)
        held_put(s, old[i]);
    free(old);
  }
  held_put(s, ~(uintptr_t)b);
  return 0;
}

/* Empties slot `i`, moving back the entries that probed past it. */
static void held_remove(struct live_shard *s, uint32_t i) {
  s->slot[i] = 0;
  s->hn--;
  for (uint32_t j = (i + 1) & s->mask; s->slot[j] != 0; j = (j + 1) & s->mask) {
    uint32_t k = held_home(s, s->slot[j]);
    /* The entry at j stays if its home lies cyclically in (i, j]. */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    s->slot[i] = s->slot[j];
    s->slot[j] = 0;
    i = j;
  }
}

int nxi_buffer_live_add(struct nx_buffer *b, int tag) {
  struct live_shard *s = live_shard(b);
  live_lock(s);
  int r = tag == NXI_LIVE_RSR ? rsr_add(s, b) : held_add(s, b);
  live_unlock(s);
  return r;
}

int nxi_buffer_live_take(const struct nx_buffer *b) {
  struct live_shard *s = live_shard(b);
  live_lock(s);
  int found = rsr_take(s, b);
  live_unlock(s);
  return found;
}

int nxi_buffer_live_retain(struct nx_buffer *b) {
  struct live_shard *s = live_shard(b);
  live_lock(s);
  unsigned u = atomic_load_explicit(&b->urefs, memory_order_relaxed);
  int r = u == 0 ? held_add(s, b) : 0;
  if (r == 0)
    atomic_store_explicit(&b->urefs, u + 1, memory_order_relaxed);
  live_unlock(s);
  return r;
}

int nxi_buffer_live_release(struct nx_buffer *b) {
  struct live_shard *s = live_shard(b);
  live_lock(s);
  /* An unsent RSR buffer has one reference: the program's, ending here. */
  if (rsr_take(s, b)) {
    atomic_store_explicit(&b->urefs, 0, memory_order_relaxed);
    live_unlock(s);
    return 0;
  }
  int64_t i = held_find(s, b);
  if (i < 0) {
    live_unlock(s);
    return NX_EINVAL;
  }
  /* Found: the program holds it, so it is not freed and may be read. */
  unsigned u = atomic_load_explicit(&b->urefs, memory_order_relaxed);
  atomic_store_explicit(&b->urefs, u - 1, memory_order_relaxed);
  if (u == 1)
    held_remove(s, (uint32_t)i);
  live_unlock(s);
  return 0;
}
