/* Nodes: this host, or nodes a module's launcher places processes on. */
#ifndef NXI_NODE_H
#define NXI_NODE_H

#include "base/rt.h"

/* Whether processes for `node` are started here with fork/exec. */
int nxi_node_is_local(const nx_node_t *node);
/* Whether a node spec names the PMIx server's nodes ("pmix", "pmix:..."). */
int nxi_node_spec_pmix(const char *spec);

#endif /* NXI_NODE_H */
