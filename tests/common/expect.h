/* Assertions for the C programs the tests run: peers and tasks, programs
 * built against an installed library, fuzz targets. A failed one says where
 * and what on stderr, then
 *   NXT_ASSERT(cond)        aborts (in a fuzz target, libFuzzer keeps the
 *                           input as a crash);
 *   NXT_EXPECT(cond, ret)   returns `ret` from the enclosing function, whose
 *                           caller turns it into the exit status;
 *   NXT_CHECK(cond, ...)    counts it and goes on (below). */
#ifndef NX_TEST_EXPECT_H
#define NX_TEST_EXPECT_H

#include <stdio.h>
#include <stdlib.h>

#define NXT_FAILED_(cond)                                                      \
  fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond)

#define NXT_ASSERT(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      NXT_FAILED_(cond);                                                       \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define NXT_EXPECT(cond, ret)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      NXT_FAILED_(cond);                                                       \
      return (ret);                                                            \
    }                                                                          \
  } while (0)

/* NXT_CHECK(cond, fmt, ...): counts a failure in the program's own `int
 * failures`, says where, what and the message, and goes on: a program
 * that checks many things reports every one that failed. */
#define NXT_CHECK(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

#endif /* NX_TEST_EXPECT_H */
