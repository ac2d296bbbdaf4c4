/* Runtime lifecycle (nx_init/nx_finalize), identity, counters, drop reporting, and the core services given to modules. */
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "buffer_cache.h"
#include "internal.h"

struct nxi_runtime nxi_rt;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set when nx_finalize had to leave blocked handler threads running: the
 * runtime's state is theirs, so it can never be initialised again. */
static int abandoned;

#define DROPS_LOGGED_MAX 10

void nxi_log(int level, const char *module, const char *fmt, ...) {
  if (level > 0 && nxi_rt.debug < (unsigned)level)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (module != NULL)
    fprintf(stderr, "nexus[%d] %s: %s\n", (int)getpid(), module, line);
  else
    fprintf(stderr, "nexus[%d]: %s\n", (int)getpid(), line);
}

static void core_log(int level, const char *module, const char *fmt, ...) {
  if (level > 0 && nxi_rt.debug < (unsigned)level)
    return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  nxi_log(level, module, "%s", line);
}

void nxi_drop(int err, uint64_t context, uint32_t handler) {
  atomic_uint_fast64_t *counter =
      err == NX_ENOHANDLER   ? &nxi_rt.drop_no_handler
      : err == NX_ENOCONTEXT ? &nxi_rt.drop_no_context
                             : &nxi_rt.rsr_failed;
  atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
  nx_error_cb cb = __atomic_load_n(&nxi_rt.error_cb, __ATOMIC_ACQUIRE);
  if (cb != NULL) {
    cb(err, context, handler, __atomic_load_n(&nxi_rt.error_arg, __ATOMIC_RELAXED));
    return;
  }
  if (atomic_fetch_add(&nxi_rt.drops_logged, 1) < DROPS_LOGGED_MAX)
    nxi_log(0, NULL, "dropped an RSR for context %#llx handler %#x: %s",
            (unsigned long long)context, handler, nx_strerror(err));
}

/* Core services for modules (nexus/protocol.h). */

/* The largest frame a peer may announce: this machine's memory. Computed
 * once (sysconf(_SC_PHYS_PAGES) is a system call). */
static size_t max_frame_bytes;

static size_t max_frame(void) { return max_frame_bytes; }

static void compute_max_frame(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  max_frame_bytes = pages <= 0 || size <= 0 ? (size_t)1 << 40
                                            : (size_t)pages * (size_t)size;
}

static int core_frame_alloc(const void *hdr, nx_frame_t **frame) {
  const uint8_t *h = hdr;
  uint64_t len = nxi_rd64(h + 32);
  if (nxi_rd32(h) != NX_FRAME_MAGIC || h[4] != NX_FRAME_VERSION ||
      (h[5] != NX_FORMAT_LITTLE && h[5] != NX_FORMAT_BIG) ||
      nxi_rd32(h + 8) == 0 || nxi_rd64(h + 16) == 0 || len > max_frame()) {
    atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
    return NX_EPROTO;
  }
  struct nx_buffer *b = nxi_buffer_alloc((size_t)len);
  if (b == NULL)
    return NX_ENOMEM;
  b->kind = NXI_BUF_RECV;
  b->fmt = h[5];
  b->handler = nxi_rd32(h + 8);
  b->context = nxi_rd64(h + 16);
  b->address = nxi_rd64(h + 24);
  b->len = (size_t)len;
  memcpy(b->hdr, h, NX_FRAME_HDR_SIZE);
  b->frame.iov[0].iov_base = b->hdr;
  b->frame.iov[0].iov_len = NX_FRAME_HDR_SIZE;
  b->frame.iov[1].iov_base = b->data;
  b->frame.iov[1].iov_len = (size_t)len;
  b->frame.iovcnt = 2;
  b->frame.len = NX_FRAME_HDR_SIZE + (size_t)len;
  *frame = &b->frame;
  return 0;
}

static void core_frame_deliver(nx_frame_t *frame) {
  nxi_deliver(NXI_CONTAINER_OF(frame, struct nx_buffer, frame));
}

static void core_frame_free(nx_frame_t *frame) {
  nxi_buffer_free(NXI_CONTAINER_OF(frame, struct nx_buffer, frame));
}

/* A frame the module could not deliver (its peer died with it queued) is
 * an RSR that failed after nx_rsr_send returned: report it. */
static void core_send_done(nx_frame_t *frame, int status) {
  struct nx_buffer *b = NXI_CONTAINER_OF(frame, struct nx_buffer, frame);
  if (status < 0)
    nxi_drop(status, b->context, b->handler);
  nxi_buffer_free(b);
}

/* The sent buffer becomes the received one: same bytes, same format tag,
 * now read-only and held by the runtime for its handler. */
static void core_handover(nx_frame_t *frame) {
  struct nx_buffer *b = NXI_CONTAINER_OF(frame, struct nx_buffer, frame);
  b->kind = NXI_BUF_RECV;
  b->pos = 0;
  nxi_deliver(b);
}

static void core_peer_failed(void *state, void *ep, int status) {
  nxi_gp_peer_failed(state, ep, status < 0 ? status : NX_EPEERDEAD);
}

static void core_bad_peer(const char *module, const char *why) {
  atomic_fetch_add(&nxi_rt.drop_bad_frame, 1);
  nxi_log(0, module, "dropped a peer: %s", why);
}

static void core_wake(void) { nxi_progress_wake(); }

const struct nx_core_api nxi_core_api = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .process_uuid = nxi_rt.process_uuid,
    .host_uuid = nxi_rt.host_uuid,
    .frame_alloc = core_frame_alloc,
    .frame_deliver = core_frame_deliver,
    .frame_free = core_frame_free,
    .send_done = core_send_done,
    .handover = core_handover,
    .peer_failed = core_peer_failed,
    .bad_peer = core_bad_peer,
    .wake = core_wake,
    .log = core_log,
    .key = nxi_rt.key,
};

/* Identity. */

/* The host's identity: NX_HOST_ID if set (test hosts in network namespaces
 * share /etc/machine-id), else /etc/machine-id, else the host name. */
static void fill_host_uuid(uint8_t out[16]) {
  char text[256] = {0};
  const char *id = getenv("NX_HOST_ID");
  ssize_t n = -1;
  if (id != NULL && id[0] != '\0') {
    snprintf(text, sizeof(text), "nx-host-id:%s", id);
    n = (ssize_t)strlen(text);
  } else {
    int fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
    if (fd >= 0)
      close(fd);
  }
  if (n <= 0)
    gethostname(text, sizeof(text) - 1);
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (const char *p = text; *p && *p != '\n'; p++) {
    h1 = (h1 ^ (uint8_t)*p) * 0x100000001b3ull;
    h2 = (h2 ^ (uint8_t)*p) * 0x100000001b3ull + 1;
  }
  memcpy(out, &h1, 8);
  memcpy(out + 8, &h2, 8);
}

/* NX_KEY: the computation's key as 32 hex digits, set by the launcher. */
static int read_key(void) {
  const char *hex = getenv("NX_KEY");
  if (hex == NULL || hex[0] == '\0')
    return getrandom(nxi_rt.key, NX_KEY_SIZE, 0) == NX_KEY_SIZE ? 0 : NX_EIO;
  if (strlen(hex) != 2 * NX_KEY_SIZE) {
    nxi_log(0, NULL, "NX_KEY must be %u hex digits", 2 * NX_KEY_SIZE);
    return NX_EINVAL;
  }
  for (unsigned i = 0; i < 2 * NX_KEY_SIZE; i++) {
    char c = hex[i];
    int v = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (v < 0) {
      nxi_log(0, NULL, "NX_KEY is not hexadecimal");
      return NX_EINVAL;
    }
    if (i % 2 == 0)
      nxi_rt.key[i / 2] = (uint8_t)(v << 4);
    else
      nxi_rt.key[i / 2] |= (uint8_t)v;
  }
  return 0;
}

static int read_env(void) {
  const char *mode = getenv("NX_PROGRESS");
  if (mode == NULL || mode[0] == '\0' || strcmp(mode, "thread") == 0)
    nxi_rt.poll_mode = 0;
  else if (strcmp(mode, "poll") == 0)
    nxi_rt.poll_mode = 1;
  else {
    nxi_log(0, NULL, "NX_PROGRESS=%s: expected 'thread' or 'poll'", mode);
    return NX_EINVAL;
  }
  const char *spin = getenv("NX_SPIN_US");
  nxi_rt.spin_us = spin != NULL ? (unsigned)strtoul(spin, NULL, 10) : 50;
  const char *debug = getenv("NX_DEBUG");
  nxi_rt.debug = debug != NULL ? (unsigned)strtoul(debug, NULL, 10) : 0;
  return read_key();
}

/* This process's descriptor list: one entry per loaded module. */
static int build_self_dlist(void) {
  int n = nxi_module_count_loaded();
  size_t cap = 1;
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    cap += 1 + strlen(m->name) + 2 + 1 + m->desc.scope_len + 2 +
           m->desc.data_len;
  }
  uint8_t *blob = malloc(cap);
  if (blob == NULL)
    return NX_ENOMEM;
  size_t off = 0;
  blob[off++] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    struct nxi_module *m = nxi_module_loaded(i);
    size_t nl = strlen(m->name);
    blob[off++] = (uint8_t)nl;
    memcpy(blob + off, m->name, nl);
    off += nl;
    nxi_le16(blob + off, m->ops->wire_version);
    off += 2;
    blob[off++] = m->desc.scope_len;
    memcpy(blob + off, m->desc.scope, m->desc.scope_len);
    off += m->desc.scope_len;
    nxi_le16(blob + off, m->desc.data_len);
    off += 2;
    memcpy(blob + off, m->desc.data, m->desc.data_len);
    off += m->desc.data_len;
  }
  int r = nxi_dlist_intern(blob, off, &nxi_rt.self_dl);
  free(blob);
  if (r == 0)
    atomic_store(&nxi_rt.self_dl->proc, nxi_rt.proc_id);
  return r;
}

int nx_init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&nxi_rt.refs) > 0) {
    atomic_fetch_add(&nxi_rt.refs, 1);
    pthread_mutex_unlock(&init_lock);
    return 0;
  }
  int r = NX_EBUSY;
  if (abandoned)
    goto err_unlock;
  r = read_env();
  if (r < 0)
    goto err_unlock;
  r = nxi_buffer_cache_init();
  if (r < 0)
    goto err_unlock;
  nxi_rt.explicit_order = getenv("NX_PROTOCOLS") != NULL;
  if (getrandom(nxi_rt.process_uuid, 16, 0) != 16) {
    r = NX_EIO;
    goto err_unlock;
  }
  memcpy(&nxi_rt.proc_id, nxi_rt.process_uuid, 4);
  if (nxi_rt.proc_id == 0)
    nxi_rt.proc_id = 1;
  fill_host_uuid(nxi_rt.host_uuid);
  compute_max_frame();
  atomic_store(&nxi_rt.drops_logged, 0);
  atomic_store(&nxi_rt.rsr_sent, 0);
  atomic_store(&nxi_rt.rsr_handled, 0);
  atomic_store(&nxi_rt.drop_no_handler, 0);
  atomic_store(&nxi_rt.drop_no_context, 0);
  atomic_store(&nxi_rt.drop_bad_frame, 0);
  atomic_store(&nxi_rt.threads_created, 0);
  atomic_store(&nxi_rt.rsr_failed, 0);
  atomic_store(&nxi_rt.peers_failed, 0);
  nxi_rt.error_cb = NULL;

  r = nxi_progress_init();
  if (r < 0)
    goto err_cache;
  r = nxi_contexts_init();
  if (r < 0)
    goto err_progress;
  r = nxi_modules_load();
  if (r < 0)
    goto err_contexts;
  if (nxi_module_count_loaded() == 0) {
    nxi_log(0, NULL, "no protocol module loaded:");
    for (int i = 0; i < nxi_module_count_all(); i++)
      nxi_module_explain(i);
    r = NX_EUNREACH;
    goto err_modules;
  }
  r = build_self_dlist();
  if (r < 0)
    goto err_modules;
  r = nxi_process_init();
  if (r < 0)
    goto err_dlist;
  atomic_store(&nxi_rt.refs, 1);
  nxi_progress_start();
  pthread_mutex_unlock(&init_lock);
  return 0;

err_dlist:
  nxi_dlist_release(nxi_rt.self_dl);
  nxi_rt.self_dl = NULL;
  nxi_gp_finalize();
err_modules:
  nxi_modules_unload();
err_contexts:
  nxi_contexts_finalize();
err_progress:
  nxi_progress_finalize();
err_cache:
  nxi_buffer_cache_finalize();
err_unlock:
  pthread_mutex_unlock(&init_lock);
  return r;
}

int nx_finalize(void) {
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&nxi_rt.refs) == 0) {
    pthread_mutex_unlock(&init_lock);
    return NX_ENOTINIT;
  }
  if (atomic_fetch_sub(&nxi_rt.refs, 1) > 1) {
    pthread_mutex_unlock(&init_lock);
    return 0;
  }
  nxi_attach_finalize();
  nxi_process_finalize(); /* ends our children; stops the watchers */
  if (nxi_progress_finalize() > 0) {
    /* Blocked handler threads may still use contexts, gps and modules. */
    abandoned = 1;
    pthread_mutex_unlock(&init_lock);
    return NX_EBUSY;
  }
  nxi_dlist_release(nxi_rt.self_dl);
  nxi_rt.self_dl = NULL;
  nxi_gp_finalize(); /* drops cached routes: before the modules go */
  nxi_contexts_finalize();
  nxi_modules_unload();
  nxi_buffer_cache_finalize(); /* the modules freed their frames */
  pthread_mutex_unlock(&init_lock);
  return 0;
}

int nx_node_self(nx_node_t *node) {
  if (node == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  memset(node, 0, sizeof(*node));
  gethostname(node->host, sizeof(node->host) - 1);
  node->id = 0;
  return 0;
}

int nx_stats_get(nx_stats_t *s) {
  if (s == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  s->rsr_sent = atomic_load(&nxi_rt.rsr_sent);
  s->rsr_handled = atomic_load(&nxi_rt.rsr_handled);
  s->drop_no_handler = atomic_load(&nxi_rt.drop_no_handler);
  s->drop_no_context = atomic_load(&nxi_rt.drop_no_context);
  s->drop_bad_frame = atomic_load(&nxi_rt.drop_bad_frame);
  s->threads_created = atomic_load(&nxi_rt.threads_created);
  s->rsr_failed = atomic_load(&nxi_rt.rsr_failed);
  s->peers_failed = atomic_load(&nxi_rt.peers_failed);
  return 0;
}

int nx_error_cb_set(nx_error_cb cb, void *arg) {
  if (!nxi_ready())
    return NX_ENOTINIT;
  __atomic_store_n(&nxi_rt.error_arg, arg, __ATOMIC_RELAXED);
  __atomic_store_n(&nxi_rt.error_cb, cb, __ATOMIC_RELEASE);
  return 0;
}
