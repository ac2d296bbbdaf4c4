/* The virtual machine's calls with no pvmd: one host, this one, which
 * nexus-pvm needs no daemon to run on. Each call answers as PVM does for
 * a machine of one host where the subject of the call is absent (no other
 * host, no resource manager, no tracer); docs/pvm.md says so per call. */
#include <signal.h>
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
char *pvm_strerror(void) { return (char *)nxpvmi_errstr(nxpvm.last_err); }

/* This host is in the machine already (PvmDupHost); no other can join:
 * there is no pvmd to start there (PvmCantStart). */
int pvm_addhosts(char **hosts, int nhost, int *infos) {
  if (nhost < 1 || hosts == NULL)
    return nxpvmi_err("pvm_addhosts", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_addhosts", PvmSysErr);
  for (int i = 0; i < nhost; i++)
    if (infos != NULL)
      infos[i] = hosts[i] == NULL         ? PvmBadParam
                 : is_this_host(hosts[i]) ? PvmDupHost
                                          : PvmCantStart;
  return 0;
}

/* No host but this one, which PVM does not let a program delete (it is
 * the master): PvmBadParam for it, PvmNoHost for any other. */
int pvm_delhosts(char **hosts, int nhost, int *infos) {
  if (nhost < 1 || hosts == NULL)
    return nxpvmi_err("pvm_delhosts", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_delhosts", PvmSysErr);
  for (int i = 0; i < nhost; i++)
    if (infos != NULL)
      infos[i] =
          hosts[i] != NULL && is_this_host(hosts[i]) ? PvmBadParam : PvmNoHost;
  return 0;
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

/* Every task is on this host. */
int pvm_tidtohost(int tid) {
  if (tid <= 0)
    return nxpvmi_err("pvm_tidtohost", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_tidtohost", PvmSysErr);
  if (tid == HOST_TID || tid == nxpvm.mytid)
    return HOST_TID;
  int rc = pvm_pstat(tid);
  return rc < 0 ? nxpvmi_err("pvm_tidtohost", PvmBadParam) : HOST_TID;
}

int pvm_mstat(char *host) {
  if (host == NULL)
    return nxpvmi_err("pvm_mstat", PvmBadParam);
  if (!nxpvmi_started())
    return nxpvmi_err("pvm_mstat", PvmSysErr);
  return is_this_host(host) ? PvmOk : PvmNoHost;
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
  struct pvmhostinfo *h;
  pvm_config(&nhost, &narch, &h);
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
