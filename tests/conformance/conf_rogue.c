/* A rogue peer for the conformance suite: it loads the protocol module under
 * test itself, plays the core for it, and sends malformed frames to a real
 * process. */
#include <dlfcn.h>
#include <signal.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nexus/protocol.h"

/* Usage: conf_rogue <module.so> <module> <gp-hex> <script> <linger-ms>
 *        conf_rogue --job <module.so> <module>
 *
 * <gp-hex> is the wire form of a gp to the victim's context (the bytes
 * nx_buffer_bytes gives for a buffer holding just that gp, little-endian):
 * its descriptor list says where the victim is. <script> is a comma-
 * separated list of the frames to send, in order (see make_frame). Then
 * the rogue keeps the connection open for up to <linger-ms>, returning
 * early if the victim hangs up, and prints one line on stdout:
 *   sent=<frames the module took> failed=<sends refused or failed>
 *   hungup=<0|1>
 * Before it, as it goes, a line "phase=<init|connect|script|finalize>" at
 * the start of each step: a rogue that stops answering shows where.
 * The key is NX_KEY's (the victim's); NX_ROGUE_WRONG_KEY=1 flips it.
 *
 * With --job the rogue is a rank of an MPI job (the mpi module), the
 * victim rank 0: it joins the job's exchange of initial contexts with an
 * entry of its own (so that the victim can reach it), then runs the
 * scripts the victim sends it in "rogue_case" frames, whose payload holds
 * "SCRIPT:<linger-ms>:<last>:<script>" and a NUL, answering each with a
 * "rogue_done" frame that carries the result line, until a "conf_quit"
 * frame or a case marked last.
 *
 * The core given to the module is as small as protocol.h allows; frames
 * sent to the rogue are taken only in job mode, and only the victim's. */

#define ROGUE_PAYLOAD 64u
#define ROGUE_MAX_FRAMES 16

static uint8_t rogue_uuid[16], rogue_host[16], rogue_key[NX_KEY_SIZE];
static atomic_int sends_done, sends_failed, hung_up;
static int debug;

/* Frames for the rogue (job mode): kept whole, in arrival order, for the
 * main loop. Modules deliver from their progress call, which only the
 * main thread makes, but a lock costs nothing here. */
#define ROGUE_RX_MAX (1u << 20)
struct rogue_rx {
  nx_frame_t f;
  struct rogue_rx *next;
  uint8_t hdr[NX_FRAME_HDR_SIZE];
  uint8_t payload[];
};
static pthread_mutex_t rx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rogue_rx *rx_head, **rx_tail = &rx_head;
static int accept_frames;

static int rogue_frame_alloc(const void *hdr, nx_frame_t **frame) {
  *frame = NULL;
  uint64_t len = nx_frame_payload_len(hdr);
  if (!accept_frames || len > ROGUE_RX_MAX)
    return NX_EPROTO;
  struct rogue_rx *rx = calloc(1, sizeof(*rx) + (size_t)len);
  if (rx == NULL)
    return NX_ENOMEM;
  memcpy(rx->hdr, hdr, NX_FRAME_HDR_SIZE);
  rx->f.iov[0].iov_base = rx->hdr;
  rx->f.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  rx->f.iov[1].iov_base = rx->payload;
  rx->f.iov[1].iov_len = (size_t)len;
  rx->f.iovcnt = 2;
  rx->f.len = NX_FRAME_HDR_SIZE + (size_t)len;
  rx->f.module_data[0] = rx;
  *frame = &rx->f;
  return 0;
}

/* The rogue takes every payload whole (rogue_frame_alloc is its
 * frame_alloc_lead too), so a module never has a lead to place. */
static int rogue_frame_place(nx_frame_t *frame) {
  (void)frame;
  return NX_ENOMEM;
}

static void rogue_frame_deliver(nx_frame_t *frame) {
  struct rogue_rx *rx = frame->module_data[0];
  pthread_mutex_lock(&rx_lock);
  *rx_tail = rx;
  rx_tail = &rx->next;
  pthread_mutex_unlock(&rx_lock);
}

static void rogue_frame_free(nx_frame_t *frame) { free(frame->module_data[0]); }

static struct rogue_rx *rx_pop(void) {
  pthread_mutex_lock(&rx_lock);
  struct rogue_rx *rx = rx_head;
  if (rx != NULL && (rx_head = rx->next) == NULL)
    rx_tail = &rx_head;
  pthread_mutex_unlock(&rx_lock);
  return rx;
}

static void rogue_send_done(nx_frame_t *frame, int status) {
  (void)frame;
  if (status != 0)
    atomic_fetch_add(&sends_failed, 1);
  atomic_fetch_add(&sends_done, 1);
}

/* Only for frames sent to this same process, which the rogue never does. */
static void rogue_handover(nx_frame_t *frame) { rogue_send_done(frame, 0); }

static void rogue_peer_failed(struct nx_endpoint *ep, int status) {
  (void)ep;
  (void)status;
  atomic_store(&hung_up, 1);
}

static void rogue_bad_peer(const char *module, const char *why) {
  fprintf(stderr, "conf_rogue: %s says the victim is bad: %s\n", module, why);
}

static void rogue_wake(void) {}

static void rogue_log(int level, const char *module, const char *fmt, ...) {
  if (level > 0 && !debug)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "conf_rogue %s: ", module);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static const struct nx_core_api rogue_core = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .process_uuid = rogue_uuid,
    .host_uuid = rogue_host,
    .frame_alloc = rogue_frame_alloc,
    .frame_deliver = rogue_frame_deliver,
    .frame_free = rogue_frame_free,
    .frame_alloc_lead = rogue_frame_alloc,
    .frame_place = rogue_frame_place,
    .send_done = rogue_send_done,
    .handover = rogue_handover,
    .peer_failed = rogue_peer_failed,
    .bad_peer = rogue_bad_peer,
    .wake = rogue_wake,
    .log = rogue_log,
    .key = rogue_key,
};

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int hex_decode(const char *s, uint8_t *out, size_t cap) {
  size_t n = strlen(s);
  if (n % 2 != 0 || n / 2 > cap)
    return -1;
  for (size_t i = 0; i < n / 2; i++) {
    unsigned v;
    if (sscanf(s + 2 * i, "%2x", &v) != 1)
      return -1;
    out[i] = (uint8_t)v;
  }
  return (int)(n / 2);
}

static uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* The descriptor for `module` in a descriptor list (docs/design.md, "The
 * descriptor list"). The descriptor points into `list`. */
static int find_in_list(const uint8_t *list, size_t len, const char *module,
                        struct nx_desc *d) {
  size_t off = 0;
  if (len < 1)
    return -1;
  unsigned count = list[off++];
  for (unsigned i = 0; i < count; i++) {
    if (off + 1 > len)
      return -1;
    size_t nl = list[off++];
    if (off + nl + 3 > len)
      return -1;
    const char *name = (const char *)list + off;
    off += nl;
    uint16_t wire = (uint16_t)get_le(list + off, 2);
    off += 2;
    size_t sl = list[off++];
    if (off + sl + 2 > len)
      return -1;
    const uint8_t *scope = list + off;
    off += sl;
    size_t dl = get_le(list + off, 2);
    off += 2;
    if (off + dl > len)
      return -1;
    if (nl == strlen(module) && memcmp(name, module, nl) == 0) {
      d->name = module;
      d->wire_version = wire;
      d->scope_len = (uint8_t)sl;
      d->scope = scope;
      d->data_len = (uint16_t)dl;
      d->data = list + off;
      return 0;
    }
    off += dl;
  }
  return -1;
}

/* The victim's context id and its descriptor, from a gp's wire form
 * (docs/design.md, "A global pointer in a buffer"). */
static int find_desc(const uint8_t *gp, size_t len, const char *module,
                     uint64_t *context, struct nx_desc *d) {
  if (len < 18 || gp[0] != 0x0D)
    return -1;
  *context = get_le(gp + 1, 8);
  return find_in_list(gp + 17, len - 17, module, d);
}

/* FNV-1a, as nx_handler_id computes it (docs/design.md). */
static uint32_t handler_id(const char *name) {
  uint32_t h = 2166136261u;
  for (const char *p = name; *p != '\0'; p++) {
    h ^= (uint8_t)*p;
    h *= 16777619u;
  }
  return h != 0 ? h : 1;
}

struct rogue_frame {
  uint8_t hdr[NX_FRAME_HDR_SIZE];
  uint8_t payload[4 * ROGUE_PAYLOAD];
  nx_frame_t f;
};

/* One frame of the script: a good one to the victim's "rogue_hit" (or
 * "rogue_lie" for the lying lengths), or one with a single thing wrong. */
static int make_frame(const char *what, uint64_t context,
                      struct rogue_frame *r) {
  uint32_t magic = NX_FRAME_MAGIC, version = NX_FRAME_VERSION;
  uint8_t format = 1; /* NX_FORMAT_LITTLE */
  uint32_t handler = handler_id("rogue_hit");
  size_t payload = ROGUE_PAYLOAD;
  uint64_t length = ROGUE_PAYLOAD;
  uint16_t flags = 0;
  if (strcmp(what, "good") == 0) {
  } else if (strcmp(what, "magic") == 0) {
    magic = 0x12345678u;
  } else if (strcmp(what, "version") == 0) {
    version = NX_FRAME_VERSION + 1;
  } else if (strcmp(what, "format") == 0) {
    format = 7;
  } else if (strcmp(what, "context0") == 0) {
    context = 0;
  } else if (strcmp(what, "handler0") == 0) {
    handler = 0;
  } else if (strcmp(what, "nohandler") == 0) {
    handler = handler_id("rogue_no_such_handler");
  } else if (strcmp(what, "nocontext") == 0) {
    context = (context & ~(uint64_t)0xffffffffu) | 0x7ffffff0u;
  } else if (strcmp(what, "longer") == 0) {
    handler = handler_id("rogue_lie");
    length = ROGUE_PAYLOAD + 36;
  } else if (strcmp(what, "shorter") == 0) {
    /* The rest, 3 * ROGUE_PAYLOAD - 10 bytes, is not a frame header. */
    handler = handler_id("rogue_lie");
    payload = 3 * ROGUE_PAYLOAD;
    length = 10;
  } else if (strcmp(what, "huge") == 0) {
    /* Far above any limit on a frame: refused, never allocated. */
    handler = handler_id("rogue_lie");
    length = (uint64_t)1 << 62;
  } else if (strcmp(what, "badlead") == 0) {
    /* Receive placement's lead (flag bit 2, the length's high 16 bits)
     * past the payload's end: a bad header. */
    flags = NX_FRAME_F_TAIL;
    length |= (uint64_t)(ROGUE_PAYLOAD + 5) << 48;
  } else if (strcmp(what, "truncated") == 0) {
    handler = handler_id("rogue_lie");
    length = 1000;
  } else {
    return -1;
  }
  memset(r->hdr, 0, sizeof(r->hdr));
  put_le(r->hdr, magic, 4);
  r->hdr[4] = (uint8_t)version;
  r->hdr[5] = format;
  put_le(r->hdr + 6, flags, 2);
  put_le(r->hdr + 8, handler, 4);
  put_le(r->hdr + 16, context, 8);
  put_le(r->hdr + 32, length, 8);
  /* Bytes that are never a frame header (no 'N' at all). */
  for (size_t i = 0; i < payload; i++)
    r->payload[i] = (uint8_t)(0xa0 + i % 16);
  memset(&r->f, 0, sizeof(r->f));
  r->f.iov[0].iov_base = r->hdr;
  r->f.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  r->f.iov[1].iov_base = r->payload;
  r->f.iov[1].iov_len = payload;
  r->f.iovcnt = 2;
  r->f.len = NX_FRAME_HDR_SIZE + payload;
  return 0;
}

static const struct nx_protocol_ops *load(const char *so, const char *module) {
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  char sym[64];
  snprintf(sym, sizeof(sym), "nx_protocol_%s", module);
  const struct nx_protocol_ops *ops = h != NULL ? dlsym(h, sym) : NULL;
  if (ops == NULL)
    fprintf(stderr, "conf_rogue: cannot load %s: %s\n", so, dlerror());
  return ops;
}

static void new_identity(void) {
  srand((unsigned)now_ms() ^ (unsigned)getpid());
  for (int i = 0; i < 16; i++)
    rogue_uuid[i] = (uint8_t)rand();
}

/* Sends the frames of `script` (modified) to `context` over `ep`, one at a
 * time and each to completion (a stream module must not have the next
 * frame's bytes in flight when the victim hangs up on the previous one),
 * lingers, and writes the result line into `out`. */
static int run_script(const struct nx_protocol_ops *ops, void *state,
                      struct nx_endpoint *ep, uint64_t context, char *script,
                      int linger, char *out, size_t out_len) {
  static struct rogue_frame frames[ROGUE_MAX_FRAMES];
  int sent = 0, failed = 0, n = 0, r;
  int done0 = atomic_load(&sends_done), failed0 = atomic_load(&sends_failed);
  char *save = NULL;
  for (char *what = strtok_r(script, ",", &save); what != NULL;
       what = strtok_r(NULL, ",", &save)) {
    if (n == ROGUE_MAX_FRAMES || make_frame(what, context, &frames[n]) != 0) {
      fprintf(stderr, "conf_rogue: bad script entry '%s'\n", what);
      return -1;
    }
    struct rogue_frame *fr = &frames[n++];
    uint64_t end = now_ms() + 10000;
    int before = atomic_load(&sends_done);
    while ((r = ops->send(state, ep, &fr->f, 0)) == NX_EAGAIN && now_ms() < end)
      ops->progress(state, NULL);
    if (r == NX_PROTOCOL_SENT) { /* sent at once: no send_done comes */
      rogue_send_done(&fr->f, 0);
      r = 0;
    }
    if (r != 0) {
      failed++;
      continue;
    }
    sent++;
    while (atomic_load(&sends_done) == before && now_ms() < end)
      ops->progress(state, NULL);
  }
  uint64_t end = now_ms() + (uint64_t)linger;
  while (!atomic_load(&hung_up) && now_ms() < end)
    if (ops->progress(state, NULL) == 0)
      usleep(100); /* two cores are shared with the victim */
  snprintf(out, out_len, "sent=%d failed=%d hungup=%d done=%d", sent,
           failed + atomic_load(&sends_failed) - failed0, atomic_load(&hung_up),
           atomic_load(&sends_done) - done0);
  return 0;
}

/* One-shot mode: where the rogue is (the usage comment above). */
static void say_phase(const char *phase) {
  printf("phase=%s\n", phase);
  fflush(stdout);
}

static int main_once(int argc, char **argv) {
  const char *so = argv[1], *module = argv[2];
  int linger = atoi(argv[5]);
  static uint8_t gp[8192];
  int gp_len = hex_decode(argv[3], gp, sizeof(gp));
  const char *key = getenv("NX_KEY");
  if (gp_len < 0 || key == NULL ||
      hex_decode(key, rogue_key, sizeof(rogue_key)) != NX_KEY_SIZE) {
    fprintf(stderr, "conf_rogue: a bad gp, or NX_KEY is not 32 hex digits\n");
    return 2;
  }
  if (getenv("NX_ROGUE_WRONG_KEY") != NULL)
    rogue_key[0] ^= 0xff;
  uint64_t context;
  struct nx_desc desc;
  if (find_desc(gp, (size_t)gp_len, module, &context, &desc) != 0) {
    fprintf(stderr, "conf_rogue: the gp has no %s descriptor\n", module);
    return 2;
  }
  /* A process of its own, on the victim's host: modules that scope their
   * descriptors by host (tcp, ucx, ofi) use the host id as scope. */
  new_identity();
  if (desc.scope_len == sizeof(rogue_host))
    memcpy(rogue_host, desc.scope, sizeof(rogue_host));
  say_phase("init");
  const struct nx_protocol_ops *ops = load(so, module);
  if (ops == NULL)
    return 2;
  void *state = NULL;
  char why[256] = "";
  int r = ops->init(&rogue_core, &state, why, sizeof(why));
  if (r != 0) {
    fprintf(stderr, "conf_rogue: %s init: %s (%d)\n", module, why, r);
    return 2;
  }
  struct nx_desc_buf mine;
  struct nx_endpoint *ep = NULL;
  say_phase("connect");
  if (ops->descriptor(state, &mine) != 0 || ops->reachable(state, &desc) < 0 ||
      ops->connect(state, &desc, &ep) != 0) {
    fprintf(stderr, "conf_rogue: %s does not reach the victim\n", module);
    ops->finalize(state);
    return 2;
  }
  char line[128];
  say_phase("script");
  r = run_script(ops, state, ep, context, argv[4], linger, line, sizeof(line));
  say_phase("finalize");
  ops->disconnect(state, ep);
  ops->finalize(state);
  if (r != 0)
    return 2;
  printf("%s\n", line);
  return 0;
}

/* This rank's entry in the job's exchange: the layout the core uses for
 * initial contexts on its control channel and in nx_attach
 * (docs/design.md): u64 context, u64 address, u32 list length, then the
 * descriptor list, here of one descriptor. */
static size_t job_entry(const struct nx_protocol_ops *ops,
                        const struct nx_desc_buf *mine, uint8_t *p) {
  uint64_t context = (get_le(rogue_uuid, 4) | 1) << 32 | 1;
  size_t nl = strlen(ops->name), off = 20;
  p[off++] = 1;
  p[off++] = (uint8_t)nl;
  memcpy(p + off, ops->name, nl);
  off += nl;
  put_le(p + off, ops->wire_version, 2);
  off += 2;
  p[off++] = mine->scope_len;
  memcpy(p + off, mine->scope, mine->scope_len);
  off += mine->scope_len;
  put_le(p + off, mine->data_len, 2);
  off += 2;
  memcpy(p + off, mine->data, mine->data_len);
  off += mine->data_len;
  put_le(p, context, 8);
  put_le(p + 8, 0, 8);
  put_le(p + 16, off - 20, 4);
  return off;
}

static int main_job(const char *so, const char *module) {
  /* A rank no victim tells to quit must not hold up mpirun for ever. */
  alarm(300);
  const char *key = getenv("NX_KEY");
  if (key != NULL)
    hex_decode(key, rogue_key, sizeof(rogue_key));
  new_identity();
  const struct nx_protocol_ops *ops = load(so, module);
  if (ops == NULL)
    return 2;
  /* The job is in the launcher table. */
  if (ops->abi_version != NX_PROTOCOL_ABI_VERSION || ops->launch == NULL ||
      ops->launch->job_peers == NULL) {
    fprintf(stderr, "conf_rogue: %s knows no job\n", module);
    return 2;
  }
  void *state = NULL;
  char why[256] = "";
  int r = ops->init(&rogue_core, &state, why, sizeof(why));
  if (r != 0) {
    fprintf(stderr, "conf_rogue: %s init: %s (%d)\n", module, why, r);
    return 2;
  }
  static uint8_t entry[64 + NX_DESC_SCOPE_MAX + NX_DESC_DATA_MAX];
  struct nx_desc_buf mine;
  void *all = NULL;
  size_t *lens = NULL;
  int count = 0, rank = -1;
  accept_frames = 1;
  /* As a nexus rank's nx_init does, first: every rank's key, and rank 0's
   * for all (docs/mpi.md, "The job's key"). */
  if (ops->launch->job_peers(state, rogue_key, NX_KEY_SIZE, &all, &lens, &count,
                             &rank) != 0 ||
      count < 1 || lens[0] != NX_KEY_SIZE) {
    fprintf(stderr, "conf_rogue: the job's key was not agreed on\n");
    ops->finalize(state);
    return 2;
  }
  memcpy(rogue_key, all, NX_KEY_SIZE);
  free(all);
  free(lens);
  all = NULL;
  lens = NULL;
  if (ops->descriptor(state, &mine) != 0 ||
      ops->launch->job_peers(state, entry, job_entry(ops, &mine, entry), &all,
                             &lens, &count, &rank) != 0 ||
      count < 1 || rank == 0) {
    fprintf(stderr, "conf_rogue: no job to join (rank %d of %d)\n", rank,
            count);
    ops->finalize(state);
    return 2;
  }
  /* The victim is rank 0: its entry comes first. */
  const uint8_t *v = all;
  uint64_t context = lens[0] >= 20 ? get_le(v, 8) : 0;
  struct nx_desc desc;
  struct nx_endpoint *ep = NULL;
  if (context == 0 || get_le(v + 16, 4) > lens[0] - 20 ||
      find_in_list(v + 20, get_le(v + 16, 4), module, &desc) != 0 ||
      ops->connect(state, &desc, &ep) != 0) {
    fprintf(stderr, "conf_rogue: rank 0 cannot be reached\n");
    ops->finalize(state);
    return 2;
  }
  uint32_t case_id = handler_id("rogue_case");
  uint32_t quit_id = handler_id("conf_quit");
  uint32_t done_id = handler_id("rogue_done");
  int last = 0;
  while (!last) {
    struct rogue_rx *rx = rx_pop();
    if (rx == NULL) {
      if (ops->progress(state, NULL) == 0)
        usleep(100);
      continue;
    }
    uint32_t handler = (uint32_t)get_le(rx->hdr + 8, 4);
    if (handler == quit_id) {
      last = 1;
    } else if (handler == case_id) {
      /* The script, found by its marker whatever the buffer's encoding. */
      static char text[512];
      size_t len = rx->f.iov[1].iov_len, at = 0;
      while (at + 7 <= len && memcmp(rx->payload + at, "SCRIPT:", 7) != 0)
        at++;
      size_t n = at + 7 <= len
                     ? strnlen((char *)rx->payload + at + 7, len - at - 7)
                     : 0;
      if (n == 0 || n >= sizeof(text)) {
        fprintf(stderr, "conf_rogue: a case without a script\n");
        free(rx);
        break;
      }
      memcpy(text, rx->payload + at + 7, n);
      text[n] = '\0';
      char *rest = NULL;
      int linger = (int)strtol(text, &rest, 10);
      last = (int)strtol(rest + 1, &rest, 10);
      static struct rogue_frame done;
      char line[128];
      if (run_script(ops, state, ep, context, rest + 1, linger, line,
                     sizeof(line)) != 0 ||
          make_frame("good", context, &done) != 0)
        break;
      /* The answer: a good frame to "rogue_done" with the line as payload. */
      put_le(done.hdr + 8, done_id, 4);
      size_t ll = strlen(line);
      memcpy(done.payload, line, ll);
      put_le(done.hdr + 32, ll, 8);
      done.f.iov[1].iov_len = ll;
      done.f.len = NX_FRAME_HDR_SIZE + ll;
      int before = atomic_load(&sends_done);
      uint64_t end = now_ms() + 10000;
      while ((r = ops->send(state, ep, &done.f, 0)) == NX_EAGAIN &&
             now_ms() < end)
        ops->progress(state, NULL);
      if (r == NX_PROTOCOL_SENT) {
        rogue_send_done(&done.f, 0);
        r = 0;
      }
      while (r == 0 && atomic_load(&sends_done) == before && now_ms() < end)
        ops->progress(state, NULL);
    }
    free(rx);
  }
  ops->disconnect(state, ep);
  free(all);
  free(lens);
  ops->finalize(state);
  for (struct rogue_rx *rx = rx_pop(); rx != NULL; rx = rx_pop())
    free(rx);
  return 0;
}

int main(int argc, char **argv) {
  debug = getenv("NX_DEBUG") != NULL;
  if (argc == 4 && strcmp(argv[1], "--job") == 0)
    return main_job(argv[2], argv[3]);
  if (argc == 6)
    return main_once(argc, argv);
  fprintf(stderr, "usage: conf_rogue <module.so> <module> <gp-hex> <script> "
                  "<linger-ms>\n"
                  "       conf_rogue --job <module.so> <module>\n");
  return 2;
}
