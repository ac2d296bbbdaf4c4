/* A rogue peer for the conformance suite: it loads the protocol module under
 * test itself, plays the core for it, and sends malformed frames to a real
 * process. */
#include <dlfcn.h>
#include <errno.h>
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
 *
 * <gp-hex> is the wire form of a gp to the victim's context (the bytes
 * nx_buffer_bytes gives for a buffer holding just that gp, little-endian):
 * its descriptor list says where the victim is. <script> is a comma-
 * separated list of the frames to send, in order (see make_frame). Then
 * the rogue keeps the connection open for up to <linger-ms>, returning
 * early if the victim hangs up, and prints one line on stdout:
 *   sent=<frames the module took> failed=<sends refused or failed>
 *   hungup=<0|1>
 * The key is NX_KEY's (the victim's); NX_ROGUE_WRONG_KEY=1 flips it.
 *
 * The core given to the module is as small as protocol.h allows: nothing is
 * ever sent to the rogue, so frame_alloc refuses everything. */

#define ROGUE_PAYLOAD 64u
#define ROGUE_MAX_FRAMES 16

static uint8_t rogue_uuid[16], rogue_host[16], rogue_key[NX_KEY_SIZE];
static atomic_int sends_done, sends_failed, hung_up;
static int debug;

static int rogue_frame_alloc(const void *hdr, nx_frame_t **frame) {
  (void)hdr;
  *frame = NULL;
  return NX_EPROTO;
}

static void rogue_frame_deliver(nx_frame_t *frame) { (void)frame; }
static void rogue_frame_free(nx_frame_t *frame) { (void)frame; }

static void rogue_send_done(nx_frame_t *frame, int status) {
  (void)frame;
  if (status != 0)
    atomic_fetch_add(&sends_failed, 1);
  atomic_fetch_add(&sends_done, 1);
}

/* Only for frames sent to this same process, which the rogue never does. */
static void rogue_handover(nx_frame_t *frame) { rogue_send_done(frame, 0); }

static void rogue_peer_failed(void *state, void *ep, int status) {
  (void)state;
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

/* The victim's context id and its descriptor for `module`, from a gp's wire
 * form (docs/design.md, "A global pointer in a buffer" and "The descriptor
 * list"). The descriptor points into `gp`. */
static int find_desc(const uint8_t *gp, size_t len, const char *module,
                     uint64_t *context, struct nx_desc *d) {
  if (len < 18 || gp[0] != 0x0D)
    return -1;
  *context = get_le(gp + 1, 8);
  size_t off = 17;
  unsigned count = gp[off++];
  for (unsigned i = 0; i < count; i++) {
    if (off + 1 > len)
      return -1;
    size_t nl = gp[off++];
    if (off + nl + 3 > len)
      return -1;
    const char *name = (const char *)gp + off;
    off += nl;
    uint16_t wire = (uint16_t)get_le(gp + off, 2);
    off += 2;
    size_t sl = gp[off++];
    if (off + sl + 2 > len)
      return -1;
    const uint8_t *scope = gp + off;
    off += sl;
    size_t dl = get_le(gp + off, 2);
    off += 2;
    if (off + dl > len)
      return -1;
    if (nl == strlen(module) && memcmp(name, module, nl) == 0) {
      d->name = module;
      d->wire_version = wire;
      d->scope_len = (uint8_t)sl;
      d->scope = scope;
      d->data_len = (uint16_t)dl;
      d->data = gp + off;
      return 0;
    }
    off += dl;
  }
  return -1;
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
  uint32_t handler = handler_id("rogue_hit");
  size_t payload = ROGUE_PAYLOAD;
  uint64_t length = ROGUE_PAYLOAD;
  if (strcmp(what, "good") == 0) {
  } else if (strcmp(what, "magic") == 0) {
    magic = 0x12345678u;
  } else if (strcmp(what, "version") == 0) {
    version = NX_FRAME_VERSION + 1;
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
  } else if (strcmp(what, "truncated") == 0) {
    handler = handler_id("rogue_lie");
    length = 1000;
  } else {
    return -1;
  }
  memset(r->hdr, 0, sizeof(r->hdr));
  put_le(r->hdr, magic, 4);
  r->hdr[4] = (uint8_t)version;
  r->hdr[5] = 1; /* NX_FORMAT_LITTLE */
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

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: conf_rogue <module.so> <module> <gp-hex> <script> "
                    "<linger-ms>\n");
    return 2;
  }
  const char *so = argv[1], *module = argv[2];
  int linger = atoi(argv[5]);
  debug = getenv("NX_DEBUG") != NULL;

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
  srand((unsigned)now_ms() ^ (unsigned)getpid());
  for (int i = 0; i < 16; i++)
    rogue_uuid[i] = (uint8_t)rand();
  if (desc.scope_len == sizeof(rogue_host))
    memcpy(rogue_host, desc.scope, sizeof(rogue_host));

  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  char sym[64];
  snprintf(sym, sizeof(sym), "nx_protocol_%s", module);
  const struct nx_protocol_ops *ops = h != NULL ? dlsym(h, sym) : NULL;
  if (ops == NULL) {
    fprintf(stderr, "conf_rogue: cannot load %s: %s\n", so, dlerror());
    return 2;
  }
  void *state = NULL;
  char why[256] = "";
  int r = ops->init(&rogue_core, &state, why, sizeof(why));
  if (r != 0) {
    fprintf(stderr, "conf_rogue: %s init: %s (%d)\n", module, why, r);
    return 2;
  }
  struct nx_desc_buf mine;
  void *ep = NULL;
  if (ops->descriptor(state, &mine) != 0 || ops->reachable(state, &desc) < 0 ||
      ops->connect(state, &desc, &ep) != 0) {
    fprintf(stderr, "conf_rogue: %s does not reach the victim\n", module);
    ops->finalize(state);
    return 2;
  }

  /* Send the script, one frame at a time, each to completion: a stream
   * module must not have the next frame's bytes in flight when the victim
   * hangs up on the previous one. */
  static struct rogue_frame frames[ROGUE_MAX_FRAMES];
  int sent = 0, failed = 0, n = 0;
  char *script = argv[4];
  for (char *what = strtok(script, ","); what != NULL;
       what = strtok(NULL, ",")) {
    if (n == ROGUE_MAX_FRAMES || make_frame(what, context, &frames[n]) != 0) {
      fprintf(stderr, "conf_rogue: bad script entry '%s'\n", what);
      return 2;
    }
    struct rogue_frame *fr = &frames[n++];
    uint64_t end = now_ms() + 10000;
    int before = atomic_load(&sends_done);
    while ((r = ops->send(state, ep, &fr->f, 0)) == NX_EAGAIN && now_ms() < end)
      ops->progress(state);
    if (r != 0) {
      failed++;
      continue;
    }
    sent++;
    while (atomic_load(&sends_done) == before && now_ms() < end)
      ops->progress(state);
  }
  uint64_t end = now_ms() + (uint64_t)linger;
  while (!atomic_load(&hung_up) && now_ms() < end)
    if (ops->progress(state) == 0)
      usleep(100); /* two cores are shared with the victim */
  ops->disconnect(state, ep);
  ops->finalize(state);
  printf("sent=%d failed=%d hungup=%d\n", sent,
         failed + atomic_load(&sends_failed), atomic_load(&hung_up));
  return 0;
}
