/* Settings from the environment, shared by the protocol modules and the
 * core (each module is its own shared object, so this is header-only). */
#ifndef NXMOD_ENV_H
#define NXMOD_ENV_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "nexus/errors.h"

/* Reads the size `name` ("64m", "4096", suffixes k, m, g), `def` when unset
 * or empty. A value that is not such a number, or lies outside [min, max],
 * gives NX_EINVAL and the reason in `why` (which a module's init passes on,
 * so the module is skipped with it). Pass SIZE_MAX for no upper bound. */
static inline int nxmod_env_size(const char *name, size_t def, size_t min,
                                 size_t max, size_t *out, char *why,
                                 size_t why_len) {
  const char *s = getenv(name);
  if (s == NULL || s[0] == '\0') {
    *out = def;
    return 0;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  if (*end == 'k' || *end == 'K')
    shift = 10, end++;
  else if (*end == 'm' || *end == 'M')
    shift = 20, end++;
  else if (*end == 'g' || *end == 'G')
    shift = 30, end++;
  if (s[0] < '0' || s[0] > '9' || errno != 0 || *end != '\0' ||
      v > (SIZE_MAX >> shift) || (v << shift) < min || (v << shift) > max) {
    if (max == SIZE_MAX)
      snprintf(why, why_len, "%s=%s: expected a number >= %zu (suffix k, m, g)",
               name, s, min);
    else
      snprintf(why, why_len,
               "%s=%s: expected a number from %zu to %zu (suffix k, m, g)",
               name, s, min, max);
    return NX_EINVAL;
  }
  *out = (size_t)(v << shift);
  return 0;
}

#endif
