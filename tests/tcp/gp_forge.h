// Forged tcp descriptors and gps for the tcp tests: a gp whose only
// descriptor is a "tcp" one with the scope and data a test chooses (the
// list's layout is docs/design.md's, the data's docs/tcp.md's).
#ifndef NX_TESTS_TCP_GP_FORGE_H
#define NX_TESTS_TCP_GP_FORGE_H

#include <cstdint>
#include <string>
#include <vector>

#include "nexus/buffer.h"
#include "nexus/gp.h"

namespace tcp_test {

// A gp as buffer bytes: tag, context, address (taken from a real gp), then
// a descriptor list of one "tcp" descriptor with this scope and data.
struct gp_forge {
  std::vector<uint8_t> prefix; // tag, context, address
  std::vector<uint8_t> scope;  // this host's
  std::vector<uint8_t> data;   // this process's tcp descriptor data
  int format = 0;

  bool init(const nx_gp_t &me) {
    nx_buffer_t *b;
    const void *bytes;
    size_t len;
    if (nx_buffer_create(64, &b) != 0 || nx_put_gp(b, &me) != 0 ||
        nx_buffer_bytes(b, &bytes, &len) != 0)
      return false;
    const uint8_t *p = static_cast<const uint8_t *>(bytes);
    format = nx_buffer_format(b);
    prefix.assign(p, p + 17);
    // Another context id, in another process.
    for (int i = 1; i < 17; i++)
      prefix[i] ^= 0x5a;
    // The list: u8 count, then u8 name_len, name, u16 wire, u8 scope_len,
    // scope, u16 data_len, data.
    size_t off = 17, n = p[off++];
    bool found = false;
    for (size_t i = 0; i < n && off < len; i++) {
      size_t nl = p[off];
      std::string name(reinterpret_cast<const char *>(p + off + 1), nl);
      off += 1 + nl + 2;
      size_t sl = p[off++];
      std::vector<uint8_t> sc(p + off, p + off + sl);
      off += sl;
      size_t dl = p[off] | p[off + 1] << 8;
      off += 2;
      if (name == "tcp") {
        scope = sc;
        data.assign(p + off, p + off + dl);
        found = true;
      }
      off += dl;
    }
    nx_buffer_release(b);
    return found;
  }

  // The gp with this scope and data; nx_get_gp's result.
  int make(const std::vector<uint8_t> &sc, const std::vector<uint8_t> &d,
           nx_gp_t *gp) const {
    std::vector<uint8_t> bytes = prefix;
    const char name[] = "tcp";
    bytes.push_back(1);
    bytes.push_back(3);
    bytes.insert(bytes.end(), name, name + 3);
    bytes.push_back(2); // wire version 2
    bytes.push_back(0);
    bytes.push_back((uint8_t)sc.size());
    bytes.insert(bytes.end(), sc.begin(), sc.end());
    bytes.push_back((uint8_t)d.size());
    bytes.push_back((uint8_t)(d.size() >> 8));
    bytes.insert(bytes.end(), d.begin(), d.end());
    nx_buffer_t *b;
    int r = nx_buffer_from_bytes(bytes.data(), bytes.size(), format, &b);
    if (r != 0)
      return r;
    r = nx_get_gp(b, gp);
    nx_buffer_release(b);
    return r;
  }

  // "tcp" when the module calls it reachable, "" when not; "?" if the gp
  // could not even be built.
  std::string protocol(const std::vector<uint8_t> &sc,
                       const std::vector<uint8_t> &d) const {
    nx_gp_t gp = NX_GP_NULL;
    if (make(sc, d, &gp) != 0)
      return "?";
    const char *p = nx_gp_protocol(&gp);
    std::string r = p != nullptr ? p : "";
    nx_gp_release(&gp);
    return r;
  }
};

// Descriptor data: version 1, flags 0, uuid, count, then addresses.
inline std::vector<uint8_t> desc(const std::vector<uint8_t> &uuid,
                                 const std::vector<std::vector<uint8_t>> &addrs,
                                 int count = -1) {
  std::vector<uint8_t> d = {1, 0};
  d.insert(d.end(), uuid.begin(), uuid.end());
  d.push_back((uint8_t)(count >= 0 ? count : (int)addrs.size()));
  for (const auto &a : addrs)
    d.insert(d.end(), a.begin(), a.end());
  return d;
}

inline std::vector<uint8_t> v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d,
                               uint16_t port) {
  return {4, (uint8_t)(port >> 8), (uint8_t)port, a, b, c, d};
}

} // namespace tcp_test

#endif /* NX_TESTS_TCP_GP_FORGE_H */
