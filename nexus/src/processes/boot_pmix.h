/* The PMIx bootstrap as a plugin of its own, libnx_boot_pmix.so (built from
 * boot_pmix.c when PMIx is found). libnexus loads it (boot_pmix_load.c)
 * only in a process that runs under a PMIx server, or that has PMIx in it
 * already: a process started by hand then loads neither libpmix nor what
 * libpmix pulls in (libevent, hwloc, munge, udev), 1.5-2 ms of every
 * process's start (docs/performance.md). The plugin links libpmix alone,
 * not libnexus, and reaches the core only through the `log` it is given.
 * docs/pmix.md, "Building". */
#ifndef NXI_BOOT_PMIX_H
#define NXI_BOOT_PMIX_H

#include <stddef.h>
#include <stdint.h>

#define NXI_BOOT_PMIX_FILE "libnx_boot_pmix.so"
#define NXI_BOOT_PMIX_SYMBOL "nxi_boot_pmix_plugin"
/* Bumped when the table changes: a plugin of another build is refused. */
#define NXI_BOOT_PMIX_VERSION 1

/* What the plugin exports under NXI_BOOT_PMIX_SYMBOL. The calls are
 * boot.h's nxi_pmix_* (same results), except join: `under` says whether
 * the server's variables are set (else the plugin joins only where PMIx
 * is initialized already); the loader has made the other checks. */
struct nxi_boot_pmix_plugin {
  int version; /* NXI_BOOT_PMIX_VERSION */
  /* Where the plugin's messages go, at nxi_log's levels. */
  void (*set_log)(void (*log)(int level, const char *msg));
  int (*join)(int under);
  int (*key)(uint8_t *key, size_t len);
  int (*gather)(const void *mine, size_t len, void **all, size_t **lens,
                int *count, int *rank);
  int (*spawn)(const char *exe, char *const argv[], char *const env[],
               const char *host);
};

#endif /* NXI_BOOT_PMIX_H */
