/* HMAC-SHA256 proofs over both sides' nonces, for the tcp module's and
 * attach's handshakes; the crypto is OpenSSL's libcrypto, none of it ours.
 * libcrypto is loaded with dlopen at the first proof, not linked: loading
 * it cost every process 3 ms at start (an empty program linked with it
 * against one linked with nothing, docs/performance.md), and a process
 * whose peers are all reached over ucx or local never makes a proof. */
#include "nxu_auth.h"

#include <dlfcn.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "nexus/errors.h"

/* The library whose headers this was compiled with: OpenSSL 3 keeps the
 * soname libcrypto.so.3 for every 3.x. */
#if OPENSSL_VERSION_MAJOR == 3
#define LIBCRYPTO "libcrypto.so.3"
#else
#error "nxu_auth.c loads OpenSSL 3's libcrypto.so.3"
#endif

/* The functions used, found once (only their types come from the
 * headers: nothing here refers to libcrypto's symbols). */
static struct {
  pthread_once_t once;
  int ok;
  __typeof__(&HMAC) hmac;
  __typeof__(&EVP_sha256) sha256;
  __typeof__(&CRYPTO_memcmp) memcmp_ct;
} lc = {.once = PTHREAD_ONCE_INIT};

/* Loads libcrypto and starts it without its exit-time cleanup. libcrypto
 * otherwise frees its state in an atexit handler registered at its first
 * use, which runs before the handlers registered earlier: a runtime still
 * at work in one of those (a PVM program's pvm_exit in a static
 * destructor, nexus-pvm's flush at exit) crashed in its next handshake.
 * The handle is never closed. */
static void lc_load(void) {
  void *h = dlopen(LIBCRYPTO, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return;
  __typeof__(&OPENSSL_init_crypto) init =
      (__typeof__(&OPENSSL_init_crypto))dlsym(h, "OPENSSL_init_crypto");
  lc.hmac = (__typeof__(&HMAC))dlsym(h, "HMAC");
  lc.sha256 = (__typeof__(&EVP_sha256))dlsym(h, "EVP_sha256");
  lc.memcmp_ct = (__typeof__(&CRYPTO_memcmp))dlsym(h, "CRYPTO_memcmp");
  lc.ok = init != NULL && lc.hmac != NULL && lc.sha256 != NULL &&
          lc.memcmp_ct != NULL && init(OPENSSL_INIT_NO_ATEXIT, NULL) == 1;
}

static int lc_ready(void) {
  pthread_once(&lc.once, lc_load);
  return lc.ok;
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
  if (!lc_ready() ||
      lc.hmac(lc.sha256(), key, (int)key_len, msg, off, out, &len) == NULL ||
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
  return lc.memcmp_ct(want, mac, NXU_MAC_SIZE) == 0; /* loaded by the mac */
}
