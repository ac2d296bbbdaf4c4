/* A hash table of endpoints keyed by their peer's 16-byte process uuid,
 * intrusive (the uuid and the link are in struct nx_endpoint, the head of
 * every module's peer struct), for the modules that keep one endpoint per
 * peer process. The caller does the locking. */
#ifndef NXU_UUID_H
#define NXU_UUID_H

#include <stdint.h>

#include "nexus/protocol.h"

#define NXU_UUID_SIZE NX_UUID_SIZE
#define NXU_UUID_BUCKETS 64

struct nxu_uuid_table {
  struct nx_endpoint *bucket[NXU_UUID_BUCKETS];
};

/* The first endpoint for `uuid` after `after` (NULL: the first of all), or
 * NULL. A table may hold several with one uuid (a peer being freed beside
 * its successor). */
struct nx_endpoint *nxu_uuid_find(const struct nxu_uuid_table *t,
                                  const uint8_t *uuid,
                                  const struct nx_endpoint *after);
/* Adds `ep`, whose uuid is set, in front of the others with its uuid. */
void nxu_uuid_insert(struct nxu_uuid_table *t, struct nx_endpoint *ep);
/* Takes `ep` out; nothing if it is not in the table. */
void nxu_uuid_remove(struct nxu_uuid_table *t, struct nx_endpoint *ep);
/* Every endpoint, in no particular order: first, then next until NULL.
 * The table must not change meanwhile, except by removing the endpoint
 * just returned after asking for its next. */
struct nx_endpoint *nxu_uuid_first(const struct nxu_uuid_table *t);
struct nx_endpoint *nxu_uuid_next(const struct nxu_uuid_table *t,
                                  const struct nx_endpoint *ep);

#endif /* NXU_UUID_H */
