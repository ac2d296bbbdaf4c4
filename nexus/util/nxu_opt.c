/* The NX_* variables (nxu_opt.h): one table, read by the core at nx_init, by
 * the modules at their init and printed by nxinfo --config. */
#include "nxu_opt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nexus/errors.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define NO_MAX UINT64_MAX

/* Every variable nexus reads, the modules' too, so that nxinfo --config
 * lists them all. The core's are checked at nx_init (a malformed one fails
 * it); a module checks its own at its init (a malformed one skips the
 * module, with the reason on stderr and in nxinfo). */
const struct nxu_opt nxu_opts[] = {
    {"NX_PROTOCOLS", NXU_OPT_TEXT, "(every module found but ofi)", 0, 0, 0,
     NULL, "core",
     "comma-separated module names to load, in order of preference"},
    {"NX_PROTO_PATH", NXU_OPT_TEXT, "(none)", 0, 0, 0, NULL, "core",
     "colon-separated folders searched for modules before the default ones"},
    {"NX_PROGRESS", NXU_OPT_CHOICE, "thread", 0, 0, 0, "thread|poll", "core",
     "thread: a progress thread drives the modules; poll: the program calls "
     "nx_poll()"},
    {"NX_FINALIZE_MS", NXU_OPT_UINT, "60000", 60000, 0, 86400000, NULL, "core",
     "milliseconds nx_finalize waits for the RSRs this process sent to be "
     "handled before it reports the rest lost (NX_ETIMEDOUT)"},
    {"NX_GATEWAY", NXU_OPT_CHOICE, "0", 0, 0, 0, "0|1", "core",
     "1: this process forwards RSRs for the processes that join it "
     "(nx_gateway_enable)"},
    {"NX_SPIN_US", NXU_OPT_UINT, "50", 50, 0, 1000000, NULL, "core",
     "microseconds idle threads busy-poll before yielding"},
    {"NX_THREADED", NXU_OPT_CHOICE, "lazy", 0, 0, 0, "lazy|thread", "core",
     "lazy: threaded handlers start on the thread that receives the RSR, on "
     "a stack of their own, and park when they wait; thread: they run on "
     "runtime threads (lazy needs libboost-context at build time)"},
    {"NX_HANDLER_STACK", NXU_OPT_SIZE, "1m", MIB, 64 * KIB, 1024 * MIB, NULL,
     "core", "stack size of a lazy threaded handler (NX_THREADED=lazy)"},
    {"NX_TRACE", NXU_OPT_TEXT, "(off)", 0, 0, 0, NULL, "core",
     "a folder: each process writes an event log there for nxtrace "
     "(docs/tracing.md)"},
    {"NX_DEBUG", NXU_OPT_UINT, "0", 0, 0, 9, NULL, "core",
     "1 or more: log module decisions to stderr (2: more detail)"},
    {"NX_BUFFER_CACHE", NXU_OPT_SIZE, "64m", 64 * MIB, 0, NO_MAX, NULL, "core",
     "bytes of freed large payload blocks kept for reuse (0: off)"},
    {"NX_FRAME_MAX", NXU_OPT_SIZE, "(physical memory)", 0, 0, NO_MAX, NULL,
     "core",
     "largest payload a peer may announce in one frame; it is allocated "
     "when the header arrives (0: this machine's physical memory)"},
    {"NX_KEY", NXU_OPT_HEX, "(random)", 0, 0, 16, NULL, "core",
     "the computation's key, 32 hex digits; set by nxrun and "
     "nx_context_create"},
    {"NX_HOST_ID", NXU_OPT_TEXT, "(/etc/machine-id)", 0, 0, 0, NULL, "core",
     "this host's identity, for hosts that share /etc/machine-id"},
    {"NX_CREATE_TIMEOUT", NXU_OPT_UINT, "30", 30, 1, 86399, NULL, "core",
     "seconds nx_context_create waits for the new context"},
    {"NX_ATTACH_LISTEN", NXU_OPT_TEXT, "127.0.0.1", 0, 0, 0, NULL, "core",
     "address[:port] nx_attach_listen listens on"},
    {"NX_PROC_ID", NXU_OPT_UINT, "(random)", 0, 1, 0xffffffffu, NULL, "core",
     "this process's id, the high 32 bits of its context ids; read at the "
     "process's first nx_init only and not passed on to the process "
     "contexts it creates; must be unique in the computation (nexus-pvm "
     "sets it: its tids)"},
    {"NX_CTL_FD", NXU_OPT_UINT, "(set by the launcher)", 0, 0, 1u << 30, NULL,
     "core", "a process context's control channel to its creator"},
    {"NX_RANK", NXU_OPT_UINT, "(set by nxrun)", 0, 0, 1u << 30, NULL, "nxrun",
     "this process's rank in an nxrun job (for the program; nexus uses "
     "nx_context_peers)"},
    {"NX_PMIX", NXU_OPT_CHOICE, "auto", 0, 0, 0, "auto|off", "core",
     "off: nx_init does not join a PMIx server (docs/pmix.md)"},
    {"NX_PMIX_PID", NXU_OPT_UINT, "(set by nx_init)", 0, 0, NO_MAX, NULL,
     "core",
     "the pid of a process of a PMIx job, so its children know they are "
     "none"},
    {"NX_SIZE", NXU_OPT_UINT, "(set by nxrun)", 0, 1, 1u << 30, NULL, "nxrun",
     "the number of processes of an nxrun job"},
    {"NX_TCP_LISTEN", NXU_OPT_TEXT, "127.0.0.1,::1", 0, 0, 0, NULL, "tcp",
     "addresses or interfaces the tcp module listens on (docs/tcp.md)"},
    {"NX_TCP_QUEUE_MAX", NXU_OPT_SIZE, "64m", 64 * MIB, 1, NO_MAX, NULL, "tcp",
     "bytes queued to one peer before sends wait"},
    {"NX_TCP_HANDSHAKE_MS", NXU_OPT_UINT, "5000", 5000, 1, 3600000, NULL, "tcp",
     "milliseconds a connection may take to present its key"},
    {"NX_UCX_QUEUE_MAX", NXU_OPT_SIZE, "64m", 64 * MIB, 1, NO_MAX, NULL, "ucx",
     "bytes queued to one peer before sends wait"},
    {"NX_UCX_QUEUE_FRAMES", NXU_OPT_UINT, "32", 32, 1, 1u << 30, NULL, "ucx",
     "frames queued to one peer (UCX could not send them at once) before "
     "sends wait; the runtime's own messages and handlers' sends may pass"},
    {"NX_UCX_REMOTE", NXU_OPT_CHOICE, "0", 0, 0, 0, "0|1", "ucx",
     "1: reach other hosts too (default 1 when UCX_NET_DEVICES is set)"},
    {"NX_OFI_QUEUE_MAX", NXU_OPT_SIZE, "64m", 64 * MIB, 1, NO_MAX, NULL, "ofi",
     "bytes queued to one peer before sends wait"},
    {"NX_OFI_QUEUE_FRAMES", NXU_OPT_UINT, "32", 32, 1, 1u << 30, NULL, "ofi",
     "frames queued to one peer (not sent at once) before sends wait; the "
     "runtime's own messages and handlers' sends may pass"},
    {"NX_OFI_EAGER_MAX", NXU_OPT_SIZE, "8k", 8 * KIB, 0, MIB, NULL, "ofi",
     "largest frame sent in one message"},
    {"NX_OFI_FRAG_MAX", NXU_OPT_SIZE, "4m", 4 * MIB, 4096, 4 * MIB, NULL, "ofi",
     "largest fragment of a large frame"},
    {"NX_OFI_THREADING", NXU_OPT_CHOICE, "safe", 0, 0, 0, "safe|domain", "ofi",
     "libfabric threading level asked for"},
    {"NX_MPI_QUEUE_MAX", NXU_OPT_SIZE, "64m", 64 * MIB, 1, NO_MAX, NULL, "mpi",
     "bytes queued to one peer before sends wait"},
    {"NX_MPI_INLINE", NXU_OPT_SIZE, "8k", 8 * KIB, 0, 16 * KIB, NULL, "mpi",
     "largest frame sent in one message"},
    {"NX_MPI_WATCH_US", NXU_OPT_UINT, "1000", 1000, 0, 1000000, NULL, "mpi",
     "microseconds between checks for ranks that died"},
    {"NX_MPI_THREAD", NXU_OPT_CHOICE, "multiple", 0, 0, 0,
     "multiple|serialized", "mpi", "MPI thread level asked for"},
    {"NX_MPI_PID", NXU_OPT_UINT, "(set by the module)", 0, 0, NO_MAX, NULL,
     "mpi", "a rank's pid, so its children know they are no rank"},
};

const size_t nxu_opt_count = sizeof(nxu_opts) / sizeof(nxu_opts[0]);

const struct nxu_opt *nxu_opt_find(const char *name) {
  for (size_t i = 0; i < nxu_opt_count; i++)
    if (strcmp(nxu_opts[i].name, name) == 0)
      return &nxu_opts[i];
  return NULL;
}

/* Parses a number, with a k/m/g suffix when `suffixes`; 0 or NX_EINVAL. */
static int parse_number(const char *s, int suffixes, uint64_t *out) {
  if (s[0] < '0' || s[0] > '9')
    return NX_EINVAL;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  if (suffixes && (*end == 'k' || *end == 'K'))
    shift = 10, end++;
  else if (suffixes && (*end == 'm' || *end == 'M'))
    shift = 20, end++;
  else if (suffixes && (*end == 'g' || *end == 'G'))
    shift = 30, end++;
  if (errno != 0 || *end != '\0' || v > (UINT64_MAX >> shift))
    return NX_EINVAL;
  *out = (uint64_t)v << shift;
  return 0;
}

/* The index of `value` among the '|'-separated words, or -1. */
static int choice_index(const char *choices, const char *value) {
  size_t len = strlen(value);
  int i = 0;
  for (const char *p = choices; *p != '\0'; i++) {
    size_t w = strcspn(p, "|");
    if (w == len && strncmp(p, value, len) == 0)
      return i;
    p += w;
    if (*p == '|')
      p++;
  }
  return -1;
}

static int check_value(const struct nxu_opt *o, const char *v, uint64_t *num,
                       int *choice, char *why, size_t why_len) {
  switch (o->kind) {
  case NXU_OPT_SIZE:
  case NXU_OPT_UINT:
    if (parse_number(v, o->kind == NXU_OPT_SIZE, num) == 0 && *num >= o->min &&
        *num <= o->max)
      return 0;
    if (o->max == NO_MAX)
      snprintf(why, why_len, "%s=%s: expected a number >= %llu%s", o->name, v,
               (unsigned long long)o->min,
               o->kind == NXU_OPT_SIZE ? " (suffix k, m, g)" : "");
    else
      snprintf(why, why_len, "%s=%s: expected a number from %llu to %llu%s",
               o->name, v, (unsigned long long)o->min,
               (unsigned long long)o->max,
               o->kind == NXU_OPT_SIZE ? " (suffix k, m, g)" : "");
    return NX_EINVAL;
  case NXU_OPT_CHOICE:
    *choice = choice_index(o->choices, v);
    if (*choice >= 0)
      return 0;
    snprintf(why, why_len, "%s=%s: expected one of %s", o->name, v, o->choices);
    return NX_EINVAL;
  case NXU_OPT_HEX: {
    size_t n = strlen(v);
    int ok = n == 2 * o->max;
    for (size_t i = 0; ok && i < n; i++)
      ok = (v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f') ||
           (v[i] >= 'A' && v[i] <= 'F');
    if (ok)
      return 0;
    snprintf(why, why_len, "%s: expected %llu hex digits", o->name,
             (unsigned long long)(2 * o->max));
    return NX_EINVAL;
  }
  case NXU_OPT_TEXT: return 0;
  }
  return NX_EINVAL;
}

int nxu_opt_check(const struct nxu_opt *o, const char *value, char *why,
                  size_t why_len) {
  uint64_t num;
  int choice;
  return check_value(o, value, &num, &choice, why, why_len);
}

int nxu_opt_check_all(const char *who, char *why, size_t why_len) {
  for (size_t i = 0; i < nxu_opt_count; i++) {
    if (who != NULL && strcmp(nxu_opts[i].who, who) != 0)
      continue;
    const char *v = getenv(nxu_opts[i].name);
    if (v == NULL || v[0] == '\0')
      continue;
    int r = nxu_opt_check(&nxu_opts[i], v, why, why_len);
    if (r < 0)
      return r;
  }
  return 0;
}

static const struct nxu_opt *lookup(const char *name, enum nxu_opt_kind kind,
                                    char *why, size_t why_len) {
  const struct nxu_opt *o = nxu_opt_find(name);
  int ok = o != NULL && (o->kind == kind ||
                         (kind == NXU_OPT_UINT && o->kind == NXU_OPT_SIZE));
  if (!ok)
    snprintf(why, why_len, "%s: not a setting of this kind in nexus's table",
             name);
  return ok ? o : NULL;
}

/* Reads variable `name` of `kind`: 1 and *v when it is set and well
 * formed, 0 when unset or empty, NX_EINVAL otherwise. */
static int read_opt(const char *name, enum nxu_opt_kind kind,
                    const struct nxu_opt **o, uint64_t *num, int *choice,
                    char *why, size_t why_len) {
  *o = lookup(name, kind, why, why_len);
  if (*o == NULL)
    return NX_EINVAL;
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0')
    return 0;
  int r = check_value(*o, v, num, choice, why, why_len);
  return r < 0 ? r : 1;
}

int nxu_opt_number(const char *name, uint64_t *out, char *why, size_t why_len) {
  const struct nxu_opt *o;
  uint64_t num;
  int choice;
  int r = read_opt(name, NXU_OPT_UINT, &o, &num, &choice, why, why_len);
  if (r >= 0)
    *out = r == 1 ? num : o->def_value;
  return r < 0 ? r : 0;
}

int nxu_opt_size(const char *name, size_t *out, char *why, size_t why_len) {
  uint64_t v;
  int r = nxu_opt_number(name, &v, why, why_len);
  if (r == 0)
    *out = v > SIZE_MAX ? SIZE_MAX : (size_t)v;
  return r;
}

int nxu_opt_choice(const char *name, int *out, char *why, size_t why_len) {
  const struct nxu_opt *o;
  uint64_t num;
  int choice;
  int r = read_opt(name, NXU_OPT_CHOICE, &o, &num, &choice, why, why_len);
  if (r >= 0)
    *out = r == 1 ? choice : 0;
  return r < 0 ? r : 0;
}
