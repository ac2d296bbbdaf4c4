/* Expects AddressSanitizer to report a pointer read in place
 * (nx_get_bytes_ptr) and used after its buffer's last release. The test
 * starts itself again as the child that misuses the pointer, and passes
 * when the child dies with ASan's report. Without ASan there is nothing to
 * catch the misuse: it skips (exit 77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/self_child.h"
#include "nexus.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HAVE_ASAN 1
#endif
#endif

static nx_mutex_t m;
static nx_cond_t c;
static nx_buffer_t *got;

static void on_take(nx_context_t *ctx, void *addr, nx_buffer_t *b) {
  (void)ctx;
  (void)addr;
  if (nx_buffer_retain(b) != 0)
    abort();
  nx_mutex_lock(&m);
  got = b;
  nx_cond_signal(&c);
  nx_mutex_unlock(&m);
}

static int take_init(nx_context_t *ctx, void *arg) {
  (void)arg;
  return nx_handler_register(ctx, "take", on_take, NX_HANDLER_NONTHREADED,
                             NULL);
}

static void on_release(void *arg, const void *v, int status) {
  (void)arg;
  (void)v;
  (void)status;
}

/* The misuse: read 1 MiB in place, release the buffer, read it again. */
static int child(void) {
  static unsigned char big[1 << 20];
  memset(big, 0x5a, sizeof(big));
  nx_gp_t gp = NX_GP_NULL;
  nx_buffer_t *b;
  if (nx_init(NULL, NULL) != 0 || nx_mutex_init(&m) != 0 ||
      nx_cond_init(&c) != 0 ||
      nx_context_create_local(take_init, NULL, &gp) != 0 ||
      nx_rsr_init_name(&b, &gp, "take", 64) != 0 ||
      nx_put_bytes_ref(b, big, sizeof(big), on_release, NULL) != 0 ||
      nx_rsr_send(b) != 0)
    return 2;
  nx_mutex_lock(&m);
  while (got == NULL)
    nx_cond_wait(&c, &m);
  nx_mutex_unlock(&m);
  const void *p;
  if (nx_get_bytes_ptr(got, &p, sizeof(big)) != 0 ||
      ((const volatile unsigned char *)p)[4096] != 0x5a)
    return 3;
  nx_buffer_release(got);
  fprintf(stderr, "zc_misuse: reading after release\n");
  return ((const volatile unsigned char *)p)[4096] == 0x5a ? 4 : 5;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
#ifndef HAVE_ASAN
  (void)argv;
  printf("SKIP: built without AddressSanitizer, nothing reports a use after "
         "release\n");
  return 77;
#else
  static char out[65536];
  int st;
  /* ASan ends the child with an exit code, or SIGABRT under
   * abort_on_error=1 (scripts/test). */
  if (nxt_self_child(argv[0], NULL, NULL, out, sizeof(out), &st) != 0)
    return 1;
  int reported = strstr(out, "ERROR: AddressSanitizer") != NULL &&
                 (strstr(out, "use-after-poison") != NULL ||
                  strstr(out, "heap-use-after-free") != NULL);
  int misused = strstr(out, "zc_misuse: reading after release") != NULL;
  if (!nxt_failed(st) || !reported || !misused) {
    fprintf(stderr,
            "FAIL: expected the child to die with ASan's use-after-free "
            "report after its release (exit %d, signal %d); its stderr:\n"
            "%s\n",
            WIFEXITED(st) ? WEXITSTATUS(st) : -1,
            WIFSIGNALED(st) ? WTERMSIG(st) : 0, out);
    return 1;
  }
  printf("PASS: ASan reported the read after release\n");
  return 0;
#endif
}
