/* libFuzzer target: the descriptor-list parser (nexus/src/modules/dlist.c): the
 * length check, then interning, on arbitrary bytes. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>

#include "modules/dlist.h"
#include "nexus.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  setenv("NX_PROTOCOLS", "local", 0);
  setenv("NX_PROGRESS", "poll", 0);
  NXT_ASSERT(nx_init(NULL, NULL) == 0);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  size_t len = 0;
  if (nxi_dlist_parse_len(data, size, &len) == 0) {
    /* A length it accepts must lie within what it was given. */
    NXT_ASSERT(len <= size);
    struct nxi_dlist *dl;
    if (nxi_dlist_intern(data, len, &dl) == 0) {
      struct nxi_route *rt;
      (void)nxi_dlist_route(dl, &rt);
      nxi_dlist_release(dl);
    }
  }
  return 0;
}
