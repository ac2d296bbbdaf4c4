/* The frame header (nexus/protocol.h documents its layout): the one place it is
 * written and read. */
#ifndef NXI_FRAME_H
#define NXI_FRAME_H

#include "rt.h"

/* The header's fields; magic, version, flags and origin are implied. */
struct nxi_frame_hdr {
  uint8_t fmt;
  uint32_t handler;
  uint64_t context;
  uint64_t address;
  uint64_t len;
  uint64_t source; /* the sending context's id, or 0 */
  uint32_t order;  /* its number in an ordered stream (order.h), or 0 */
};

/* Computes the largest payload a peer may announce (this machine's
 * memory); once, at nx_init. */
void nxi_frame_init(void);

/* Writes the NX_FRAME_HDR_SIZE header bytes for `f` into `h`. */
void nxi_frame_hdr_encode(uint8_t *h, const struct nxi_frame_hdr *f);

/* Reads and checks the header at `h`: magic, version, a known format, a
 * non-zero handler and context, a length this machine can hold. Returns 0
 * or NX_EPROTO. */
int nxi_frame_hdr_decode(const uint8_t *h, struct nxi_frame_hdr *out);

/* The sending process's id: the process of the source context (a gateway
 * passes the source on unchanged, so it names the first sender); 0 when
 * the sender did not say. */
uint32_t nxi_frame_hdr_origin(const uint8_t *h);
/* The flags field (NXI_FRAME_F_*, ledger.h). */
void nxi_frame_hdr_set_flags(uint8_t *h, uint16_t flags);
uint16_t nxi_frame_hdr_flags(const uint8_t *h);

#endif /* NXI_FRAME_H */
