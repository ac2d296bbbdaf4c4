/* Constant-time comparison and hexadecimal encoding of keys (nxu_key.h). */
#include "nxu_key.h"

#include <string.h>

#include "nexus/errors.h"

int nxu_key_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  volatile uint8_t diff = 0; /* no early exit */
  for (size_t i = 0; i < n; i++)
    diff |= a[i] ^ b[i];
  return diff == 0;
}

void nxu_hex_encode(const uint8_t *in, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[in[i] >> 4];
    out[2 * i + 1] = digits[in[i] & 15];
  }
  out[2 * n] = '\0';
}

static int digit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

int nxu_hex_decode(const char *text, uint8_t *out, size_t n) {
  if (text == NULL || strlen(text) != 2 * n)
    return NX_EINVAL;
  for (size_t i = 0; i < 2 * n; i++)
    if (digit(text[i]) < 0)
      return NX_EINVAL;
  for (size_t i = 0; i < n; i++)
    out[i] = (uint8_t)(digit(text[2 * i]) << 4 | digit(text[2 * i + 1]));
  return 0;
}
