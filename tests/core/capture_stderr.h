// capture_stderr(fn): runs fn with stderr going to a file and returns what
// it wrote, for tests that check nexus's messages.
#ifndef NX_TESTS_CAPTURE_STDERR_H
#define NX_TESTS_CAPTURE_STDERR_H

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

template <class F> std::string capture_stderr(F fn) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  REQUIRE(tmp != nullptr);
  int saved = dup(2);
  REQUIRE(saved >= 0);
  dup2(fileno(tmp), 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  rewind(tmp);
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), tmp)) > 0)
    out.append(buf, n);
  fclose(tmp);
  return out;
}

#endif
