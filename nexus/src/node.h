/* Nodes: this host, or nodes a module's launcher places processes on. */
#ifndef NXI_NODE_H
#define NXI_NODE_H

#include "rt.h"

/* Whether processes for `node` are started here with fork/exec. */
int nxi_node_is_local(const nx_node_t *node);

#endif /* NXI_NODE_H */
