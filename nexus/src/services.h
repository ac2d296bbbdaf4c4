/* The services the core gives protocol modules (struct nx_core_api). */
#ifndef NXI_SERVICES_H
#define NXI_SERVICES_H

#include "rt.h"

extern const struct nx_core_api nxi_core_api;

#endif /* NXI_SERVICES_H */
