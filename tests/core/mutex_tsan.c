/* Expects ThreadSanitizer to see nexus mutexes as mutexes (threads/posix/
 * thread.c tells it of every lock and unlock; they are no pthread
 * mutexes): a child that takes two nx mutexes in one order and then in
 * the other must die with TSan's lock-order-inversion report. The test
 * starts itself again as that child. Without TSan nothing reports it: it
 * skips (exit 77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/self_child.h"
#include "nexus.h"

#if defined(__SANITIZE_THREAD__)
#define HAVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HAVE_TSAN 1
#endif
#endif

/* The inversion: a then b, later b then a. Returns 0 if it ran through
 * (TSan with halt_on_error ends the child at the report). */
static int child(void) {
  static nx_mutex_t a, b;
  if (nx_mutex_init(&a) != 0 || nx_mutex_init(&b) != 0)
    return 2;
  if (nx_mutex_lock(&a) != 0 || nx_mutex_lock(&b) != 0 ||
      nx_mutex_unlock(&b) != 0 || nx_mutex_unlock(&a) != 0)
    return 3;
  fprintf(stderr, "mutex_tsan: taking them the other way round\n");
  if (nx_mutex_lock(&b) != 0 || nx_mutex_lock(&a) != 0 ||
      nx_mutex_unlock(&a) != 0 || nx_mutex_unlock(&b) != 0)
    return 4;
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
#ifndef HAVE_TSAN
  (void)argv;
  printf("SKIP: built without ThreadSanitizer, nothing reports a lock-order "
         "inversion\n");
  return 77;
#else
  static char out[65536];
  int st;
  if (nxt_self_child(argv[0], "TSAN_OPTIONS", "halt_on_error=1", out,
                     sizeof(out), &st) != 0)
    return 1;
  /* TSAN_OPTIONS: the child ends at the report, whatever the caller's. */
  int reported = strstr(out, "ThreadSanitizer: lock-order-inversion") != NULL;
  int inverted =
      strstr(out, "mutex_tsan: taking them the other way round") != NULL;
  if (!nxt_failed(st) || !reported || !inverted) {
    fprintf(stderr,
            "FAIL: expected the child to die with TSan's lock-order-inversion "
            "report (exit %d, signal %d); its stderr:\n%s\n",
            WIFEXITED(st) ? WEXITSTATUS(st) : -1,
            WIFSIGNALED(st) ? WTERMSIG(st) : 0, out);
    return 1;
  }
  printf("PASS: TSan reported the lock-order inversion of two nx mutexes\n");
  return 0;
#endif
}
