/* The frame header's bound on the payload a peer may announce; frame.h
 * encodes and checks the header, inline. */
#include "buffers/frame.h"

#include <unistd.h>

#include "nxu_opt.h"

/* Computed once: sysconf (_SC_PHYS_PAGES) is a system call. */
size_t nxi_frame_max_bytes;

void nxi_frame_init(void) {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  nxi_frame_max_bytes =
      pages <= 0 || size <= 0 ? (size_t)1 << 40 : (size_t)pages * (size_t)size;
  /* NX_FRAME_MAX (checked at nx_init with the other settings): the payload
   * is allocated when its header arrives, so a peer could otherwise make
   * this process reserve up to its memory per connection. */
  uint64_t v = 0;
  char why[96];
  if (nxu_opt_number("NX_FRAME_MAX", &v, why, sizeof(why)) == 0 && v != 0 &&
      v < nxi_frame_max_bytes)
    nxi_frame_max_bytes = (size_t)v;
}
