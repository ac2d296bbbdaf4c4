/* libFuzzer target: the control channel's codec (nexus/src/processes/ctl.c):
 * every parser on arbitrary messages; what a parser accepts lies inside the
 * message and encodes back to the same bytes. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "processes/ctl.h"

static void check_peer(const uint8_t *msg, size_t len,
                       const struct nxi_ctl_peer *p) {
  NXT_ASSERT(p->blob >= msg && p->blob + p->len <= msg + len);
  uint8_t *again = malloc(NXI_CTL_ENTRY_HEAD + p->len);
  if (again == NULL)
    return;
  size_t n = nxi_ctl_put_peer(again, NXI_CTL_ENTRY_HEAD + p->len, p->context,
                              p->address, p->blob, p->len);
  NXT_ASSERT(n == NXI_CTL_ENTRY_HEAD + p->len);
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct nxi_ctl_peer p;
  size_t off = 0;
  /* A PEERS message: its head, then entries until one fails. */
  uint32_t rank, count;
  if (nxi_ctl_parse_peers_head(data, size, &rank, &count) == 0) {
    off = NXI_CTL_PEERS_HEAD;
    for (uint32_t i = 0; i < count; i++) {
      size_t before = off;
      if (nxi_ctl_parse_peer(data, size, &off, &p) != 0)
        break;
      NXT_ASSERT(off > before && off <= size);
      check_peer(data, size, &p);
    }
  }
  if (nxi_ctl_parse_ready(data, size, &p) == 0)
    check_peer(data, size, &p);
  uint64_t ctx;
  (void)nxi_ctl_parse_peer_dead(data, size, &ctx);
  off = 0;
  while (off < size && nxi_ctl_parse_peer(data, size, &off, &p) == 0)
    check_peer(data, size, &p);
  return 0;
}
