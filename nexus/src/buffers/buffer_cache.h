/* The cache of large payload blocks behind message buffers (bufmem.c): what
 * nx_init and nx_finalize call, and counters for tests. */
#ifndef NXI_BUFFER_CACHE_H
#define NXI_BUFFER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens the cache with the byte cap NX_BUFFER_CACHE gives (default
 * 64 MiB; 0 turns it off). Returns 0, or NX_EINVAL for a malformed
 * value. */
int nxi_buffer_cache_init(void);

/* Frees every cached block and closes the cache: blocks freed from now on
 * until the next nxi_buffer_cache_init go back to malloc. */
void nxi_buffer_cache_finalize(void);

struct nxi_buffer_cache_stats {
  size_t cap;      /* bytes the cache may hold */
  size_t bytes;    /* bytes it holds */
  size_t blocks;   /* blocks it holds */
  uint64_t hits;   /* payload blocks served from the cache since init */
  uint64_t misses; /* cacheable payload blocks it did not have */
};

void nxi_buffer_cache_stats_get(struct nxi_buffer_cache_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* NXI_BUFFER_CACHE_H */
