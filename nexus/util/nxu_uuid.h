/* A hash table of peers keyed by their 16-byte process uuid, intrusive (a peer
 * struct embeds a link), for the modules that keep one entry per peer process.
 * The caller does the locking. */
#ifndef NXU_UUID_H
#define NXU_UUID_H

#include <stdint.h>

#define NXU_UUID_SIZE 16
#define NXU_UUID_BUCKETS 64

/* Embedded in the peer struct; `uuid` is the key. */
struct nxu_uuid_link {
  struct nxu_uuid_link *next;
  uint8_t uuid[NXU_UUID_SIZE];
};

struct nxu_uuid_table {
  struct nxu_uuid_link *bucket[NXU_UUID_BUCKETS];
};

/* The first entry for `uuid` after `after` (NULL: the first of all), or
 * NULL. A table may hold several entries with one uuid (a peer being freed
 * beside its successor). */
struct nxu_uuid_link *nxu_uuid_find(const struct nxu_uuid_table *t,
                                    const uint8_t *uuid,
                                    const struct nxu_uuid_link *after);
/* Adds `l`, whose uuid is set, in front of the others with its uuid. */
void nxu_uuid_insert(struct nxu_uuid_table *t, struct nxu_uuid_link *l);
/* Takes `l` out; nothing if it is not in the table. */
void nxu_uuid_remove(struct nxu_uuid_table *t, struct nxu_uuid_link *l);
/* Every entry, in no particular order: first, then next until NULL. The
 * table must not change meanwhile, except by removing the entry just
 * returned after asking for its next. */
struct nxu_uuid_link *nxu_uuid_first(const struct nxu_uuid_table *t);
struct nxu_uuid_link *nxu_uuid_next(const struct nxu_uuid_table *t,
                                    const struct nxu_uuid_link *l);

#endif /* NXU_UUID_H */
