/* nxinfo: lists the protocol modules this process finds, which loaded, which were skipped and why. */
#include <stdio.h>

#include "nexus.h"

int main(void) {
  int r = nx_init(NULL, NULL);
  if (r < 0) {
    fprintf(stderr, "nxinfo: nx_init failed: %s (%s)\n", nx_strerror(r),
            nx_err_name(r));
    return 1;
  }
  nx_node_t node;
  nx_node_self(&node);
  printf("nexus %d.%d on %s\n", NX_VERSION_MAJOR, NX_VERSION_MINOR, node.host);
  int n = nx_module_count();
  printf("%-8s %-8s %-5s %-4s %-6s %s\n", "module", "status", "rank", "cost",
         "wire", "details");
  for (int i = 0; i < n; i++) {
    nx_module_info_t m;
    if (nx_module_info(i, &m) < 0)
      continue;
    if (m.loaded) {
      printf("%-8s %-8s %-5d %-4d %-6u %s\n", m.name, "loaded", m.rank, m.cost,
             m.wire_version, m.path);
      printf("%-8s %-8s backend: %s; descriptor: %s\n", "", "",
             m.backend[0] ? m.backend : "-", m.descriptor);
    } else {
      printf("%-8s %-8s %-5s %-4s %-6s %s: %s\n", m.name, "skipped", "-", "-",
             "-", nx_err_name(m.error), m.reason);
    }
  }
  nx_finalize();
  return 0;
}
