/* The PMIx bootstrap, built as its own plugin (boot_pmix.h) when PMIx is
 * found: a process that a PMIx server started (mpirun, srun --mpi=pmix,
 * prterun) learns its rank and the job's size from it, and the job's
 * processes exchange rank 0's key and their descriptor lists through the
 * job's PMIx store, each exchange one put, commit and fence. libnexus
 * loads it (boot_pmix_load.c) and has made its checks of the process's
 * variables before it calls join. */
#include <pmix.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nexus/errors.h"
#include "processes/boot_pmix.h"

/* A fence that does not complete in this time fails the exchange (where
 * the server honours PMIX_TIMEOUT; the launcher's own bound otherwise). */
#define FENCE_TIMEOUT_S 60

static pmix_proc_t me;
static uint32_t job_size;
/* Joined once per process: Open MPI 4.1's server does not take a process
 * back after PMIx_Finalize (a second PMIx_Init's fences fail, or crash),
 * so PMIx stays initialized until the process exits. */
static int joined;

static void leave_at_exit(void) { PMIx_Finalize(NULL, 0); }

/* The core's logger (set_log); nothing is said until it is set. */
static void (*log_fn)(int level, const char *msg);

static void set_log(void (*log)(int level, const char *msg)) { log_fn = log; }

static void plog(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void plog(int level, const char *fmt, ...) {
  if (log_fn == NULL)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log_fn(level, msg);
}
/* Each exchange names its values anew ("nx.key.3"): a process that calls
 * nx_init or nx_context_peers again must not read the last round's. */
static unsigned round_no;

static int status_to_nx(pmix_status_t s) {
  switch (s) {
  case PMIX_SUCCESS: return 0;
  case PMIX_ERR_NOMEM: return NX_ENOMEM;
  case PMIX_ERR_TIMEOUT: return NX_ETIMEDOUT;
  case PMIX_ERR_NOT_FOUND: return NX_ENOENT;
  case PMIX_ERR_NOT_SUPPORTED: return NX_ENOTSUP;
  case PMIX_ERR_BAD_PARAM: return NX_EINVAL;
  case PMIX_ERR_UNREACH:
  case PMIX_ERR_LOST_CONNECTION: return NX_EUNREACH;
  default: return NX_EPROTO;
  }
}

/* Logs a failed PMIx call once, where it is found, and converts it. */
static int fail(const char *what, pmix_status_t s) {
  plog(0, "PMIx bootstrap: %s: %s", what, PMIx_Error_string(s));
  return status_to_nx(s);
}

static int bp_join(int under) {
  if (joined)
    return 1; /* a later nx_init of this process */
  if (!under && !PMIx_Initialized())
    return 0;
  pmix_status_t s = PMIx_Init(&me, NULL, 0);
  if (s != PMIX_SUCCESS) {
    /* Variables left by a server this process cannot reach: not a job. */
    plog(0,
         "PMIx bootstrap: PMIx_Init failed (%s) although PMIX_NAMESPACE "
         "is set; starting without a job",
         PMIx_Error_string(s));
    return 0;
  }
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t *v = NULL;
  s = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
  if (s != PMIX_SUCCESS || v == NULL || v->type != PMIX_UINT32 ||
      v->data.uint32 == 0 || me.rank >= v->data.uint32) {
    int r = fail("no job size", s == PMIX_SUCCESS ? PMIX_ERR_BAD_PARAM : s);
    if (v != NULL)
      PMIX_VALUE_RELEASE(v);
    PMIx_Finalize(NULL, 0);
    return r;
  }
  job_size = v->data.uint32;
  PMIX_VALUE_RELEASE(v);
  char mine[24];
  snprintf(mine, sizeof(mine), "%ld", (long)getpid());
  setenv("NX_PMIX_PID", mine, 1);
  joined = 1;
  if (atexit(leave_at_exit) != 0)
    plog(1, "PMIx bootstrap: no atexit slot for PMIx_Finalize");
  return 1;
}

static int bp_spawn(const char *exe, char *const argv[], char *const env[],
                    const char *host) {
  if (!joined)
    return NX_ENOTSUP;
  pmix_app_t app;
  PMIX_APP_CONSTRUCT(&app);
  char cwd[4096];
  app.cmd = strdup(exe);
  app.argv = pmix_argv_copy((char **)argv);
  app.env = pmix_argv_copy((char **)env);
  if (getcwd(cwd, sizeof(cwd)) != NULL)
    app.cwd = strdup(cwd);
  app.maxprocs = 1;
  pmix_info_t *info = NULL;
  size_t ninfo = 0;
  if (host != NULL) {
    PMIX_INFO_CREATE(info, 1);
    if (info != NULL) {
      PMIX_INFO_LOAD(&info[0], PMIX_HOST, host, PMIX_STRING);
      ninfo = 1;
    }
  }
  int r = app.cmd != NULL && app.argv != NULL && app.env != NULL &&
                  (host == NULL || info != NULL)
              ? 0
              : NX_ENOMEM;
  if (r == 0) {
    char nspace[PMIX_MAX_NSLEN + 1];
    pmix_status_t s = PMIx_Spawn(info, ninfo, &app, 1, nspace);
    if (s != PMIX_SUCCESS)
      r = fail("PMIx_Spawn", s);
  }
  PMIX_APP_DESTRUCT(&app);
  if (info != NULL)
    PMIX_INFO_FREE(info, ninfo);
  return r;
}

/* Puts `len` bytes under `key` for every process of the job (PMIX_GLOBAL:
 * the job's store, kept by the launcher's PMIx servers, the user's own
 * daemons; never an environment or a command line). */
static int put(const char *key, const void *bytes, size_t len) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = (char *)bytes;
  v.data.bo.size = len;
  pmix_status_t s = PMIx_Put(PMIX_GLOBAL, key, &v);
  return s == PMIX_SUCCESS ? 0 : fail("PMIx_Put", s);
}

/* Commits what this process put and waits until every process of the job
 * has, collecting everything put. */
static int commit_fence(void) {
  pmix_status_t s = PMIx_Commit();
  if (s != PMIX_SUCCESS)
    return fail("PMIx_Commit", s);
  pmix_info_t info[2];
  bool collect = true;
  int timeout = FENCE_TIMEOUT_S;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout, PMIX_INT);
  s = PMIx_Fence(NULL, 0, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  return s == PMIX_SUCCESS ? 0 : fail("PMIx_Fence", s);
}

/* What process `rank` put under `key`: a malloc'ed copy. */
static int get(uint32_t rank, const char *key, void **bytes, size_t *len) {
  pmix_proc_t p;
  PMIX_LOAD_PROCID(&p, me.nspace, rank);
  pmix_value_t *v = NULL;
  pmix_status_t s = PMIx_Get(&p, key, NULL, 0, &v);
  if (s != PMIX_SUCCESS)
    return fail("PMIx_Get", s);
  int r = 0;
  if (v == NULL || v->type != PMIX_BYTE_OBJECT) {
    plog(0, "PMIx bootstrap: %s of rank %u is not bytes", key, rank);
    r = NX_EPROTO;
  } else {
    size_t n = v->data.bo.size;
    *bytes = malloc(n > 0 ? n : 1);
    if (*bytes == NULL)
      r = NX_ENOMEM;
    else if (n > 0)
      memcpy(*bytes, v->data.bo.bytes, n);
    *len = n;
  }
  if (v != NULL)
    PMIX_VALUE_RELEASE(v);
  return r;
}

static int bp_key(uint8_t *key, size_t len) {
  char name[32];
  snprintf(name, sizeof(name), "nx.key.%u", ++round_no);
  int r = me.rank == 0 ? put(name, key, len) : 0;
  if (r == 0)
    r = commit_fence();
  if (r < 0 || me.rank == 0)
    return r;
  void *k = NULL;
  size_t n = 0;
  r = get(0, name, &k, &n);
  if (r == 0 && n != len) {
    plog(0, "PMIx bootstrap: rank 0's key has %zu bytes", n);
    r = NX_EPROTO;
  }
  if (r == 0)
    memcpy(key, k, len);
  free(k);
  return r;
}

static int bp_gather(const void *mine, size_t len, void **all, size_t **lens,
                     int *count, int *rank) {
  char name[32];
  snprintf(name, sizeof(name), "nx.peer.%u", ++round_no);
  int r = put(name, mine, len);
  if (r == 0)
    r = commit_fence();
  if (r < 0)
    return r;
  size_t *out_lens = calloc(job_size, sizeof(*out_lens));
  void **parts = calloc(job_size, sizeof(*parts));
  uint8_t *out = NULL;
  size_t total = 0;
  r = out_lens != NULL && parts != NULL ? 0 : NX_ENOMEM;
  for (uint32_t k = 0; r == 0 && k < job_size; k++) {
    r = get(k, name, &parts[k], &out_lens[k]);
    total += r == 0 ? out_lens[k] : 0;
  }
  if (r == 0 && (out = malloc(total > 0 ? total : 1)) == NULL)
    r = NX_ENOMEM;
  size_t off = 0;
  for (uint32_t k = 0; r == 0 && k < job_size; k++) {
    memcpy(out + off, parts[k], out_lens[k]);
    off += out_lens[k];
  }
  for (uint32_t k = 0; parts != NULL && k < job_size; k++)
    free(parts[k]);
  free(parts);
  if (r < 0) {
    free(out_lens);
    free(out);
    return r;
  }
  *all = out;
  *lens = out_lens;
  *count = (int)job_size;
  *rank = (int)me.rank;
  return 0;
}

__attribute__((visibility("default")))
const struct nxi_boot_pmix_plugin nxi_boot_pmix_plugin = {
    .version = NXI_BOOT_PMIX_VERSION,
    .set_log = set_log,
    .join = bp_join,
    .key = bp_key,
    .gather = bp_gather,
    .spawn = bp_spawn,
};
