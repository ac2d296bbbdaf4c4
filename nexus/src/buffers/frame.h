/* The frame header (nexus/protocol.h documents its layout): the one place it is
 * written and read. */
#ifndef NXI_FRAME_H
#define NXI_FRAME_H

#include "nxu_wire.h"
#include "base/rt.h"

/* The header's fields; magic and version are implied, `flags` is read by
 * decode only (the sender sets it in place), the origin is the source's
 * process. */
struct nxi_frame_hdr {
  uint8_t fmt;
  uint32_t handler;
  uint64_t context;
  uint64_t address;
  uint64_t len;
  uint64_t source; /* the sending context's id, or 0 */
  uint32_t order;  /* its number in an ordered stream (order.h), or 0 */
  uint16_t flags;  /* NXI_FRAME_F_* and the route generation; encode
                    * writes NX_FRAME_F_TAIL only, the rest is set in
                    * place (nxi_frame_hdr_set_flags) */
  uint16_t lead;   /* with NX_FRAME_F_TAIL: the payload's lead, else 0 */
};

/* Computes the largest payload a peer may announce (this machine's
 * memory); once, at nx_init. */
void nxi_frame_init(void);

/* Offsets of the header's fields (nexus/protocol.h). */
enum {
  NXI_HDR_MAGIC = 0,
  NXI_HDR_VERSION = 4,
  NXI_HDR_FORMAT = 5,
  NXI_HDR_FLAGS = 6,
  NXI_HDR_HANDLER = 8,
  NXI_HDR_ORDER = 12,
  NXI_HDR_CONTEXT = 16,
  NXI_HDR_ADDRESS = 24,
  NXI_HDR_LENGTH = 32,
  NXI_HDR_SOURCE = 40
};

/* Writes the NX_FRAME_HDR_SIZE header bytes for `f` into `h`. Inline: it
 * is on every RSR's path (nxi_buffer_seal), where the compiler then writes
 * the buffer's fields straight into the header. */
static inline void nxi_frame_hdr_encode(uint8_t *h,
                                        const struct nxi_frame_hdr *f) {
  nxu_le32(h + NXI_HDR_MAGIC, NX_FRAME_MAGIC);
  h[NXI_HDR_VERSION] = NX_FRAME_VERSION;
  h[NXI_HDR_FORMAT] = f->fmt;
  nxu_le16(h + NXI_HDR_FLAGS, f->flags & NX_FRAME_F_TAIL);
  nxu_le32(h + NXI_HDR_HANDLER, f->handler);
  nxu_le32(h + NXI_HDR_ORDER, f->order);
  nxu_le64(h + NXI_HDR_CONTEXT, f->context);
  nxu_le64(h + NXI_HDR_ADDRESS, f->address);
  nxu_le64(h + NXI_HDR_LENGTH, f->len | (uint64_t)f->lead << 48);
  nxu_le64(h + NXI_HDR_SOURCE, f->source);
}

/* The largest payload a peer may announce (nxi_frame_init). */
extern size_t nxi_frame_max_bytes;

/* Reads and checks the header at `h`: magic, version, a known format, a
 * non-zero handler and context, a length this machine can hold. Returns 0
 * or NX_EPROTO. Inline, as encode: on every received frame's path
 * (frame_alloc), where the fields then go straight to the buffer. */
static inline int nxi_frame_hdr_decode(const uint8_t *h,
                                       struct nxi_frame_hdr *out) {
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
      nxu_rd64(h + NXI_HDR_CONTEXT) == 0 || len > nxi_frame_max_bytes)
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

/* Sets the flags field (NXI_FRAME_F_*, ledger.h). The sending process's
 * id is the process of the source context (nxi_ctxid_proc: a gateway
 * passes the source on unchanged, so it names the first sender; 0 when
 * the sender did not say). */
static inline void nxi_frame_hdr_set_flags(uint8_t *h, uint16_t flags) {
  nxu_le16(h + NXI_HDR_FLAGS,
           (uint16_t)(flags | (nxu_rd16(h + NXI_HDR_FLAGS) & NX_FRAME_F_TAIL)));
}

/* Header flag of the runtime's own confirmation messages: they are not
 * entered in the ledger (services/ledger.h) (they would need confirming in
 * turn). */
#define NXI_FRAME_F_CTL 1u
/* ... and of a question about a failed route's RSRs (a fence): the
 * receiver answers it after the RSRs it received before it, not ahead of
 * them as other confirmation messages. */
#define NXI_FRAME_F_FENCE 2u
/* Bit 2, NX_FRAME_F_TAIL (nexus/protocol.h): the payload ends with an
 * array whose elements may be placed (docs/design.md, "Receive
 * placement"); its lead is in the length field's high 16 bits. */
/* Bits 8-10 of the flags: the generation of the sender's route
 * (modules/dlist.h, struct nxi_route): how many routes to that process failed
 * before it. The receiver counts each generation apart, so that RSRs a failed
 * route lost are told from those its successor carries. */
#define NXI_FRAME_GEN_SHIFT 8
#define NXI_FRAME_GENS 8u

#endif /* NXI_FRAME_H */
