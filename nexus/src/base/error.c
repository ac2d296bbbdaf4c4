/* nx_strerror and nx_err_name, generated from the NX_ERRNO_MAP list, and
 * nx_version. */
#include "nexus.h"

const char *nx_strerror(int err) {
  switch (err) {
  case 0: return "success";
#define NX_ERR_MSG(name, value, msg)                                           \
  case value: return msg;
    NX_ERRNO_MAP(NX_ERR_MSG)
#undef NX_ERR_MSG
  default: return "unknown error";
  }
}

const char *nx_err_name(int err) {
  switch (err) {
  case 0: return "OK";
#define NX_ERR_NAME(name, value, msg)                                          \
  case value: return #name;
    NX_ERRNO_MAP(NX_ERR_NAME)
#undef NX_ERR_NAME
  default: return "UNKNOWN";
  }
}

const char *nx_version(void) { return NX_VERSION_STRING; }
