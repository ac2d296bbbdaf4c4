/* Mutual challenge-response over fresh nonces: each side of a handshake proves
 * it holds the computation's key without sending it (HMAC-SHA256, libcrypto,
 * loaded at the first proof).
 */
#ifndef NXU_AUTH_H
#define NXU_AUTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NXU_NONCE_SIZE 32
#define NXU_MAC_SIZE 32

/* Fills `out` with NXU_NONCE_SIZE fresh random bytes (getrandom). Returns 0
 * or NX_EIO. */
int nxu_auth_nonce(uint8_t out[NXU_NONCE_SIZE]);

/* The proof a side of role `role` ("client" or "server", so one side's
 * proof never passes for the other's) gives for the nonces of both sides
 * and the context bytes `ctx` (identities, status): HMAC-SHA256 under the
 * key of `key_len` bytes. Returns 0 or NX_EIO (libcrypto could not be
 * loaded or started: every handshake then fails). */
int nxu_auth_mac(const uint8_t *key, size_t key_len, const char *role,
                 const uint8_t client_nonce[NXU_NONCE_SIZE],
                 const uint8_t server_nonce[NXU_NONCE_SIZE], const uint8_t *ctx,
                 size_t ctx_len, uint8_t out[NXU_MAC_SIZE]);

/* 1 if `mac` is the proof nxu_auth_mac computes for the same arguments
 * (compared in constant time), else 0. */
int nxu_auth_check(const uint8_t *key, size_t key_len, const char *role,
                   const uint8_t client_nonce[NXU_NONCE_SIZE],
                   const uint8_t server_nonce[NXU_NONCE_SIZE],
                   const uint8_t *ctx, size_t ctx_len,
                   const uint8_t mac[NXU_MAC_SIZE]);

#ifdef __cplusplus
}
#endif

#endif /* NXU_AUTH_H */
