/* What the core gives protocol modules (core_api.c): struct nx_core_api. */
#ifndef NXI_CORE_API_H
#define NXI_CORE_API_H

#include "base/rt.h"

extern const struct nx_core_api nxi_core_api;

#endif /* NXI_CORE_API_H */
