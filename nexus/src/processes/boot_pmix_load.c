/* The PMIx bootstrap's side in libnexus when nexus is built with PMIx: the
 * checks of the process's variables, then the plugin (boot_pmix.h) loaded
 * for the processes that join a PMIx server, and only for them. */
#include <dlfcn.h>
#include <link.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "processes/boot.h"
#include "processes/boot_pmix.h"
#include "nxu_opt.h"
#include "base/rt.h"

/* Loaded once and never unloaded (RTLD_NODELETE): PMIx stays initialized
 * until the process exits, by an atexit handler in the plugin. */
static const struct nxi_boot_pmix_plugin *plugin;
static int joined;

static void plugin_log(int level, const char *msg) {
  nxi_log(level, NULL, "%s", msg);
}

static int is_pmix(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  (void)arg;
  return info->dlpi_name != NULL && strstr(info->dlpi_name, "/libpmix.so");
}

/* Whether PMIx is in this process already (the program's, or its MPI's):
 * a look at the loaded objects' names, no file opened. */
static int pmix_in_process(void) { return dl_iterate_phdr(is_pmix, NULL); }

/* Opens `path` if it is there; a plugin that is there but does not load,
 * or comes from another build, is said why and skipped. */
static const struct nxi_boot_pmix_plugin *try_open(const char *path) {
  if (access(path, F_OK) != 0)
    return NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == NULL) {
    nxi_log(0, NULL, "PMIx bootstrap: %s does not load: %s", path, dlerror());
    return NULL;
  }
  const struct nxi_boot_pmix_plugin *p = dlsym(h, NXI_BOOT_PMIX_SYMBOL);
  if (p == NULL || p->version != NXI_BOOT_PMIX_VERSION) {
    nxi_log(0, NULL, "PMIx bootstrap: %s is of another nexus build", path);
    dlclose(h);
    return NULL;
  }
  p->set_log(plugin_log);
  return p;
}

/* Where the modules are looked for (module.c): next to this library
 * (<libdir>/nexus when installed; the build tree builds it beside
 * libnexus), then the install's module directory. */
static const struct nxi_boot_pmix_plugin *load(void) {
  const struct nxi_boot_pmix_plugin *p = NULL;
  char path[1200];
  Dl_info info;
  if (dladdr((void *)&nxi_pmix_join, &info) != 0 && info.dli_fname != NULL) {
    char *copy = strdup(info.dli_fname);
    if (copy != NULL) {
      const char *dir = dirname(copy);
      snprintf(path, sizeof(path), "%s/nexus/%s", dir, NXI_BOOT_PMIX_FILE);
      p = try_open(path);
      if (p == NULL) {
        snprintf(path, sizeof(path), "%s/%s", dir, NXI_BOOT_PMIX_FILE);
        p = try_open(path);
      }
      free(copy);
    }
  }
  if (p == NULL)
    p = try_open(NX_MODULE_DIR "/" NXI_BOOT_PMIX_FILE);
  if (p == NULL)
    nxi_log(0, NULL,
            "PMIx bootstrap: no usable %s next to libnexus or in %s; "
            "starting without a job",
            NXI_BOOT_PMIX_FILE, NX_MODULE_DIR);
  return p;
}

int nxi_pmix_join(void) {
  if (joined)
    return 1; /* a later nx_init of this process */
  /* NX_PMIX=off: a job whose other processes are no nexus programs, which
   * would never join the exchanges (nx_init checked the value). */
  int off = 0;
  char why[128];
  if (nxu_opt_choice("NX_PMIX", &off, why, sizeof(why)) == 0 && off == 1)
    return 0;
  /* A plain process pays two getenv and a look at what is loaded: PMIx
   * is joined only where a PMIx server left its variables (as PMIx
   * clients detect one), or where the program (or MPI) already
   * initialized PMIx. */
  const char *ns = getenv("PMIX_NAMESPACE");
  const char *rank = getenv("PMIX_RANK");
  int under = ns != NULL && ns[0] != '\0' && rank != NULL && rank[0] != '\0';
  if (!under && !pmix_in_process())
    return 0;
  /* A process that one of the job's processes started (system, fork and
   * exec) inherits the server's variables but is none of them: a process
   * that joined marks itself with NX_PMIX_PID, as the mpi module's ranks
   * do with NX_MPI_PID. */
  const char *pid = getenv("NX_PMIX_PID");
  if (pid != NULL && pid[0] != '\0' && strtol(pid, NULL, 10) != (long)getpid())
    return 0;
  if (plugin == NULL && (plugin = load()) == NULL)
    return 0;
  int r = plugin->join(under);
  joined = r == 1;
  return r;
}

int nxi_pmix_key(uint8_t *key, size_t len) {
  return joined ? plugin->key(key, len) : NX_ENOTSUP;
}

int nxi_pmix_gather(const void *mine, size_t len, void **all, size_t **lens,
                    int *count, int *rank) {
  return joined ? plugin->gather(mine, len, all, lens, count, rank) : NX_ENOENT;
}

void nxi_pmix_leave(void) {
  /* Nothing until the process exits (the plugin's atexit handler). */
}

int nxi_pmix_spawn(const char *exe, char *const argv[], char *const env[],
                   const char *host) {
  return joined ? plugin->spawn(exe, argv, env, host) : NX_ENOTSUP;
}
