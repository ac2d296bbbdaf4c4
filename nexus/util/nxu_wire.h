/* Fixed little-endian wire fields: plain stores and loads on a little-endian
 * host, byte swaps elsewhere. */
#ifndef NXU_WIRE_H
#define NXU_WIRE_H

#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NXU_TO_LE16(v) (v)
#define NXU_TO_LE32(v) (v)
#define NXU_TO_LE64(v) (v)
#else
#define NXU_TO_LE16(v) __builtin_bswap16(v)
#define NXU_TO_LE32(v) __builtin_bswap32(v)
#define NXU_TO_LE64(v) __builtin_bswap64(v)
#endif

static inline void nxu_le16(uint8_t *p, uint16_t v) {
  v = NXU_TO_LE16(v);
  memcpy(p, &v, 2);
}
static inline void nxu_le32(uint8_t *p, uint32_t v) {
  v = NXU_TO_LE32(v);
  memcpy(p, &v, 4);
}
static inline void nxu_le64(uint8_t *p, uint64_t v) {
  v = NXU_TO_LE64(v);
  memcpy(p, &v, 8);
}
static inline uint16_t nxu_rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return NXU_TO_LE16(v);
}
static inline uint32_t nxu_rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return NXU_TO_LE32(v);
}
static inline uint64_t nxu_rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return NXU_TO_LE64(v);
}

#endif /* NXU_WIRE_H */
