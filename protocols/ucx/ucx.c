/* The ucx protocol module: RSR frames between processes as UCP active messages
 * (UCX picks shared memory or the network); this file holds the ops table, init
 * and finalize, the descriptor and progress. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ucx.h"
#include "ucx_ep.h"
#include "ucx_rx.h"
#include "nxu_opt.h"
#include "nxu_time.h"

/* Settings. */

static int env_set(const char *name) {
  const char *s = getenv(name);
  return s != NULL && s[0] != '\0';
}

/* Whether the user set a shared-memory transport's setting `name`, for
 * both (UCX_MM_<name>) or for posix or sysv alone. */
static int mm_env_set(const char *name) {
  static const char *const prefixes[] = {"UCX_MM_", "UCX_POSIX_", "UCX_SYSV_"};
  char var[64];
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
    snprintf(var, sizeof(var), "%s%s", prefixes[i], name);
    if (env_set(var))
      return 1;
  }
  return 0;
}

/* Our defaults for UCX settings the user left alone. Shared-memory
 * transports in UCX 1.13 report peer failure only when asked to; without
 * that, endpoints created with UCP_ERR_HANDLING_MODE_PEER fall back to
 * TCP even between processes of one host. */
static void config_defaults(struct ucx *u, ucp_config_t *cfg) {
  if (!mm_env_set("ERROR_HANDLING") &&
      ucp_config_modify(cfg, "MM_ERROR_HANDLING", "y") != UCS_OK)
    UCX_LOG(u, 1, "cannot enable peer-failure detection on shared memory");
  /* Frames whose header and payload fit a FIFO element go inline (UCX's
   * "short" protocol: one copy into the receiver's FIFO); larger ones take
   * a send buffer first (bcopy). UCX's 128-byte element leaves room for
   * about 24 bytes of payload after our 48-byte header, so a Fortran M
   * integer took the slower way; 256 bytes leave about 150. Every
   * process of a computation must use the same size (the sender indexes
   * the receiver's FIFO with its own): UCX_WIRE_VERSION says so, and the
   * descriptor's fingerprint of these variables (ucx_desc_parse). */
  static const char *const fifo_vars[] = {"UCX_MM_FIFO_ELEM_SIZE",
                                          "UCX_POSIX_FIFO_ELEM_SIZE",
                                          "UCX_SYSV_FIFO_ELEM_SIZE"};
  int fifo_set = 0;
  char print[256] = "";
  for (size_t i = 0; i < sizeof(fifo_vars) / sizeof(fifo_vars[0]); i++) {
    const char *v = getenv(fifo_vars[i]);
    fifo_set |= v != NULL && v[0] != '\0';
    size_t n = strlen(print);
    snprintf(print + n, sizeof(print) - n, "%s;", v != NULL ? v : "");
  }
  if (!fifo_set && ucp_config_modify(cfg, "MM_FIFO_ELEM_SIZE",
                                     UCX_FIFO_ELEM_DEFAULT) != UCS_OK)
    UCX_LOG(u, 1, "cannot set the shared-memory FIFO element size");
  /* What a peer on this host must have set alike (the values as written:
   * "256" and "256b" count as different, which only costs the ucx route). */
  u->fifo_print = (uint32_t)ucx_hash((const uint8_t *)print, strlen(print));
  /* The shared-memory transports' first pool of receive buffers: UCX
   * makes 512 of about 8 KiB for each (posix and sysv) as the worker is
   * created, and touching those 8 MiB was two thirds of
   * ucp_worker_create (20 of 30 ms for UCX's start and end in a child
   * process; with 128, 7 ms: docs/ucx.md). Not 64: each of the FIFO's
   * 64 elements holds a buffer from the start, so a second pool (a
   * second segment) came at once, and a sender that first attached it as
   * its owner exited had UCX print an error (shmat: Invalid argument)
   * into the program's output. The pool grows by as many again when more
   * are held. */
  if (!mm_env_set("RX_BUFS_GROW") &&
      ucp_config_modify(cfg, "MM_RX_BUFS_GROW", UCX_RX_BUFS_GROW_DEFAULT) !=
          UCS_OK)
    UCX_LOG(u, 1, "cannot set the shared-memory receive pool's growth");
  if (!env_set("UCX_KEEPALIVE_INTERVAL") &&
      ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", UCX_KEEPALIVE_DEFAULT) !=
          UCS_OK)
    UCX_LOG(u, 1, "cannot set the keepalive interval");
  /* This host only (u->remote 0, the default): shared memory and self are
   * all the module uses, so UCX need not start its network transports
   * (its tcp transport opens sockets on every interface): nx_init with
   * ucx in a new process took 5.8 ms instead of 6.7 (medians, 2026-11-29,
   * docs/ucx.md). Not when the user names the transports, or
   * has shared memory not report peer failure (then UCX takes tcp for
   * that, above). */
  if (!u->remote && !env_set("UCX_TLS") && !mm_env_set("ERROR_HANDLING") &&
      ucp_config_modify(cfg, "TLS", UCX_TLS_LOCAL) != UCS_OK)
    UCX_LOG(u, 1, "cannot leave UCX's network transports out");
}

/* The ops. */

static int ucx_init(const struct nx_core_api *core, void **state, char *why,
                    size_t why_len) {
  struct ucx *u = calloc(1, sizeof(*u));
  if (u == NULL)
    return NX_ENOMEM;
  u->core = core;
  u->efd = -1;
  atomic_init(&u->failed, NULL);
  int r = nxu_opt_size("NX_UCX_QUEUE_MAX", &u->queue_max, why, why_len);
  if (r < 0)
    goto err_free;
  r = nxu_opt_number("NX_UCX_QUEUE_FRAMES", &u->queue_frames, why, why_len);
  if (r < 0)
    goto err_free;
  /* Senders wait for the driver's short UCP calls: it spins a little
   * first (nxu_lock.h). */
  nxu_lock_init(&u->lock);

  ucp_config_t *cfg;
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st != UCS_OK) {
    snprintf(why, why_len, "ucp_config_read: %s", ucs_status_string(st));
    r = ucx_status_to_nx(st);
    goto err_lock;
  }
  /* Other hosts only when asked: UCX judges "same host" by its own system
   * id, which hosts cloned from one image (or network namespaces of one
   * machine) share, and without devices named by the user it would pick
   * whatever interface it finds. */
  const char *remote = getenv("NX_UCX_REMOTE");
  u->remote = remote != NULL && remote[0] != '\0' ? strcmp(remote, "0") != 0
                                                  : env_set("UCX_NET_DEVICES");
  config_defaults(u, cfg);
  ucp_params_t params = {
      .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                    UCP_PARAM_FIELD_REQUEST_SIZE,
      .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
      .request_size = sizeof(struct ucx_req),
      .name = "nexus",
  };
  st = ucp_init(&params, cfg, &u->context);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    snprintf(why, why_len,
             "ucp_init: %s (no usable UCX transport; see UCX_TLS and "
             "UCX_NET_DEVICES)",
             ucs_status_string(st));
    r = ucx_status_to_nx(st);
    goto err_lock;
  }
  /* One thread at a time calls UCP, holding u->lock: UCX's own locking
   * would only add a second lock on the same path. */
  ucp_worker_params_t wparams = {
      .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
      .thread_mode = UCS_THREAD_MODE_SINGLE,
  };
  st = ucp_worker_create(u->context, &wparams, &u->worker);
  if (st != UCS_OK) {
    snprintf(why, why_len, "ucp_worker_create: %s", ucs_status_string(st));
    r = ucx_status_to_nx(st);
    goto err_context;
  }
  ucp_worker_attr_t wattr = {.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER};
  st = ucp_worker_query(u->worker, &wattr);
  if (st != UCS_OK || wattr.max_am_header < NX_FRAME_HDR_SIZE) {
    snprintf(why, why_len, "UCX active-message headers hold %zu bytes, not %u",
             st == UCS_OK ? wattr.max_am_header : 0, NX_FRAME_HDR_SIZE);
    r = NX_EUNREACH;
    goto err_worker;
  }
  u->lead_max = wattr.max_am_header - NX_FRAME_HDR_SIZE;
  if (u->lead_max > UCX_LEAD_MAX)
    u->lead_max = UCX_LEAD_MAX;
  st = ucp_worker_get_address(u->worker, &u->address, &u->address_len);
  if (st != UCS_OK) {
    snprintf(why, why_len, "ucp_worker_get_address: %s", ucs_status_string(st));
    r = ucx_status_to_nx(st);
    goto err_worker;
  }
  if (u->address_len > UCX_ADDR_MAX) {
    snprintf(why, why_len,
             "the UCX worker address has %zu bytes; a descriptor holds %u",
             u->address_len, (unsigned)UCX_ADDR_MAX);
    r = NX_EUNREACH;
    goto err_address;
  }
  u->address_hash = ucx_hash((const uint8_t *)u->address, u->address_len);
  ucp_am_handler_param_t hparams = {
      .field_mask =
          UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
          UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
      .id = UCX_AM_ID,
      /* Without UCP_AM_FLAG_PERSISTENT_DATA: eager data UCX can let us
       * keep still comes with UCP_AM_RECV_ATTR_FLAG_DATA (try_wrap,
       * ucx_rx.c); the flag would only make UCP copy the rest (small
       * inline messages) so that it can say the same of them, which costs
       * every 8-byte RSR (docs/performance.md) and saves no copy. */
      .flags = UCP_AM_FLAG_WHOLE_MSG,
      .cb = ucx_am_recv,
      .arg = u,
  };
  st = ucp_worker_set_am_recv_handler(u->worker, &hparams);
  if (st != UCS_OK) {
    snprintf(why, why_len, "ucp_worker_set_am_recv_handler: %s",
             ucs_status_string(st));
    r = ucx_status_to_nx(st);
    goto err_address;
  }
  st = ucp_worker_get_efd(u->worker, &u->efd);
  if (st != UCS_OK) {
    /* The core then polls the module while it sleeps (every 100 ms). */
    UCX_LOG(u, 1, "no event fd: %s", ucs_status_string(st));
    u->efd = -1;
  }
  snprintf(u->version, sizeof(u->version), "UCX %s", ucp_get_version_string());
  *state = u;
  return 0;

err_address:
  ucp_worker_release_address(u->worker, u->address);
err_worker:
  ucp_worker_destroy(u->worker);
err_context:
  ucp_cleanup(u->context);
err_lock:
err_free:
  free(u);
  return r;
}

static void pause_briefly(void) {
  struct timespec ts = {0, 100000}; /* 100 us */
  nanosleep(&ts, NULL);
}

/* Runs after the core stopped its progress engine and disconnected every
 * endpoint. Sends still in flight get up to UCX_LINGER_MS to complete (a
 * last reply is often sent just before nx_finalize), then every endpoint
 * is closed (which tells live peers that we are gone) and the worker is
 * destroyed; whatever UCX still held is failed with NX_EFINALIZED. */
static void ucx_finalize(void *state) {
  struct ucx *u = state;
  uint64_t deadline = nxu_now_ns() + (uint64_t)UCX_LINGER_MS * 1000000u;
  ucx_lock(u);
  u->finalizing = 1;
  for (int phase = 0; phase < 2; phase++) {
    /* Sends that did not finish in time are cancelled by the close:
     * a flushing close would wait for them past the linger. So are
     * fetches still in progress (their sender died midway, most
     * likely): only a forced close takes them off their endpoint, which
     * UCX's worker destroy requires (it asserts otherwise). */
    if (phase == 1) {
      ucx_peers_close_all(u, ucx_peers_pending(u) > 0 || ucx_rx_pending(u) > 0);
      uint64_t close_by = nxu_now_ns() + 200000000u; /* 200 ms to close */
      deadline = deadline > close_by ? deadline : close_by;
    }
    while ((phase == 0 ? ucx_peers_pending(u) : u->closing) > 0 &&
           nxu_now_ns() < deadline) {
      unsigned n = ucp_worker_progress(u->worker);
      ucx_peers_service(u);
      ucx_unlock(u, 1);
      if (n == 0)
        pause_briefly();
      ucx_lock(u);
    }
  }
  if (u->closing > 0) {
    UCX_LOG(u, 1, "finalize: %u endpoint closes did not complete", u->closing);
    ucx_peers_release_closes(u);
  }
  /* UCX's own deferred work (of failed endpoints, say). */
  for (int i = 0; i < 16 && ucp_worker_progress(u->worker) > 0; i++)
    ;
  ucx_unlock(u, 1);
  /* What UCX still holds now, it would never complete: take it back. The
   * frames of sends go to the core once the worker is destroyed, those of
   * fetches are freed then: until then UCX might still touch them. */
  ucx_lock(u);
  ucx_rx_cancel_all(u);
  ucx_peers_detach_all(u, NX_EFINALIZED);
  nx_frame_t *detached = u->done;
  u->done = u->done_tail = NULL;
  ucx_unlock(u, 1);
  /* Every payload the core took without a copy is back by now (the core
   * copies out those the program still holds before finalize). */
  ucx_lock(u);
  if (u->held > 0)
    UCX_LOG(u, 0, "finalize: %zu received payloads not given back", u->held);
  UCX_LOG(u, 1,
          "eager payloads kept without a copy: %llu; copied as not "
          "8-aligned: %llu",
          (unsigned long long)u->wrapped, (unsigned long long)u->unaligned);
  ucx_unlock(u, 1);
  ucp_worker_release_address(u->worker, u->address);
  /* Destroying the worker completes the requests it still holds; their
   * callbacks record them like any other. */
  ucp_worker_destroy(u->worker);
  ucx_lock(u);
  ucx_unlock(u, 1);
  while (detached != NULL) {
    nx_frame_t *f = detached;
    detached = f->module_data[0];
    u->core->send_done(f, NX_EFINALIZED);
  }
  ucx_rx_free_all(u);
  ucx_peers_free_all(u);
  ucp_cleanup(u->context);
  free(u);
}

static int ucx_descriptor(void *state, struct nx_desc_buf *out) {
  struct ucx *u = state;
  out->scope_len = UCX_UUID_SIZE;
  memcpy(out->scope, u->core->host_uuid, UCX_UUID_SIZE);
  out->data[0] = UCX_DESC_VERSION;
  memcpy(out->data + 1, u->core->process_uuid, UCX_UUID_SIZE);
  for (int i = 0; i < 8; i++)
    out->data[1 + UCX_UUID_SIZE + i] = (uint8_t)(u->address_hash >> (8 * i));
  for (int i = 0; i < 4; i++)
    out->data[1 + UCX_UUID_SIZE + 8 + i] = (uint8_t)(u->fifo_print >> (8 * i));
  memcpy(out->data + UCX_DESC_HEAD, u->address, u->address_len);
  out->data_len = (uint16_t)(UCX_DESC_HEAD + u->address_len);
  return 0;
}

/* UCX decides later whether it can reach the address (ucp_ep_create in
 * connect fails if no transport matches, and the core then tries the next
 * module): a well-formed descriptor of another process costs UCX_COST. */
static int ucx_reachable(void *state, const struct nx_desc *peer) {
  const uint8_t *uuid, *addr;
  size_t len;
  struct ucx *u = state;
  if (ucx_desc_parse(state, peer, &uuid, &addr, &len) < 0)
    return NX_EUNREACH;
  if (!u->remote && (peer->scope_len != UCX_UUID_SIZE ||
                     memcmp(peer->scope, u->core->host_uuid, UCX_UUID_SIZE)))
    return NX_EUNREACH;
  return UCX_COST;
}

/* Arming the event fd. The core sleeps in epoll on our fd only after a
 * round in which every module's progress found nothing, and (section 7 of
 * docs/design.md) only after at least 1 ms of such rounds: the spin and
 * yield phases of its driver. So it is enough to arm here, once idle for
 * UCX_ARM_IDLE_NS (less than that 1 ms): by the time the core sleeps,
 * the fd is armed, and any event after the arm makes it readable. An arm
 * that finds events pending (UCS_ERR_BUSY) counts as work, so the core
 * polls again instead of sleeping. While armed we re-arm at most every
 * UCX_ARM_IDLE_NS: the fd is level-triggered, and re-arming is what
 * drains it if it became readable without any work for us. During a busy
 * exchange we never arm, so senders never pay for signalling us. */
/* Arms the worker now: 1 if events are pending (UCS_ERR_BUSY), else 0. */
static int arm_worker(struct ucx *u, uint64_t now) {
  ucs_status_t st = ucp_worker_arm(u->worker);
  u->last_arm = now;
  u->armed = st == UCS_OK;
  if (st == UCS_ERR_BUSY)
    return 1;
  if (st != UCS_OK)
    UCX_LOG(u, 1, "ucp_worker_arm: %s", ucs_status_string(st));
  return 0;
}

static int arm(struct ucx *u) {
  /* The clock only every 16th idle poll: a read (20-25 ns here) was a
   * third of an idle poll, and 6-7% of an 8 B round trip. */
  if ((u->idle_polls++ & 15) != 0)
    return 0;
  uint64_t now = nxu_now_ns();
  if (u->idle_since == 0) {
    u->idle_since = now;
    return 0;
  }
  if (now - u->idle_since < UCX_ARM_IDLE_NS ||
      (u->armed && now - u->last_arm < UCX_ARM_IDLE_NS))
    return 0;
  return arm_worker(u, now);
}

/* One poll. An empty one (the most common call of all: the core polls
 * while it waits) is the lock, one ucp_worker_progress, the arming count
 * and the unlock. */
static int ucx_progress(void *state, nx_frame_batch_t *batch) {
  struct ucx *u = state;
  int n = 0;
  ucx_lock(u);
  u->batch = batch; /* the handler adds to it (ucx.h, the lock's rule 3) */
  u->received = 0;
  /* Until UCX finds nothing more, or frames came: those the core
   * dispatches at once and then polls again (it keeps a module that found
   * work hot), rather than after one more ucp_worker_progress, which in a
   * ping-pong finds nothing and costs as much as one that finds a message.
   * A flood still arrives in batches: one call hands over what UCX found
   * (ucx.h, UCX_PROGRESS_ROUNDS). */
  for (int i = 0; i < UCX_PROGRESS_ROUNDS; i++) {
    unsigned r = ucp_worker_progress(u->worker);
    n += (int)r;
    if (r == 0 || u->received > 0)
      break;
  }
  /* Failures the error handler pushed, during that progress or before it
   * (from another thread). */
  if (atomic_load_explicit(&u->failed, memory_order_acquire) != NULL) {
    ucx_peers_service(u);
    n++;
  }
  if (n == 0 && u->efd >= 0) {
    n = arm(u);
  } else {
    u->idle_since = 0;
    u->idle_polls = 0;
    u->armed = 0;
  }
  ucx_unlock(u, 1);
  return n;
}

/* The core is about to sleep (the arm slot): arm now, whatever the idle time.
 * Events found meanwhile count as work, so the core polls again. */
static int ucx_arm(void *state) {
  struct ucx *u = state;
  if (u->efd < 0)
    return NX_ENOTSUP;
  ucx_lock(u);
  int n = 0;
  if (atomic_load_explicit(&u->failed, memory_order_acquire) != NULL) {
    ucx_peers_service(u);
    n++;
  }
  if (n == 0)
    n = arm_worker(u, nxu_now_ns());
  if (n > 0) {
    u->idle_since = 0;
    u->armed = 0;
  }
  ucx_unlock(u, 1);
  return n;
}

static int ucx_wait_fd(void *state) {
  struct ucx *u = state;
  return u->efd >= 0 ? u->efd : NX_ENOTSUP;
}

static const char *ucx_backend_version(void *state) {
  struct ucx *u = state;
  return u->version;
}

NX_PROTOCOL_EXPORT const struct nx_protocol_ops nx_protocol_ucx = {
    .abi_version = NX_PROTOCOL_ABI_VERSION,
    .name = UCX_NAME,
    .wire_version = UCX_WIRE_VERSION,
    .cost = UCX_COST,
    .init = ucx_init,
    .finalize = ucx_finalize,
    .descriptor = ucx_descriptor,
    .reachable = ucx_reachable,
    .connect = ucx_connect,
    .disconnect = ucx_disconnect,
    .send = ucx_send,
    .progress = ucx_progress,
    .wait_fd = ucx_wait_fd,
    .backend_version = ucx_backend_version,
    .endpoint_info = ucx_endpoint_info,
    .arm = ucx_arm,
    .iov_max = NX_FRAME_IOV_MAX, /* UCP_DATATYPE_IOV */
};
