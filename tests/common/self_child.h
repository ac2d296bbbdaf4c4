/* For a test that expects a sanitizer to catch its misuse: it runs itself
 * again ("ARGV0 child") and reads what the child wrote on stderr. */
#ifndef NX_TEST_SELF_CHILD_H
#define NX_TEST_SELF_CHILD_H

#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs "argv0 child", with `name`=`value` in its environment when `name`
 * is not NULL, until it ends. Its stderr goes to `out` (at most cap - 1
 * bytes, NUL-ended), and its wait status to *status. Returns 0, or -1 if
 * it could not be started. */
static inline int nxt_self_child(const char *argv0, const char *name,
                                 const char *value, char *out, size_t cap,
                                 int *status) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    if (name != NULL)
      setenv(name, value, 1);
    execl("/proc/self/exe", argv0, "child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t k;
  while (n < cap - 1 && (k = read(fds[0], out + n, cap - 1 - n)) > 0)
    n += (size_t)k;
  out[n] = '\0';
  close(fds[0]);
  *status = 0;
  waitpid(pid, status, 0);
  return 0;
}

/* Whether a child with wait status `st` failed: a non-zero exit or a
 * signal. */
static inline int nxt_failed(int st) {
  return (WIFEXITED(st) && WEXITSTATUS(st) != 0) || WIFSIGNALED(st);
}

#endif /* NX_TEST_SELF_CHILD_H */
