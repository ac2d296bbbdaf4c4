/* The runtime's lifecycle: nx_init brings the layers up from the bottom
 * (settings, identity, buffers, engine, contexts, modules, this process's
 * descriptors, its launcher's channel) and nx_finalize takes them down in
 * reverse. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "processes/attach.h"
#include "processes/boot.h"
#include "buffers/buffer_cache.h"
#include "processes/child.h"
#include "services/confirm.h"
#include "services/gateway.h"
#include "contexts/context.h"
#include "modules/dlist.h"
#include "services/ledger.h"
#include "rsr/fiber.h"
#include "buffers/frame.h"
#include "modules/module.h"
#include "nxu_auth.h"
#include "nxu_key.h"
#include "nxu_opt.h"
#include "nxu_wire.h"
#include "rsr/order.h"
#include "processes/parent.h"
#include "processes/uvloop.h"
#include "progress/progress.h"
#include "runtime/core_api.h"
#include "base/trace.h"

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
/* Set when nx_finalize had to leave blocked handler threads running: the
 * runtime's state is theirs, so it can never be initialised again. */
static int abandoned;

/* The host's identity: NX_HOST_ID if set (test hosts in network namespaces
 * share /etc/machine-id), else /etc/machine-id, else the host name. Two
 * 64-bit FNV-1a hashes, stored little-endian: processes of both byte orders
 * on one host must agree on it (tcp offers loopback addresses only to a
 * peer of the same host identity). */
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
  nxu_le64(out, h1);
  nxu_le64(out + 8, h2);
}

/* The settings of the core, from the one table (nexus/util/nxu_opt.c).
 * Every core variable that is set is checked first: a malformed value
 * fails nx_init with its reason (the modules check theirs). */
static int gateway_env;      /* NX_GATEWAY=1 */
static unsigned finalize_ms; /* NX_FINALIZE_MS */

static int read_env(void) {
  char why[256];
  uint64_t spin, debug, stack, fin;
  int progress, threaded, gateway;
  if (nxu_opt_check_all("core", why, sizeof(why)) < 0 ||
      nxu_opt_choice("NX_PROGRESS", &progress, why, sizeof(why)) < 0 ||
      nxu_opt_number("NX_SPIN_US", &spin, why, sizeof(why)) < 0 ||
      nxu_opt_number("NX_DEBUG", &debug, why, sizeof(why)) < 0 ||
      nxu_opt_choice("NX_THREADED", &threaded, why, sizeof(why)) < 0 ||
      nxu_opt_choice("NX_GATEWAY", &gateway, why, sizeof(why)) < 0 ||
      nxu_opt_number("NX_HANDLER_STACK", &stack, why, sizeof(why)) < 0 ||
      nxu_opt_number("NX_FINALIZE_MS", &fin, why, sizeof(why)) < 0) {
    nxi_log(0, NULL, "%s", why);
    return NX_EINVAL;
  }
  nxi_rt.poll_mode = progress == 1;
  gateway_env = gateway == 1;
  finalize_ms = (unsigned)fin;
  nxi_rt.spin_us = (unsigned)spin;
  nxi_rt.debug = (unsigned)debug;
  nxi_fiber_init(threaded == 0, (size_t)stack);
  /* NX_KEY: the computation's key as 32 hex digits, set by the launcher. */
  const char *hex = getenv("NX_KEY");
  if (hex == NULL || hex[0] == '\0')
    return getrandom(nxi_rt.key, NX_KEY_SIZE, 0) == NX_KEY_SIZE ? 0 : NX_EIO;
  return nxu_hex_decode(hex, nxi_rt.key, NX_KEY_SIZE);
}

/* The process id is random, or NX_PROC_ID at the process's first nx_init
 * (checked by read_env): a frontend that numbers its processes gives each
 * its number. A later run of the runtime draws one: its peers may remember
 * the first as dead. */
static int proc_id_read;

static int new_identity(void) {
  if (nxi_rt.proc_id != 0)
    nxi_proc_retire(nxi_rt.proc_id);
  if (getrandom(nxi_rt.process_uuid, 16, 0) != 16)
    return NX_EIO;
  memcpy(&nxi_rt.proc_id, nxi_rt.process_uuid, 4);
  uint64_t given = 0;
  char why[160];
  if (!proc_id_read &&
      nxu_opt_number("NX_PROC_ID", &given, why, sizeof(why)) == 0 && given != 0)
    nxi_rt.proc_id = (uint32_t)given;
  proc_id_read = 1;
  if (nxi_rt.proc_id == 0)
    nxi_rt.proc_id = 1;
  fill_host_uuid(nxi_rt.host_uuid);
  return 0;
}

int nx_init(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* Not from an error callback: the callbacks' lock is held there, and
   * nx_init takes it under init_lock (nx_finalize too). */
  if (nxi_in_error_cb())
    return NX_EBUSY;
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
  r = new_identity();
  if (r < 0)
    goto err_cache;
  /* Before anything is sent or handled: every event goes in the log. */
  r = nxi_trace_start();
  if (r < 0)
    goto err_cache;
  nxi_frame_init();
  nxi_rt_reset();
  /* Reliability's stages (rsr/stages.h) from the start, before anything
   * can send or handle an RSR; nxi_confirm_init adds the messages. */
  nxi_ledger_init();

  r = nxi_progress_init();
  if (r < 0)
    goto err_cache;
  r = nxi_contexts_init();
  if (r < 0)
    goto err_progress;
  r = nxi_modules_load(&nxi_core_api, nxi_child_defers());
  if (r < 0)
    goto err_contexts;
  if (nxi_module_count_loaded() == 0) {
    nxi_log(0, NULL, "no protocol module loaded:");
    for (int i = 0; i < nxi_module_count_all(); i++)
      nxi_module_explain(i);
    r = NX_EUNREACH;
    goto err_modules;
  }
  if (nxi_tracing())
    for (int i = 0; i < nxi_module_count_loaded(); i++)
      nxi_trace_name(NXT_DEF_MODULE, 0, 0, (uint8_t)i,
                     nxi_module_loaded(i)->name);
  r = nxi_progress_watch_modules();
  if (r < 0)
    goto err_modules;
  /* Before anything can use the key: the processes of a job (an MPI job,
   * or one a PMIx server started) agree on it. */
  r = nxi_boot_init();
  if (r < 0) {
    nxi_log(0, NULL, "agreeing on the job's key with its other ranks: %s",
            nx_strerror(r));
    goto err_modules;
  }
  struct nxi_dlist *self;
  r = nxi_dlist_self(nxi_rt.proc_id, &self);
  if (r < 0)
    goto err_boot;
  atomic_store(&nxi_rt.self_dl, self);
  r = nxi_child_init();
  if (r < 0)
    goto err_dlist;
  if (r > 0)
    nxi_boot_child();
  atomic_store(&nxi_rt.refs, 1);
  r = nxi_confirm_init();
  if (r < 0) {
    atomic_store(&nxi_rt.refs, 0);
    nxi_child_finalize();
    goto err_dlist;
  }
  nxi_progress_start();
  nxi_child_join_start(); /* the slow modules, off the critical path */
  if (gateway_env && (r = nx_gateway_enable()) < 0)
    nxi_log(0, NULL, "NX_GATEWAY=1: %s", nx_strerror(r));
  pthread_mutex_unlock(&init_lock);
  return 0;

err_dlist:
  nxi_dlist_release(nxi_rt.self_dl);
  nxi_rt.self_dl = NULL;
  nxi_dlist_finalize();
err_boot:
  nxi_boot_finalize();
err_modules:
  nxi_modules_unload();
err_contexts:
  nxi_contexts_finalize();
err_progress:
  nxi_progress_finalize();
err_cache:
  nxi_trace_stop();
  nxi_buffer_cache_finalize();
err_unlock:
  pthread_mutex_unlock(&init_lock);
  return r;
}

int nx_finalize(void) {
  if (nxi_in_error_cb())
    return NX_EBUSY; /* as nx_init */
  pthread_mutex_lock(&init_lock);
  if (atomic_load(&nxi_rt.refs) == 0) {
    pthread_mutex_unlock(&init_lock);
    return NX_ENOTINIT;
  }
  /* The call that would stop the runtime cannot from a handler: the
   * runtime runs below it (the handler's context, the driver, a thread's
   * wait). One that counts a nested nx_init down can. */
  if (atomic_load(&nxi_rt.refs) == 1 && nxi_in_handler()) {
    pthread_mutex_unlock(&init_lock);
    return NX_EBUSY;
  }
  int result = 0;
  if (atomic_load(&nxi_rt.refs) == 1) {
    if (nxi_tracing())
      nxi_trace_event(NXT_FINALIZE, 0, 0, 0, 0, 0xff, 0, 0, 0);
    /* No module joins while the runtime winds down (child.h). */
    nxi_child_join_stop();
    /* RSRs already sent to a context of this process run first (rule 14):
     * a program that sends and then finalizes sees its handlers run. */
    int left = nxi_progress_drain(finalize_ms);
    if (left > 0)
      nxi_log(0, NULL,
              "nx_finalize: %d RSR(s) still queued after %u ms dropped", left,
              finalize_ms);
    /* Then those sent to other processes are handled there, or reported
     * (docs/design.md section 9). The peers hear what ran here. */
    nxi_confirm_tell_all(0);
    nxi_confirm_clock_end(0, 50);
    if (nxi_confirm_flush((int)finalize_ms) < 0) {
      uint64_t lost = nxi_ledger_report_all(NX_ETIMEDOUT);
      nxi_log(0, NULL,
              "nx_finalize: %llu RSR(s) not confirmed handled within "
              "NX_FINALIZE_MS=%u reported lost",
              (unsigned long long)lost, finalize_ms);
      result = NX_ETIMEDOUT;
    }
    /* The last counts, acknowledged: a peer that gets them no more (this
     * process gone, its transport's last bytes lost with it) would report
     * RSRs that ran here. */
    nxi_confirm_tell_all(1);
    nxi_confirm_wait_acks(1000);
    nxi_confirm_drain(1000);
  }
  if (atomic_fetch_sub(&nxi_rt.refs, 1) > 1) {
    pthread_mutex_unlock(&init_lock);
    return 0;
  }
  nxi_attach_finalize();
  nxi_child_finalize();
  nxi_parent_finalize(); /* ends our children; stops the watchers */
  nxi_uvloop_finalize(); /* the process layer's loop, its handles closed */
  if (nxi_progress_finalize() > 0) {
    /* Blocked handler threads may still use contexts, gps and modules. */
    abandoned = 1;
    nxi_trace_stop(); /* what was recorded is written */
    pthread_mutex_unlock(&init_lock);
    return NX_EBUSY;
  }
  nxi_order_finalize();
  nxi_gateway_finalize();
  nxi_confirm_finalize();
  nxi_dlist_release(nxi_rt.self_dl);
  nxi_rt.self_dl = NULL;
  nxi_dlist_finalize(); /* drops cached routes: before the modules go */
  nxi_contexts_finalize();
  /* Received payloads the program still holds leave the modules' memory. */
  nxi_buffer_unwrap_all();
  nxi_modules_unload();
  nxi_ledger_finalize(); /* after the modules' last send_done */
  nxi_boot_finalize();
  nxi_buffer_cache_finalize(); /* the modules freed their frames */
  nxi_trace_stop();
  pthread_mutex_unlock(&init_lock);
  return result;
}
