/* Internal structures shared by the core's source files. */
#ifndef NXI_INTERNAL_H
#define NXI_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nexus.h"
#include "nexus/protocol.h"

#define NXI_CONTAINER_OF(ptr, type, member)                                    \
  ((type *)((char *)(ptr) - offsetof(type, member)))

#define NXI_CACHELINE 64

/* Intrusive multi-producer single-consumer queue (Vyukov). Any thread may
 * push; only the progress driver pops. */
struct nxi_qnode {
  struct nxi_qnode *_Atomic next;
};

struct nxi_mpscq {
  _Alignas(NXI_CACHELINE) struct nxi_qnode *_Atomic head;
  _Alignas(NXI_CACHELINE) struct nxi_qnode *tail;
  struct nxi_qnode stub;
};

void nxi_mpscq_init(struct nxi_mpscq *q);
void nxi_mpscq_push(struct nxi_mpscq *q, struct nxi_qnode *n);
struct nxi_qnode *nxi_mpscq_pop(struct nxi_mpscq *q);

/* Buffers. One allocation holds the struct, the frame header and, up to the
 * capacity asked for at creation, the payload. */
enum nxi_buf_kind {
  NXI_BUF_STANDALONE = 0, /* nx_buffer_create: put and get */
  NXI_BUF_SEND = 1,       /* nx_rsr_init: put only, consumed by send */
  NXI_BUF_RECV = 2        /* delivered to a handler: get only */
};

struct nx_buffer {
  nx_frame_t frame; /* what modules see; iov[0] = hdr, iov[1] = payload */
  struct nxi_qnode qnode;
  uint8_t *data;
  size_t cap;
  size_t len;
  size_t pos;
  atomic_uint refs;  /* all references; the last one frees */
  atomic_uint urefs; /* the program's share of refs (checks releases) */
  uint8_t kind;
  uint8_t fmt;
  uint8_t data_heap; /* data was reallocated outside the block */
  uint32_t handler;
  uint64_t context;
  uint64_t address;
  struct nxi_dlist *dl; /* SEND: destination's descriptors (not owned) */
  union {
    struct nx_context *ctx;     /* RECV, queued for a thread: target (ref) */
    struct nx_buffer *ctx_next; /* in a thread's cache of free buffers */
  };
  nx_handler_fn fn;
  uint8_t hdr[NX_FRAME_HDR_SIZE];
  _Alignas(16) uint8_t inline_data[];
};

struct nx_buffer *nxi_buffer_alloc(size_t cap);
void nxi_buffer_free(struct nx_buffer *b);
/* Releases the runtime's hold on a handler's buffer. */
void nxi_buffer_handler_done(struct nx_buffer *b);
/* Encodes the frame header from the buffer's fields and sets up the iovs. */
void nxi_buffer_seal(struct nx_buffer *b);

/* Descriptor lists, interned and reference counted. */
#define NXI_MAX_DESC 16 /* = the loader's module limit */

struct nxi_route;

struct nxi_dlist {
  atomic_uint refs;
  uint64_t hash;
  struct nxi_dlist *next; /* intern chain */
  size_t len;
  uint8_t *blob; /* the wire encoding */
  int n;
  struct nx_desc desc[NXI_MAX_DESC];
  char names[NXI_MAX_DESC][NX_PROTO_NAME_MAX + 1];
  struct nxi_route *_Atomic route; /* cached protocol choice */
  _Atomic uint32_t proc;            /* process id part of its context ids */
  atomic_int failed;                /* its process is gone: the NX_E* why */
};

int nxi_dlist_intern(const uint8_t *blob, size_t len, struct nxi_dlist **out);
void nxi_dlist_retain(struct nxi_dlist *dl);
void nxi_dlist_release(struct nxi_dlist *dl);
int nxi_dlist_parse_len(const uint8_t *p, size_t avail, size_t *len);
/* The protocol route to a destination; resolved once per list. */
int nxi_dlist_route(struct nxi_dlist *dl, struct nxi_route **out);
void nxi_gp_finalize(void);

/* Loaded protocol modules. */
struct nxi_module {
  char name[NX_PROTO_NAME_MAX + 1];
  char path[512];
  int loaded;
  int error;
  char reason[256];
  int order; /* position in NX_PROTOCOLS, or by cost */
  void *dl_handle;
  const struct nx_protocol_ops *ops;
  void *state;
  struct nx_desc_buf desc;
  int wait_fd;
};

struct nxi_route {
  struct nxi_module *mod;
  void *ep;
  atomic_int failed; /* the NX_E* code the endpoint died with, or 0 */
};

/* A module reported its endpoint `ep` dead: every route through it fails
 * from now on, and the program hears of each process it loses. */
void nxi_gp_peer_failed(void *state, void *ep, int status);
/* Process `proc` ended (or was destroyed): RSRs to it fail with `status`. */
void nxi_gp_proc_failed(uint32_t proc, int status);

/* Process contexts (process.c). */
int nxi_process_init(void);
void nxi_process_finalize(void);
int nxi_process_destroy(uint64_t context);
void nxi_attach_finalize(void);

int nxi_modules_load(void);
void nxi_modules_unload(void);
int nxi_module_count_loaded(void);
int nxi_module_count_all(void);
void nxi_module_explain(int i); /* logs why module i was skipped */
struct nxi_module *nxi_module_loaded(int i);
extern const struct nx_core_api nxi_core_api;

/* Contexts. */
struct nxi_handler {
  uint32_t id;
  uint8_t kind;
  nx_handler_fn fn;
  char *name;
};

struct nxi_htable {
  uint32_t mask; /* capacity - 1, capacity a power of two */
  uint32_t count;
  struct nxi_htable *retired; /* older tables, freed with the context */
  struct nxi_handler slot[];
};

struct nx_context {
  uint64_t id;
  uint32_t index;
  atomic_uint refs;
  atomic_int dead;
  void *data;
  struct nxi_htable *_Atomic handlers;
  pthread_mutex_t lock; /* serialises registrations */
};

int nxi_contexts_init(void);
void nxi_contexts_finalize(void);
/* Looks up a live context and takes a reference; driver lock held. */
struct nx_context *nxi_context_get(uint64_t id);
void nxi_context_put(struct nx_context *ctx);
const struct nxi_handler *nxi_handler_find(struct nx_context *ctx, uint32_t id);
nx_context_t *nxi_context_swap(nx_context_t *ctx);

/* The progress engine. */
int nxi_progress_init(void);
/* Stops the runtime threads and drops undelivered RSRs. Returns the number
 * of handler threads still blocked in program code (nothing is freed then). */
int nxi_progress_finalize(void);
void nxi_progress_start(void); /* starts the progress thread, if any */
/* Hands a complete received buffer to the dispatcher. */
void nxi_deliver(struct nx_buffer *b);
void nxi_progress_wake(void);
/* Drives progress once if no other thread does, else yields the CPU. */
void nxi_progress_help(void);
int nxi_progress_add_fd(int fd);
/* The driver lock serialises module progress and dispatch. Reentrant for
 * the thread that holds it; returns a token for the unlock. */
unsigned nxi_driver_lock(void);
void nxi_driver_unlock(unsigned token);

/* Runtime-wide state. */
struct nxi_runtime {
  atomic_int refs;
  int poll_mode;
  int explicit_order; /* NX_PROTOCOLS set: its order beats module cost */
  unsigned spin_us;
  unsigned debug;
  uint32_t proc_id;
  uint8_t process_uuid[16];
  uint8_t host_uuid[16];
  uint8_t key[NX_KEY_SIZE]; /* the computation's key (NX_KEY, or random) */
  nx_context_t *initial;
  struct nxi_dlist *self_dl; /* descriptors of this process's contexts */
  atomic_uint_fast64_t rsr_sent, rsr_handled, drop_no_handler,
      drop_no_context, drop_bad_frame, threads_created, rsr_failed,
      peers_failed;
  nx_error_cb error_cb;
  void *error_arg;
  atomic_int drops_logged;
};

extern struct nxi_runtime nxi_rt;

static inline int nxi_ready(void) {
  return atomic_load_explicit(&nxi_rt.refs, memory_order_acquire) > 0;
}

/* Counts a dropped RSR and reports it. */
void nxi_drop(int err, uint64_t context, uint32_t handler);
void nxi_log(int level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Little-endian helpers for the fixed-order wire fields: plain stores and
 * loads on a little-endian host, byte swaps elsewhere. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NXI_TO_LE16(v) (v)
#define NXI_TO_LE32(v) (v)
#define NXI_TO_LE64(v) (v)
#else
#define NXI_TO_LE16(v) __builtin_bswap16(v)
#define NXI_TO_LE32(v) __builtin_bswap32(v)
#define NXI_TO_LE64(v) __builtin_bswap64(v)
#endif

static inline void nxi_le16(uint8_t *p, uint16_t v) {
  v = NXI_TO_LE16(v);
  memcpy(p, &v, 2);
}
static inline void nxi_le32(uint8_t *p, uint32_t v) {
  v = NXI_TO_LE32(v);
  memcpy(p, &v, 4);
}
static inline void nxi_le64(uint8_t *p, uint64_t v) {
  v = NXI_TO_LE64(v);
  memcpy(p, &v, 8);
}
static inline uint16_t nxi_rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return NXI_TO_LE16(v);
}
static inline uint32_t nxi_rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return NXI_TO_LE32(v);
}
static inline uint64_t nxi_rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return NXI_TO_LE64(v);
}

/* Thread-locals of libnexus use the initial-exec model: a plain
 * fs-relative access instead of a __tls_get_addr call on every RSR. */
#define NXI_TLS _Thread_local __attribute__((tls_model("initial-exec")))

#endif /* NXI_INTERNAL_H */
