/* The nexus API: nodes, contexts, threads, global pointers and remote service requests. */
#ifndef NEXUS_H
#define NEXUS_H

#include "nexus/errors.h"
#include "nexus/thread.h"
#include "nexus/buffer.h"
#include "nexus/gp.h"
#include "nexus/context.h"
#include "nexus/rsr.h"
#include "nexus/runtime.h"
#include "nexus/process.h"

#define NX_VERSION_MAJOR 0
#define NX_VERSION_MINOR 1

#endif /* NEXUS_H */
