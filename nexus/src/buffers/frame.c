/* The frame header's encoding and checks (frame.h). */
#include "buffers/frame.h"

#include <unistd.h>

#include "nxu_opt.h"

/* The largest frame a peer may announce. Computed once: sysconf
 * (_SC_PHYS_PAGES) is a system call. */
static size_t max_frame_bytes;

void nxi_frame_init(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  max_frame_bytes =
      pages <= 0 || size <= 0 ? (size_t)1 << 40 : (size_t)pages * (size_t)size;
  /* NX_FRAME_MAX (checked at nx_init with the other settings): the payload
   * is allocated when its header arrives, so a peer could otherwise make
   * this process reserve up to its memory per connection. */
  uint64_t v = 0;
  char why[96];
  if (nxu_opt_number("NX_FRAME_MAX", &v, why, sizeof(why)) == 0 && v != 0 &&
      v < max_frame_bytes)
    max_frame_bytes = (size_t)v;
}

int nxi_frame_hdr_decode(const uint8_t *h, struct nxi_frame_hdr *out) {
  uint8_t fmt = h[NXI_HDR_FORMAT];
  uint64_t len = nxu_rd64(h + NXI_HDR_LENGTH);
  uint16_t flags = nxu_rd16(h + NXI_HDR_FLAGS);
  uint16_t lead = 0;
  if (flags & NX_FRAME_F_TAIL) {
    /* The lead holds at least the array's tag and count, and a tail
     * follows it. */
    lead = (uint16_t)(len >> 48);
    len &= ((uint64_t)1 << 48) - 1;
    if (lead < 5 || lead >= len)
      return NX_EPROTO;
  }
  if (nxu_rd32(h + NXI_HDR_MAGIC) != NX_FRAME_MAGIC ||
      h[NXI_HDR_VERSION] != NX_FRAME_VERSION ||
      (fmt != NX_FORMAT_LITTLE && fmt != NX_FORMAT_BIG) ||
      nxu_rd32(h + NXI_HDR_HANDLER) == 0 ||
      nxu_rd64(h + NXI_HDR_CONTEXT) == 0 || len > max_frame_bytes)
    return NX_EPROTO;
  out->fmt = fmt;
  out->handler = nxu_rd32(h + NXI_HDR_HANDLER);
  out->context = nxu_rd64(h + NXI_HDR_CONTEXT);
  out->address = nxu_rd64(h + NXI_HDR_ADDRESS);
  out->len = len;
  out->source = nxu_rd64(h + NXI_HDR_SOURCE);
  out->order = nxu_rd32(h + NXI_HDR_ORDER);
  out->flags = flags;
  out->lead = lead;
  return 0;
}
