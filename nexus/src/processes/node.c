/* Nodes (node.h): acquiring them from a spec ("localhost", or a launcher
 * module's "mpi:host=a,b") and what they name. */
#include "processes/node.h"

#include <stdio.h>
#include <unistd.h>

#include "processes/boot.h"
#include "modules/module.h"

static int spec_is_local(const char *spec) {
  return strcmp(spec, "localhost") == 0 || strcmp(spec, "local") == 0;
}

int nx_nodes_acquire(const char *spec, int count, nx_node_t *nodes) {
  if (spec == NULL || count < 0 || (count > 0 && nodes == NULL))
    return NX_EINVAL;
  if (!spec_is_local(spec)) {
    /* Nodes a module's launcher places processes on: the node keeps the
     * spec, which nx_context_create hands to the module. */
    if (spec[0] == '\0' || spec[0] == ':')
      return NX_EINVAL;
    /* The node keeps the spec in `host`: too long a one is refused whatever
     * module it names, loaded or not. */
    if (strlen(spec) >= sizeof(nodes[0].host)) {
      nxi_log(0, NULL, "nodes \"%.32s...\": longer than %zu characters", spec,
              sizeof(nodes[0].host) - 1);
      return NX_EINVAL;
    }
    if (!nxi_ready())
      return NX_ENOTINIT;
    struct nxi_module *m = nxi_module_launcher(spec);
    if (m == NULL && nxi_node_spec_pmix(spec)) {
      /* Processes started through the PMIx server this process joined
       * (parent.c, PMIx_Spawn): "pmix" or "pmix:host=NAME". */
      if (!nxi_boot_pmix()) {
        nxi_log(0, NULL,
                "nodes \"%s\": this process runs under no PMIx server (its "
                "bootstrap is \"%s\"): PMIx starts no process for it",
                spec, nx_bootstrap());
        return NX_ENOTSUP;
      }
      if (strcmp(spec, "pmix") != 0 &&
          (strncmp(spec, "pmix:host=", 10) != 0 || spec[10] == '\0' ||
           strchr(spec + 10, ',') != NULL)) {
        nxi_log(0, NULL,
                "nodes \"%s\": a PMIx node is \"pmix\" or "
                "\"pmix:host=NAME\"",
                spec);
        return NX_EINVAL;
      }
    } else if (m == NULL) {
      nxi_log(0, NULL,
              "nodes \"%s\": no loaded protocol module named \"%.*s\" starts "
              "processes (nxinfo tells which loaded and why not)",
              spec, (int)strcspn(spec, ":"), spec);
      return NX_ENOTSUP;
    }
    char why[256] = "not accepted by the module";
    int r =
        m == NULL ? 0 : m->launch->node_spec(m->state, spec, why, sizeof(why));
    if (r < 0) {
      nxi_log(0, NULL, "nodes \"%s\": %s", spec, why);
      return r;
    }
  }
  for (int i = 0; i < count; i++) {
    memset(&nodes[i], 0, sizeof(nodes[i]));
    nodes[i].id = (uint32_t)i;
    snprintf(nodes[i].host, sizeof(nodes[i].host), "%s",
             spec_is_local(spec) ? "localhost" : spec);
  }
  return 0;
}

int nx_node_release(nx_node_t *node) { return node == NULL ? NX_EINVAL : 0; }

int nx_node_self(nx_node_t *node) {
  if (node == NULL)
    return NX_EINVAL;
  if (!nxi_ready())
    return NX_ENOTINIT;
  memset(node, 0, sizeof(*node));
  gethostname(node->host, sizeof(node->host) - 1);
  node->id = 0;
  return 0;
}

int nxi_node_spec_pmix(const char *spec) {
  return strncmp(spec, "pmix", 4) == 0 && (spec[4] == '\0' || spec[4] == ':');
}

int nxi_node_is_local(const nx_node_t *node) {
  char host[64] = {0};
  gethostname(host, sizeof(host) - 1);
  return spec_is_local(node->host) || strcmp(node->host, host) == 0;
}
