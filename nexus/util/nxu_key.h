/* The computation's key and other short secrets: constant-time comparison and
 * hexadecimal text. */
#ifndef NXU_KEY_H
#define NXU_KEY_H

#include <stddef.h>
#include <stdint.h>

/* 1 if the `n` bytes at `a` and `b` are equal. Takes the same time
 * wherever they differ, so a peer cannot guess a key byte by byte. */
int nxu_key_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Writes `n` bytes as 2n lowercase hex digits and a NUL into `out`
 * (2n + 1 bytes). */
void nxu_hex_encode(const uint8_t *in, size_t n, char *out);

/* Reads exactly 2n hex digits (either case) from `text` into `out`.
 * Returns 0, or NX_EINVAL when `text` is not exactly that (out is then
 * left unchanged). */
int nxu_hex_decode(const char *text, uint8_t *out, size_t n);

#endif /* NXU_KEY_H */
