/* The entry points libFuzzer calls in each target (tests/fuzz). */
#ifndef NX_FUZZ_H
#define NX_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "../common/expect.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* NX_FUZZ_H */
