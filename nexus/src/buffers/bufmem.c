/* Memory behind message buffers: a per-thread cache of small buffers and a
 * shared cache of large payload blocks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/buf.h"
#include "buffers/buffer_cache.h"
#include "nxu_opt.h"

/* The payload room inside a buffer's own slot; larger payloads are apart
 * (malloc up to INLINE_MAX, blocks above). */
#define INLINE_MIN NXI_INLINE_MIN
#define INLINE_MAX NXI_INLINE_MAX

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define BLOCK_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define BLOCK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define BLOCK_POISON(p, n) ((void)(p), (void)(n))
#define BLOCK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

/* Buffer structs live in type-stable memory (docs/design.md, section 8,
 * rule 10): slots of one size, SLAB_SLOTS to a slab taken from malloc and
 * never given back, each slot always a struct nx_buffer at the same place.
 * So nx_rsr_send and nx_buffer_release may read the `urefs` word of a
 * pointer the program gave away: a free slot holds 0 there and is refused,
 * with one compare-and-swap instead of a registry of live buffers (two
 * locked operations per RSR before). The price: the slots of the most
 * buffers ever alive at once stay with the process, SLOT_SIZE bytes each
 * (payloads above INLINE_MIN bytes are apart and are freed). A per-thread
 * cache keeps the common RSR off the shared list's lock. Under
 * AddressSanitizer a free slot is poisoned but for its first words
 * (`urefs`, `free_next`), so a use after free still reports, and the
 * per-thread cache is off so that slots are reused late. */
#define SLOT_SIZE ((sizeof(struct nx_buffer) + INLINE_MIN + 63) / 64 * 64)
#define SLAB_SLOTS 64
#define SLOT_KEEP offsetof(struct nx_buffer, frame) /* never poisoned */
#define CACHE_MAX NXI_SLOT_CACHE_MAX

static struct {
  pthread_mutex_t lock;
  struct nx_buffer *free; /* free slots, linked by free_next */
  void **slabs;           /* every slab, so leak checkers see them held */
  size_t nslabs, cap;
} slots = {.lock = PTHREAD_MUTEX_INITIALIZER};

NXI_TLS struct nxi_slot_cache nxi_slot_cache;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void slot_poison(struct nx_buffer *b) {
  BLOCK_POISON((uint8_t *)b + SLOT_KEEP, SLOT_SIZE - SLOT_KEEP);
}

static void slot_unpoison(struct nx_buffer *b) {
  BLOCK_UNPOISON((uint8_t *)b + SLOT_KEEP, SLOT_SIZE - SLOT_KEEP);
}

/* Puts the list `head` .. `tail` on the shared list. */
static void slots_give(struct nx_buffer *head, struct nx_buffer *tail) {
  pthread_mutex_lock(&slots.lock);
  tail->free_next = slots.free;
  slots.free = head;
  pthread_mutex_unlock(&slots.lock);
}

/* A thread's cache goes back to the shared list when the thread ends. */
static void cache_drain(void *arg) {
  struct nxi_slot_cache *c = arg;
  if (c->head == NULL)
    return;
  struct nx_buffer *tail = c->head;
  while (tail->free_next != NULL)
    tail = tail->free_next;
  slots_give(c->head, tail);
  c->head = NULL;
  c->count = 0;
}

static void cache_key_create(void) {
  pthread_key_create(&cache_key, cache_drain);
}

/* A new slab: its first slot for the caller, the rest to the shared list.
 * Called with the lock held. */
static struct nx_buffer *slab_new(void) {
  if (slots.nslabs == slots.cap) {
    size_t cap = slots.cap != 0 ? slots.cap * 2 : 16;
    void **v = realloc(slots.slabs, cap * sizeof(*v));
    if (v == NULL)
      return NULL;
    slots.slabs = v;
    slots.cap = cap;
  }
  uint8_t *p;
  if (posix_memalign((void **)&p, 64, SLAB_SLOTS * SLOT_SIZE) != 0)
    return NULL;
  slots.slabs[slots.nslabs++] = p;
  for (size_t i = SLAB_SLOTS; i-- > 1;) {
    struct nx_buffer *b = (struct nx_buffer *)(p + i * SLOT_SIZE);
    atomic_init(&b->urefs, 0);
    b->free_next = slots.free;
    slots.free = b;
    slot_poison(b);
  }
  atomic_init(&((struct nx_buffer *)p)->urefs, 0);
  return (struct nx_buffer *)p;
}

/* nxi_buffer_alloc's rest: this thread's cache is empty. */
struct nx_buffer *nxi_slot_get_shared(void) {
  struct nx_buffer *b;
  pthread_mutex_lock(&slots.lock);
  b = slots.free;
  if (b != NULL)
    slots.free = b->free_next;
  else
    b = slab_new();
  pthread_mutex_unlock(&slots.lock);
  if (b != NULL)
    slot_unpoison(b);
  return b;
}

/* nxi_buffer_free's rest: this thread's cache is not yet registered (its first
 * slot), or full. */
void nxi_slot_put_slow(struct nx_buffer *b) {
  if (nxi_slot_cache.count < CACHE_MAX) {
    if (!nxi_slot_cache.registered) {
      pthread_once(&cache_once, cache_key_create);
      pthread_setspecific(cache_key, &nxi_slot_cache);
      nxi_slot_cache.registered = 1;
    }
    b->free_next = nxi_slot_cache.head;
    nxi_slot_cache.head = b;
    nxi_slot_cache.count++;
    return;
  }
  slot_poison(b);
  slots_give(b, b);
}

/* Frees the slot (nxi_buffer_free's rest, for data_apart). */
static void slot_put(struct nx_buffer *b) {
  atomic_store_explicit(&b->urefs, 0, memory_order_release);
  nxi_slot_put_slow(b);
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

/* Room for `cap` bytes apart from the slot of `b`: malloc, or a block of
 * its own above INLINE_MAX (nxi_block_get), so that growing it moves the
 * payload only. Returns `b`, or NULL (it freed). */
struct nx_buffer *nxi_buffer_data_apart(struct nx_buffer *b, size_t cap) {
  size_t size = cap;
  uint8_t *d = cap > INLINE_MAX ? nxi_block_get(cap, &size) : malloc(cap);
  if (d == NULL) {
    slot_put(b);
    return NULL;
  }
  b->data = d;
  b->data_heap = 1;
  b->cap = size;
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

int nxi_buffer_grow(struct nx_buffer *b, size_t extra) {
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

/* What a buffer holds beside its slot, given back in this order: a
 * module's payload, what zero copy hung on it, its own payload. */
void nxi_buffer_free_extras(struct nx_buffer *b) {
  if (b->own_release != NULL || b->own_tracked)
    own_end(b);
  if (b->xr != NULL || b->side != NULL)
    refs_free(b);
  if (b->data_heap)
    nxi_block_put(b->data, b->cap);
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
