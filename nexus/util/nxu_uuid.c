/* The uuid-keyed endpoint table (nxu_uuid.h). */
#include "nxu_uuid.h"

#include <stddef.h>
#include <string.h>

/* Uuids are random: three of their bytes spread them well enough. */
static unsigned bucket_of(const uint8_t *uuid) {
  return (unsigned)(uuid[0] ^ uuid[5] ^ uuid[11]) % NXU_UUID_BUCKETS;
}

struct nx_endpoint *nxu_uuid_find(const struct nxu_uuid_table *t,
                                  const uint8_t *uuid,
                                  const struct nx_endpoint *after) {
  struct nx_endpoint *ep =
      after != NULL ? after->uuid_next : t->bucket[bucket_of(uuid)];
  for (; ep != NULL; ep = ep->uuid_next)
    if (memcmp(ep->uuid, uuid, NXU_UUID_SIZE) == 0)
      return ep;
  return NULL;
}

void nxu_uuid_insert(struct nxu_uuid_table *t, struct nx_endpoint *ep) {
  unsigned b = bucket_of(ep->uuid);
  ep->uuid_next = t->bucket[b];
  t->bucket[b] = ep;
}

void nxu_uuid_remove(struct nxu_uuid_table *t, struct nx_endpoint *ep) {
  struct nx_endpoint **pp = &t->bucket[bucket_of(ep->uuid)];
  while (*pp != NULL && *pp != ep)
    pp = &(*pp)->uuid_next;
  if (*pp != NULL)
    *pp = ep->uuid_next;
}

static struct nx_endpoint *from_bucket(const struct nxu_uuid_table *t,
                                       unsigned b) {
  for (; b < NXU_UUID_BUCKETS; b++)
    if (t->bucket[b] != NULL)
      return t->bucket[b];
  return NULL;
}

struct nx_endpoint *nxu_uuid_first(const struct nxu_uuid_table *t) {
  return from_bucket(t, 0);
}

struct nx_endpoint *nxu_uuid_next(const struct nxu_uuid_table *t,
                                  const struct nx_endpoint *ep) {
  return ep->uuid_next != NULL ? ep->uuid_next
                               : from_bucket(t, bucket_of(ep->uuid) + 1);
}
