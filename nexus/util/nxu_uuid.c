/* The uuid-keyed peer table (nxu_uuid.h). */
#include "nxu_uuid.h"

#include <stddef.h>
#include <string.h>

/* Uuids are random: three of their bytes spread them well enough. */
static unsigned bucket_of(const uint8_t *uuid) {
  return (unsigned)(uuid[0] ^ uuid[5] ^ uuid[11]) % NXU_UUID_BUCKETS;
}

struct nxu_uuid_link *nxu_uuid_find(const struct nxu_uuid_table *t,
                                    const uint8_t *uuid,
                                    const struct nxu_uuid_link *after) {
  struct nxu_uuid_link *l =
      after != NULL ? after->next : t->bucket[bucket_of(uuid)];
  for (; l != NULL; l = l->next)
    if (memcmp(l->uuid, uuid, NXU_UUID_SIZE) == 0)
      return l;
  return NULL;
}

void nxu_uuid_insert(struct nxu_uuid_table *t, struct nxu_uuid_link *l) {
  unsigned b = bucket_of(l->uuid);
  l->next = t->bucket[b];
  t->bucket[b] = l;
}

void nxu_uuid_remove(struct nxu_uuid_table *t, struct nxu_uuid_link *l) {
  struct nxu_uuid_link **pp = &t->bucket[bucket_of(l->uuid)];
  while (*pp != NULL && *pp != l)
    pp = &(*pp)->next;
  if (*pp != NULL)
    *pp = l->next;
}

static struct nxu_uuid_link *from_bucket(const struct nxu_uuid_table *t,
                                         unsigned b) {
  for (; b < NXU_UUID_BUCKETS; b++)
    if (t->bucket[b] != NULL)
      return t->bucket[b];
  return NULL;
}

struct nxu_uuid_link *nxu_uuid_first(const struct nxu_uuid_table *t) {
  return from_bucket(t, 0);
}

struct nxu_uuid_link *nxu_uuid_next(const struct nxu_uuid_table *t,
                                    const struct nxu_uuid_link *l) {
  return l->next != NULL ? l->next : from_bucket(t, bucket_of(l->uuid) + 1);
}
