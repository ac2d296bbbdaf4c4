/* The frame header's encoding and checks (frame.h). */
#include "frame.h"

#include <unistd.h>

#include "nxu_opt.h"

/* Offsets of the header's fields (nexus/protocol.h). */
enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 4,
  OFF_FORMAT = 5,
  OFF_FLAGS = 6,
  OFF_HANDLER = 8,
  OFF_ORDER = 12,
  OFF_CONTEXT = 16,
  OFF_ADDRESS = 24,
  OFF_LENGTH = 32,
  OFF_SOURCE = 40
};

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

void nxi_frame_hdr_encode(uint8_t *h, const struct nxi_frame_hdr *f) {
  nxu_le32(h + OFF_MAGIC, NX_FRAME_MAGIC);
  h[OFF_VERSION] = NX_FRAME_VERSION;
  h[OFF_FORMAT] = f->fmt;
  nxu_le16(h + OFF_FLAGS, 0);
  nxu_le32(h + OFF_HANDLER, f->handler);
  nxu_le32(h + OFF_ORDER, f->order);
  nxu_le64(h + OFF_CONTEXT, f->context);
  nxu_le64(h + OFF_ADDRESS, f->address);
  nxu_le64(h + OFF_LENGTH, f->len);
  nxu_le64(h + OFF_SOURCE, f->source);
}

int nxi_frame_hdr_decode(const uint8_t *h, struct nxi_frame_hdr *out) {
  uint8_t fmt = h[OFF_FORMAT];
  uint64_t len = nxu_rd64(h + OFF_LENGTH);
  if (nxu_rd32(h + OFF_MAGIC) != NX_FRAME_MAGIC ||
      h[OFF_VERSION] != NX_FRAME_VERSION ||
      (fmt != NX_FORMAT_LITTLE && fmt != NX_FORMAT_BIG) ||
      nxu_rd32(h + OFF_HANDLER) == 0 || nxu_rd64(h + OFF_CONTEXT) == 0 ||
      len > max_frame_bytes)
    return NX_EPROTO;
  out->fmt = fmt;
  out->handler = nxu_rd32(h + OFF_HANDLER);
  out->context = nxu_rd64(h + OFF_CONTEXT);
  out->address = nxu_rd64(h + OFF_ADDRESS);
  out->len = len;
  out->source = nxu_rd64(h + OFF_SOURCE);
  out->order = nxu_rd32(h + OFF_ORDER);
  out->flags = nxu_rd16(h + OFF_FLAGS);
  return 0;
}

void nxi_frame_hdr_set_flags(uint8_t *h, uint16_t flags) {
  nxu_le16(h + OFF_FLAGS, flags);
}
