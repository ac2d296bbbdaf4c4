// A scope guard for nx_init/nx_finalize in tests: the runtime is finalised
// even when a REQUIRE throws, so one failure does not leave the next test
// case running inside a still-initialised (nested) runtime.
#ifndef NX_TESTS_RUNTIME_GUARD_H
#define NX_TESTS_RUNTIME_GUARD_H

#include "nexus.h"

class runtime_guard {
public:
  runtime_guard() : init_rc_(nx_init(nullptr, nullptr)) {}
  ~runtime_guard() {
    if (init_rc_ == 0 && !finalized_)
      nx_finalize();
  }
  runtime_guard(const runtime_guard &) = delete;
  runtime_guard &operator=(const runtime_guard &) = delete;

  // nx_init's result.
  int init_rc() const { return init_rc_; }

  // Calls nx_finalize now and returns its result.
  int finalize() {
    finalized_ = true;
    return nx_finalize();
  }

private:
  int init_rc_;
  bool finalized_ = false;
};

#endif // NX_TESTS_RUNTIME_GUARD_H
