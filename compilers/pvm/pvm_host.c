/* The virtual machine's calls with no pvmd: one host, this one, which
 * nexus-pvm needs no daemon to run on. Each call answers as PVM does for
 * a machine of one host where the subject of the call is absent (no other
 * host, no resource manager, no tracer); docs/pvm.md says so per call. */
#include <signal.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "pvm_internal.h"

/* This host's pvmd tid in PVM's numbering (host 1 of the machine), which
 * pvm_config and pvm_tidtohost give. */
#define HOST_TID 0x40000

/* The architecture name nexus-pvm reports and PvmTaskArch accepts. */
#define ARCH_NAME "NEXUS"

static int is_this_host(const char *name) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  if (name == NULL)
    return 0;
  if (name[0] == '\0' || strcmp(name, ".") == 0 ||
      strcmp(name, "localhost") == 0 || strcmp(name, host) == 0)
    return 1;
  /* A short name for this host's full name, or the other way round. */
  size_t n = strlen(name), h = strlen(host);
  return (n < h && strncmp(host, name, n) == 0 && host[n] == '.') ||
         (h < n && strncmp(name, host, h) == 0 && name[h] == '.');
}

int nxpvmi_host_tid(void) { return HOST_TID; }
const char *nxpvmi_arch(void) { return ARCH_NAME; }
int nxpvmi_is_this_host(const char *name) { return is_this_host(name); }

char *pvm_version(void) { return PVM_VER; }

/* PVM's directory for its files: $PVM_TMP, else /tmp. */
char *pvmgettmp(void) {
  char *t = getenv("PVM_TMP");
  return t != NULL && t[0] != '\0' ? t : "/tmp";
}

/* The remote shell PVM would start a pvmd with: $PVM_RSH, else ssh (no
 * pvmd is started here). */
char *pvmgetrsh(void) {
  char *r = getenv("PVM_RSH");
  return r != NULL && r[0] != '\0' ? r : "ssh";
}

/* The text of the last error (PVM's declaration takes no argument). */
char *pvm_strerror(void) { return (char *)nxpvmi_errstr(pvm_errno); }

/* ---- the machine's hosts, as the root task holds them ----
 *
 * A host is a nexus node: host 1 is the root's (this host), any other one
 * a node spec pvm_addhosts was given ("mpi", "mpi:host=a", or a bare host
 * name, which stands for "mpi:host=<name>"). The root keeps the list, the
 * host of each task started on an added host, and the PvmHostAdd and
 * PvmHostDelete notifies; the tasks ask it by RSR ("nxpvm.mbox", host
 * operations), as for mailboxes. */

#define HOST_NAME_LEN 64 /* a node's spec fits nx_node_t's host[64] */
#define HOST_MAX 4095    /* PVM's tids have 12 bits for the host */

struct host {
  int tid;
  char name[HOST_NAME_LEN];
};

struct hnote {
  int tid, kind, tag, ctx, cnt, host;
};

struct hplace {
  int tid, host;
};

/* A notify message to send once the lock is let go. */
struct hfire {
  int tid, tag, ctx, n, v[2];
};

static struct host *hosts;
static int nhosts, hostcap;
static struct hnote *hnotes;
static int nhnotes, hnotecap;
static struct hplace *places;
static int nplaces, placecap;

/* Grows *arr (of *cap elements of `size`) to hold one more than `n`. */
static int grow(void **arr, int *cap, int n, size_t size) {
  if (n < *cap)
    return 0;
  int c = *cap ? 2 * *cap : 8;
  void *a = realloc(*arr, (size_t)c * size);
  if (a == NULL)
    return PvmNoMem;
  *arr = a;
  *cap = c;
  return 0;
}

/* With nxpvm.m held: the list starts with this (the root's) host. */
static int hosts_init(void) {
  if (nhosts > 0)
    return 0;
  if (grow((void **)&hosts, &hostcap, 0, sizeof(*hosts)) < 0)
    return PvmNoMem;
  hosts[0].tid = HOST_TID;
  gethostname(hosts[0].name, sizeof(hosts[0].name) - 1);
  hosts[0].name[sizeof(hosts[0].name) - 1] = '\0';
  nhosts = 1;
  return 0;
}

static int host_find(const char *name) {
  if (is_this_host(name))
    return 0;
  for (int i = 1; i < nhosts; i++)
    if (strcmp(hosts[i].name, name) == 0)
      return i;
  return -1;
}

static int host_find_tid(int tid) {
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].tid == tid)
      return i;
  return -1;
}

/* The smallest free host number (PVM reuses a deleted host's). */
static int host_new_tid(void) {
  for (int n = 2; n <= HOST_MAX; n++)
    if (host_find_tid(n * HOST_TID) < 0)
      return n * HOST_TID;
  return PvmOutOfRes;
}

static int fire_add(struct hfire **f, int *nf, int *fcap, const struct hnote *h,
                    int n, int v0, int v1) {
  if (grow((void **)f, fcap, *nf, sizeof(**f)) < 0)
    return PvmNoMem;
  (*f)[(*nf)++] = (struct hfire){h->tid, h->tag, h->ctx, n, {v0, v1}};
  return 0;
}

/* With nxpvm.m held: the notifies a host's arrival or departure fires. */
static void hosts_fire(int kind, int host, struct hfire **f, int *nf,
                       int *fcap) {
  for (int i = 0; i < nhnotes;) {
    struct hnote *h = &hnotes[i];
    int hit = h->kind == kind && (kind == PvmHostAdd || h->host == host);
    if (hit && kind == PvmHostAdd)
      fire_add(f, nf, fcap, h, 2, 1, host); /* a count, then the tids */
    else if (hit)
      fire_add(f, nf, fcap, h, 1, host, 0);
    if (hit && (kind == PvmHostDelete || (h->cnt > 0 && --h->cnt == 0)))
      hnotes[i] = hnotes[--nhnotes];
    else
      i++;
  }
}

/* A notify request: `in` holds the context, the count and (PvmHostDelete)
 * the host tids. */
static int host_note(int from, int what, int tag, const struct pvmbuf *in,
                     struct hfire **f, int *nf, int *fcap) {
  struct pvmbuf *b = nxpvmi_buf_clone(in);
  int kind = what & ~PvmNotifyCancel, v[2] = {0, 0}, rc = PvmOk;
  if (b == NULL || nxpvmi_unpack_from(b, K_I32, v, 2, 1, sizeof(int)) < 0)
    rc = b == NULL ? PvmNoMem : PvmBadMsg;
  int ctx = v[0], cnt = v[1];
  if (rc == 0 && (what & PvmNotifyCancel)) {
    for (int i = 0; i < nhnotes;)
      if (hnotes[i].tid == from && hnotes[i].kind == kind &&
          hnotes[i].tag == tag)
        hnotes[i] = hnotes[--nhnotes];
      else
        i++;
  } else if (rc == 0 && kind == PvmHostAdd && cnt != 0) {
    rc = grow((void **)&hnotes, &hnotecap, nhnotes, sizeof(*hnotes));
    if (rc == 0)
      hnotes[nhnotes++] = (struct hnote){from, kind, tag, ctx, cnt, 0};
  } else if (rc == 0 && kind == PvmHostDelete) {
    for (int i = 0; rc == 0 && i < cnt; i++) {
      int host = 0;
      rc = nxpvmi_unpack_from(b, K_I32, &host, 1, 1, sizeof(int));
      struct hnote h = {from, kind, tag, ctx, 1, host};
      /* A host that is not in the machine is reported at once. */
      if (rc == 0 && host_find_tid(host) < 0)
        rc = fire_add(f, nf, fcap, &h, 1, host, 0);
      else if (rc == 0 && (rc = grow((void **)&hnotes, &hnotecap, nhnotes,
                                     sizeof(*hnotes))) == 0)
        hnotes[nhnotes++] = h;
    }
  }
  nxpvmi_buf_free(b);
  return rc;
}

/* The list: its length, then per host its tid and its name. */
static int host_list(struct pvmbuf **out) {
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  int rc = b != NULL ? nxpvmi_pack_into(b, K_I32, &nhosts, 1, 1, sizeof(int))
                     : PvmNoMem;
  for (int i = 0; rc == 0 && i < nhosts; i++) {
    rc = nxpvmi_pack_into(b, K_I32, &hosts[i].tid, 1, 1, sizeof(int));
    if (rc == 0)
      rc = nxpvmi_pack_into(b, K_I8, hosts[i].name, HOST_NAME_LEN, 1, 1);
  }
  if (rc < 0) {
    nxpvmi_buf_free(b);
    return rc;
  }
  *out = b;
  return PvmOk;
}

void nxpvmi_on_host(int from, int id, int op, const char *name, int index,
                    int flags, const struct pvmbuf *in) {
  struct pvmbuf *out = NULL;
  struct hfire *f = NULL;
  int nf = 0, fcap = 0, i;
  nx_mutex_lock(&nxpvm.m);
  int rc = hosts_init();
  if (rc == 0 && strlen(name) >= HOST_NAME_LEN)
    rc = PvmBadParam;
  if (rc == 0) {
    switch (op) {
    case M_HADD:
      if (host_find(name) >= 0)
        rc = PvmDupHost;
      else if ((rc = host_new_tid()) > 0 &&
               grow((void **)&hosts, &hostcap, nhosts, sizeof(*hosts)) < 0)
        rc = PvmNoMem;
      if (rc > 0) {
        hosts[nhosts].tid = rc;
        snprintf(hosts[nhosts].name, HOST_NAME_LEN, "%s", name);
        nhosts++;
        hosts_fire(PvmHostAdd, rc, &f, &nf, &fcap);
      }
      break;
    case M_HDEL:
      i = host_find(name);
      /* The root's host is the master, which PVM does not delete. */
      rc = i < 0 ? PvmNoHost : i == 0 ? PvmBadParam : PvmOk;
      if (rc == 0) {
        int tid = hosts[i].tid;
        hosts[i] = hosts[--nhosts];
        for (int k = 0; k < nplaces;)
          if (places[k].host == tid)
            places[k] = places[--nplaces];
          else
            k++;
        hosts_fire(PvmHostDelete, tid, &f, &nf, &fcap);
      }
      break;
    case M_HLIST: rc = host_list(&out); break;
    case M_HNOTE:
      rc = in != NULL ? host_note(from, index, flags, in, &f, &nf, &fcap)
                      : PvmBadMsg;
      break;
    case M_HWHERE:
      rc = HOST_TID;
      for (int k = 0; k < nplaces; k++)
        if (places[k].tid == index)
          rc = places[k].host;
      break;
    case M_HTASK:
      i = host_find(name);
      if (i > 0 && (rc = grow((void **)&places, &placecap, nplaces,
                              sizeof(*places))) == 0)
        places[nplaces++] = (struct hplace){index, hosts[i].tid};
      break;
    default: rc = PvmBadParam;
    }
  }
  nx_mutex_unlock(&nxpvm.m);
  nxpvmi_reply_buf(from, id, rc, out);
  nxpvmi_buf_free(out);
  /* The notify messages come from the root's host, as PVM's come from a
   * pvmd. */
  for (int k = 0; k < nf; k++) {
    struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
    if (b == NULL)
      continue;
    b->ctx = f[k].ctx;
    if (nxpvmi_pack_into(b, K_I32, f[k].v, f[k].n, 1, sizeof(int)) == 0)
      nxpvmi_send_as(HOST_TID, f[k].tid, f[k].tag, b);
    nxpvmi_buf_free(b);
  }
  free(f);
}

/* A task that has ended: its notifies go, and its place. With nxpvm.m
 * held. */
void nxpvmi_hosts_forget(int tid) {
  for (int i = 0; i < nhnotes;)
    if (hnotes[i].tid == tid)
      hnotes[i] = hnotes[--nhnotes];
    else
      i++;
  for (int i = 0; i < nplaces;)
    if (places[i].tid == tid)
      places[i] = places[--nplaces];
    else
      i++;
}

static void hosts_list_free(struct pvmhostinfo *c) {
  if (c != NULL)
    free(c[0].hi_name);
  free(c);
}

static struct pvmhostinfo *config;
static int nconfig;

void nxpvmi_hosts_free(void) {
  hosts_list_free(config);
  config = NULL;
  nconfig = 0;
  free(hosts);
  free(hnotes);
  free(places);
  hosts = NULL;
  hnotes = NULL;
  places = NULL;
  nhosts = hostcap = nhnotes = hnotecap = nplaces = placecap = 0;
}

/* ---- the tasks' side ---- */

/* The nexus node spec a host name stands for: a spec already ("mpi",
 * "mpi:host=a", "local"), else the host through the launcher this task
 * has: "pmix:host=<name>" in a task a PMIx server started (nexus starts
 * processes through it, docs/pmix.md), "mpi:host=<name>" otherwise. A
 * bare name that does not resolve is PvmNoHost, as in PVM. */
int nxpvmi_host_spec(const char *name, char *spec, size_t len) {
  if (name == NULL || name[0] == '\0')
    return PvmBadParam;
  int bare = strchr(name, ':') == NULL && strcmp(name, "mpi") != 0 &&
             strcmp(name, "pmix") != 0 && strcmp(name, "local") != 0 &&
             strcmp(name, "localhost") != 0;
  if (bare) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(name, NULL, &hints, &ai) != 0)
      return PvmNoHost;
    freeaddrinfo(ai);
  }
  const char *boot = nx_bootstrap();
  int pmix = boot != NULL && strcmp(boot, "pmix") == 0;
  int n = bare
              ? snprintf(spec, len, pmix ? "pmix:host=%s" : "mpi:host=%s", name)
              : snprintf(spec, len, "%s", name);
  return n > 0 && (size_t)n < len ? 0 : PvmBadParam;
}

/* Whether nexus can start processes on the node `name` stands for. */
static int host_check(const char *name) {
  char spec[HOST_NAME_LEN];
  nx_node_t node;
  if (strlen(name) >= HOST_NAME_LEN)
    return PvmBadParam;
  int rc = nxpvmi_host_spec(name, spec, sizeof(spec));
  if (rc < 0)
    return rc;
  rc = nx_nodes_acquire(spec, 1, &node);
  if (rc == 0) {
    nx_node_release(&node);
    return PvmOk;
  }
  return rc == NX_EINVAL    ? PvmBadParam
         : rc == NX_ENOTSUP ? PvmCantStart
                            : PvmSysErr;
}

/* The hosts' list from the root, to free with hosts_list_free. */
static int config_get(struct pvmhostinfo **out, int *nout) {
  struct pvmbuf *b = NULL;
  int rc = nxpvmi_mbox_call(M_HLIST, "", 0, 0, NULL, &b);
  int n = 0;
  if (rc == 0 && b == NULL)
    rc = PvmBadMsg;
  if (rc == 0)
    rc = nxpvmi_unpack_from(b, K_I32, &n, 1, 1, sizeof(int));
  if (rc == 0 && (n < 1 || n > HOST_MAX))
    rc = PvmBadMsg;
  struct pvmhostinfo *c = NULL;
  char *names = NULL;
  if (rc == 0 && ((c = calloc((size_t)n, sizeof(*c))) == NULL ||
                  (names = calloc((size_t)n, HOST_NAME_LEN)) == NULL))
    rc = PvmNoMem;
  for (int i = 0; rc == 0 && i < n; i++) {
    char *name = names + (size_t)i * HOST_NAME_LEN;
    rc = nxpvmi_unpack_from(b, K_I32, &c[i].hi_tid, 1, 1, sizeof(int));
    if (rc == 0)
      rc = nxpvmi_unpack_from(b, K_I8, name, HOST_NAME_LEN, 1, 1);
    name[HOST_NAME_LEN - 1] = '\0';
    c[i].hi_name = name;
    c[i].hi_arch = ARCH_NAME;
    c[i].hi_speed = 1000;
    c[i].hi_dsig = 0;
  }
  nxpvmi_buf_free(b);
  if (rc < 0) {
    free(names);
    free(c);
    return rc;
  }
  *out = c;
  *nout = n;
  return PvmOk;
}

/* The machine's hosts: this one (host 1), then those pvm_addhosts added. */
int pvm_config(int *nhost, int *narch, struct pvmhostinfo **hostp) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_config", PvmSysErr);
  struct pvmhostinfo *c;
  int n, rc = config_get(&c, &n);
  if (rc < 0)
    return nxpvmi_err("pvm_config", rc);
  hosts_list_free(config);
  config = c;
  nconfig = n;
  if (nhost != NULL)
    *nhost = nconfig;
  if (narch != NULL)
    *narch = 1;
  if (hostp != NULL)
    *hostp = config;
  return PvmOk;
}

/* A name is added once nexus accepts it as a node it can start processes
 * on; infos[i] is then the new host's tid. Returns how many were added. */
int pvm_addhosts(char **hosts_, int nhost, int *infos) {
  if (nhost < 1 || hosts_ == NULL)
    return nxpvmi_err("pvm_addhosts", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_addhosts", PvmSysErr);
  int added = 0;
  for (int i = 0; i < nhost; i++) {
    int rc = hosts_[i] == NULL         ? PvmBadParam
             : is_this_host(hosts_[i]) ? PvmDupHost
                                       : host_check(hosts_[i]);
    if (rc == 0)
      rc = nxpvmi_mbox_call(M_HADD, hosts_[i], 0, 0, NULL, NULL);
    added += rc > 0;
    if (infos != NULL)
      infos[i] = rc;
  }
  return added;
}

/* Returns how many were deleted; infos[i] is 0 or the error: PvmNoHost
 * for a host not in the machine, PvmBadParam for this one (the master). */
int pvm_delhosts(char **hosts_, int nhost, int *infos) {
  if (nhost < 1 || hosts_ == NULL)
    return nxpvmi_err("pvm_delhosts", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_delhosts", PvmSysErr);
  int deleted = 0;
  for (int i = 0; i < nhost; i++) {
    int rc = hosts_[i] == NULL ? PvmNoHost
             : is_this_host(hosts_[i])
                 ? PvmBadParam
                 : nxpvmi_mbox_call(M_HDEL, hosts_[i], 0, 0, NULL, NULL);
    deleted += rc == 0;
    if (infos != NULL)
      infos[i] = rc;
  }
  return deleted;
}

/* pvm_notify(PvmHostAdd / PvmHostDelete): the root keeps it. */
int nxpvmi_host_notify(int what, int tag, int cnt, const int *tids) {
  int kind = what & ~PvmNotifyCancel;
  if (kind == PvmHostDelete && !(what & PvmNotifyCancel) &&
      (cnt < 0 || (cnt > 0 && tids == NULL)))
    return PvmBadParam;
  struct pvmbuf *b = nxpvmi_buf_new(PvmDataDefault);
  if (b == NULL)
    return PvmNoMem;
  int v[2] = {nxpvm.ctx, cnt};
  int rc = nxpvmi_pack_into(b, K_I32, v, 2, 1, sizeof(int));
  if (rc == 0 && kind == PvmHostDelete && cnt > 0)
    rc = nxpvmi_pack_into(b, K_I32, tids, cnt, 1, sizeof(int));
  if (rc == 0)
    rc = nxpvmi_mbox_call(M_HNOTE, "", what, tag, b, NULL);
  nxpvmi_buf_free(b);
  return rc;
}

/* After a spawn on an added host: the root notes where the task runs. */
void nxpvmi_host_placed(int tid, const char *where) {
  if (where != NULL && !is_this_host(where))
    nxpvmi_mbox_call(M_HTASK, where, tid, 0, NULL, NULL);
}

/* Ends every task this one knows of (SIGTERM, as pvm_kill), then this one,
 * as PVM's halt kills every task, the caller included. */
int pvm_halt(void) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_halt", PvmSysErr);
  nx_mutex_lock(&nxpvm.m);
  int n = 0;
  int *tids = malloc((size_t)nxpvm.npeers * sizeof(int) + 1);
  for (int i = 0; tids != NULL && i < nxpvm.npeers; i++)
    if (!nxpvm.peers[i].dead && nxpvm.peers[i].tid != nxpvm.mytid)
      tids[n++] = nxpvm.peers[i].tid;
  nx_mutex_unlock(&nxpvm.m);
  int autoerr = pvm_setopt(PvmAutoErr, 0);
  for (int i = 0; i < n; i++)
    pvm_kill(tids[i]);
  pvm_setopt(PvmAutoErr, autoerr);
  free(tids);
  fflush(NULL);
  raise(SIGTERM);
  return PvmOk;
}

/* The host a task runs on: the one it was spawned on with PvmTaskHost, or
 * this one. */
int pvm_tidtohost(int tid) {
  if (tid <= 0)
    return nxpvmi_err("pvm_tidtohost", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_tidtohost", PvmSysErr);
  if (tid == HOST_TID)
    return tid;
  struct pvmhostinfo *c = NULL;
  int n = 0, found = 0, rc = config_get(&c, &n);
  for (int i = 1; rc == 0 && i < n; i++)
    found |= c[i].hi_tid == tid;
  hosts_list_free(c);
  if (found)
    return tid; /* a host is on itself */
  if (tid != nxpvm.mytid && pvm_pstat(tid) < 0)
    return nxpvmi_err("pvm_tidtohost", PvmBadParam);
  rc = nxpvmi_mbox_call(M_HWHERE, "", tid, 0, NULL, NULL);
  return rc < 0 ? nxpvmi_err("pvm_tidtohost", rc) : rc;
}

/* In the machine or not. */
int pvm_mstat(char *host) {
  if (host == NULL)
    return nxpvmi_err("pvm_mstat", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_mstat", PvmSysErr);
  if (is_this_host(host))
    return PvmOk;
  struct pvmhostinfo *c = NULL;
  int n = 0, found = 0, rc = config_get(&c, &n);
  if (rc < 0)
    return nxpvmi_err("pvm_mstat", rc);
  for (int i = 1; i < n; i++)
    found |= strcmp(c[i].hi_name, host) == 0;
  hosts_list_free(c);
  return found ? PvmOk : PvmNoHost;
}

/* This host's clock; the difference to itself is 0. */
int pvm_hostsync(int host, struct timeval *clk, struct timeval *delta) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_hostsync", PvmSysErr);
  if (host != HOST_TID)
    return nxpvmi_err("pvm_hostsync", PvmNoHost);
  struct timeval now;
  gettimeofday(&now, NULL);
  if (clk != NULL)
    *clk = now;
  if (delta != NULL)
    *delta = (struct timeval){0, 0};
  return PvmOk;
}

/* The data signature of an architecture: this build's (0, as pvm_config's
 * hi_dsig), or PvmNotFound for a name it does not know. */
int pvm_archcode(char *arch) {
  if (arch == NULL)
    return nxpvmi_err("pvm_archcode", PvmBadParam);
  return strcmp(arch, ARCH_NAME) == 0 ? 0 : PvmNotFound;
}

/* The "daemon" is the runtime, which the first PVM call starts: it is
 * running after this call, which answers as PVM does when a pvmd runs
 * already. */
int pvm_start_pvmd(int argc, char **argv, int block) {
  (void)argc;
  (void)argv;
  (void)block;
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_start_pvmd", PvmCantStart);
  return PvmDupHost;
}

/* Resource managers, hosters, taskers and tracers: a task may register as
 * one, as with PVM when none is registered; nexus starts tasks and hosts
 * itself, so no request ever comes to it. */
int pvm_reg_rm(struct pvmhostinfo **hip) {
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_reg_rm", PvmSysErr);
  int nhost, narch;
  struct pvmhostinfo *h = NULL;
  int rc = pvm_config(&nhost, &narch, &h);
  if (rc < 0)
    return rc; /* said by pvm_config */
  if (hip != NULL)
    *hip = h;
  return PvmOk;
}

int pvm_reg_hoster(void) {
  return nxpvmi_started() ? PvmOk : nxpvmi_err("pvm_reg_hoster", PvmSysErr);
}

int pvm_reg_tasker(void) {
  return nxpvmi_started() ? PvmOk : nxpvmi_err("pvm_reg_tasker", PvmSysErr);
}

int pvm_reg_tracer(int tctx, int ttag, int octx, int otag, char *tmask,
                   int tbuf, int topt) {
  (void)tctx;
  (void)ttag;
  (void)octx;
  (void)otag;
  (void)tmask;
  (void)tbuf;
  (void)topt;
  return nxpvmi_started() ? PvmOk : nxpvmi_err("pvm_reg_tracer", PvmSysErr);
}

/* pvm_tickle asks a pvmd for its internal state: there is none here, so
 * it answers with no results. */
int pvm_tickle(int nargs, int *args, int *nres, int *results) {
  (void)results;
  if (nargs < 1 || args == NULL)
    return nxpvmi_err("pvm_tickle", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_tickle", PvmSysErr);
  if (nres != NULL)
    *nres = 0;
  return PvmOk;
}

/* PVM_EXPORT, a colon-separated list of names. */
static int export_edit(const char *name, int add) {
  if (name == NULL || name[0] == '\0')
    return PvmOk;
  const char *cur = getenv("PVM_EXPORT");
  size_t n = strlen(name), len = cur != NULL ? strlen(cur) : 0;
  char *out = malloc(len + n + 2);
  if (out == NULL)
    return PvmNoMem;
  out[0] = '\0';
  int found = 0;
  for (const char *p = cur; p != NULL && *p != '\0';) {
    const char *e = strchr(p, ':');
    size_t k = e != NULL ? (size_t)(e - p) : strlen(p);
    int same = k == n && strncmp(p, name, n) == 0;
    found |= same;
    if (k > 0 && !(same && !add)) {
      if (out[0] != '\0')
        strcat(out, ":");
      strncat(out, p, k);
    }
    p = e != NULL ? e + 1 : p + k;
  }
  if (add && !found) {
    if (out[0] != '\0')
      strcat(out, ":");
    strcat(out, name);
  }
  int rc = setenv("PVM_EXPORT", out, 1) == 0 ? PvmOk : PvmNoMem;
  free(out);
  return rc;
}

int pvm_export(char *name) {
  int rc = export_edit(name, 1);
  return rc < 0 ? nxpvmi_err("pvm_export", rc) : PvmOk;
}

int pvm_unexport(char *name) {
  int rc = export_edit(name, 0);
  return rc < 0 ? nxpvmi_err("pvm_unexport", rc) : PvmOk;
}
