/* The PMIx bootstrap when nexus is built without PMIx (-Dpmix=disabled, or
 * no libpmix found): no process ever runs under a PMIx server. */
#include "processes/boot.h"
#include "base/rt.h"

int nxi_pmix_join(void) { return 0; }

int nxi_pmix_key(uint8_t *key, size_t len) {
  (void)key;
  (void)len;
  return NX_ENOTSUP;
}

int nxi_pmix_gather(const void *mine, size_t len, void **all, size_t **lens,
                    int *count, int *rank) {
  (void)mine;
  (void)len;
  (void)all;
  (void)lens;
  (void)count;
  (void)rank;
  return NX_ENOENT;
}

void nxi_pmix_leave(void) {}

int nxi_pmix_spawn(const char *exe, char *const argv[], char *const env[],
                   const char *host) {
  (void)exe;
  (void)argv;
  (void)env;
  (void)host;
  return NX_ENOTSUP;
}
