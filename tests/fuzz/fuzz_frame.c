/* libFuzzer target: the frame header check (nexus/src/buffers/frame.c) on
 * arbitrary 48-byte headers; a header it accepts must encode back to the same
 * fields, a receive placement lead included. */
#include "fuzz.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buffers/frame.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  nxi_frame_init();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t h[NX_FRAME_HDR_SIZE] = {0};
  memcpy(h, data, size < sizeof(h) ? size : sizeof(h));
  struct nxi_frame_hdr f, g;
  if (nxi_frame_hdr_decode(h, &f) == 0) {
    uint8_t again[NX_FRAME_HDR_SIZE];
    nxi_frame_hdr_encode(again, &f);
    /* What the check accepts must survive a round trip. */
    NXT_ASSERT(nxi_frame_hdr_decode(again, &g) == 0);
    NXT_ASSERT(g.fmt == f.fmt && g.handler == f.handler &&
               g.context == f.context && g.address == f.address &&
               g.len == f.len && g.source == f.source);
    /* A receive placement lead (flag bit 2) survives it too. */
    NXT_ASSERT(g.lead == f.lead &&
               ((g.flags ^ f.flags) & NX_FRAME_F_TAIL) == 0);
    NXT_ASSERT(f.lead == 0 || (f.lead >= 5 && f.lead < f.len));
  }
  return 0;
}
