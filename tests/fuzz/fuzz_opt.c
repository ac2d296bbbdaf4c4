/* libFuzzer target: the NX_* option parsers (nexus/util/nxu_opt.c) and the
 * hex decoder (nxu_key.c): the first byte picks a setting of the table,
 * the rest is its value; a value may be refused (with a reason), never
 * crash the parser or overrun the reason buffer. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nexus/errors.h"
#include "nexus/protocol.h"
#include "nxu_key.h"
#include "nxu_opt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const struct nxu_opt *o = &nxu_opts[data[0] % nxu_opt_count];
  char *value = malloc(size);
  if (value == NULL)
    return 0;
  memcpy(value, data + 1, size - 1);
  value[size - 1] = '\0';
  char why[96];
  memset(why, 0x55, sizeof(why));
  int r = nxu_opt_check(o, value, why, sizeof(why));
  /* A refusal says why, NUL-terminated, within the buffer. */
  NXT_ASSERT(r == 0 || memchr(why, '\0', sizeof(why)) != NULL);
  /* The same value through the typed readers, which must agree with the
   * check on a value that is set (empty reads as unset: the default): a
   * number it accepts reads back within the entry's bounds, a choice it
   * accepts is an index of a word. */
  setenv(o->name, value, 1);
  uint64_t u = 0;
  size_t sz;
  int c = -1;
  int rn = nxu_opt_number(o->name, &u, why, sizeof(why));
  (void)nxu_opt_size(o->name, &sz, why, sizeof(why));
  int rc = nxu_opt_choice(o->name, &c, why, sizeof(why));
  unsetenv(o->name);
  if (o->kind == NXU_OPT_SIZE || o->kind == NXU_OPT_UINT) {
    /* The check and the reader agree; an accepted number is within its
     * bounds; empty reads as the default. */
    NXT_ASSERT(value[0] == '\0' || (r == 0) == (rn == 0));
    NXT_ASSERT(rn != 0 || value[0] == '\0' || (u >= o->min && u <= o->max));
    NXT_ASSERT(rn != 0 || value[0] != '\0' || u == o->def_value);
  }
  /* An accepted word is one the reader finds. */
  NXT_ASSERT(o->kind != NXU_OPT_CHOICE || r != 0 || (rc == 0 && c >= 0));
  uint8_t key[NX_KEY_SIZE];
  (void)nxu_hex_decode(value, key, sizeof(key));
  free(value);
  return 0;
}
