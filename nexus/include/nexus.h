/* The nexus API: nodes, contexts, threads, global pointers and remote service
 * requests. */
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
#include "nexus/version.h"

#endif /* NEXUS_H */
