/* Error codes of the nexus API: one X-macro list generates the enum,
 * nx_strerror and nx_err_name. */
#ifndef NEXUS_ERRORS_H
#define NEXUS_ERRORS_H

#include "export.h"

#include <errno.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible call returns 0 on success or one of these negative codes.
 * Codes with a POSIX equivalent use -errno so they read naturally in logs. */
#define NX_ERRNO_MAP(XX)                                                       \
  XX(EINVAL, -EINVAL, "invalid argument")                                      \
  XX(ENOMEM, -ENOMEM, "out of memory")                                         \
  XX(EAGAIN, -EAGAIN, "resource temporarily unavailable")                      \
  XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                                       \
  XX(EBUSY, -EBUSY, "resource busy")                                           \
  XX(ENOENT, -ENOENT, "no such entry")                                         \
  XX(EEXIST, -EEXIST, "already exists")                                        \
  XX(ENOTSUP, -ENOTSUP, "operation not supported")                             \
  XX(EPROTO, -EPROTO, "protocol error")                                        \
  XX(ECONNRESET, -ECONNRESET, "connection reset by peer")                      \
  XX(EACCES, -EACCES, "permission denied")                                     \
  XX(EIO, -EIO, "i/o error")                                                   \
  XX(ERANGE, -ERANGE, "read past the end of the buffer")                       \
  XX(EMSGSIZE, -EMSGSIZE, "message too long")                                  \
  XX(ECANCELED, -ECANCELED, "operation canceled")                              \
  XX(ENOTINIT, -4001, "nexus is not initialised")                              \
  XX(ENOHANDLER, -4002, "no such handler")                                     \
  XX(ECOLLISION, -4003, "handler id collides with another name")               \
  XX(ENOCONTEXT, -4004, "no such context, or it was destroyed")                \
  XX(EUNREACH, -4005, "no protocol reaches the destination")                   \
  XX(EABI, -4006, "protocol module has the wrong ABI version")                 \
  XX(EMODULE, -4007, "protocol module could not be loaded")                    \
  XX(ETYPE, -4008, "value of a different type or size in the buffer")          \
  XX(EPEERDEAD, -4009, "peer context is dead")                                 \
  XX(EFINALIZED, -4010, "nexus is shutting down")

typedef enum nx_errno {
#define NX_ERR_ENUM(name, value, msg) NX_##name = (value),
  NX_ERRNO_MAP(NX_ERR_ENUM)
#undef NX_ERR_ENUM
      NX_OK = 0
} nx_errno_t;

/* Returns a short English description of `err` ("unknown error" if unknown). */
NX_EXTERN const char *nx_strerror(int err);

/* Returns the symbolic name of `err` without the prefix, e.g. "EINVAL". */
NX_EXTERN const char *nx_err_name(int err);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_ERRORS_H */
