/* HMAC-SHA256 proofs over both sides' nonces, for the tcp module's and
 * attach's handshakes; the crypto is OpenSSL's libcrypto, none of it ours. */
#include "nxu_auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

#include "nexus/errors.h"

int nxu_auth_init(void) {
  return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL) == 1 ? 0 : NX_EIO;
}

int nxu_auth_nonce(uint8_t out[NXU_NONCE_SIZE]) {
  size_t got = 0;
  while (got < NXU_NONCE_SIZE) {
    ssize_t n = getrandom(out + got, NXU_NONCE_SIZE - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return NX_EIO;
    got += (size_t)n;
  }
  return 0;
}

int nxu_auth_mac(const uint8_t *key, size_t key_len, const char *role,
                 const uint8_t client_nonce[NXU_NONCE_SIZE],
                 const uint8_t server_nonce[NXU_NONCE_SIZE], const uint8_t *ctx,
                 size_t ctx_len, uint8_t out[NXU_MAC_SIZE]) {
  /* The message: "nexus-auth-1 <role>", NUL, both nonces, the context. The
   * label keeps these proofs apart from any other use of the key. */
  uint8_t msg[64 + 2 * NXU_NONCE_SIZE + 256];
  size_t rl = strlen(role);
  if (rl > 32 || ctx_len > 256)
    return NX_EINVAL;
  size_t off = 0;
  memcpy(msg, "nexus-auth-1 ", 13);
  off = 13;
  memcpy(msg + off, role, rl);
  off += rl;
  msg[off++] = 0;
  memcpy(msg + off, client_nonce, NXU_NONCE_SIZE);
  off += NXU_NONCE_SIZE;
  memcpy(msg + off, server_nonce, NXU_NONCE_SIZE);
  off += NXU_NONCE_SIZE;
  if (ctx_len != 0)
    memcpy(msg + off, ctx, ctx_len);
  off += ctx_len;
  unsigned len = 0;
  if (HMAC(EVP_sha256(), key, (int)key_len, msg, off, out, &len) == NULL ||
      len != NXU_MAC_SIZE)
    return NX_EIO;
  return 0;
}

int nxu_auth_check(const uint8_t *key, size_t key_len, const char *role,
                   const uint8_t client_nonce[NXU_NONCE_SIZE],
                   const uint8_t server_nonce[NXU_NONCE_SIZE],
                   const uint8_t *ctx, size_t ctx_len,
                   const uint8_t mac[NXU_MAC_SIZE]) {
  uint8_t want[NXU_MAC_SIZE];
  if (nxu_auth_mac(key, key_len, role, client_nonce, server_nonce, ctx, ctx_len,
                   want) < 0)
    return 0;
  return CRYPTO_memcmp(want, mac, NXU_MAC_SIZE) == 0;
}
