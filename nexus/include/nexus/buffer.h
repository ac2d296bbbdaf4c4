/* Typed, packed message buffers: sizing, put/get of every basic type,
 * retain/release. */
#ifndef NEXUS_BUFFER_H
#define NEXUS_BUFFER_H

#include "export.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nx_buffer nx_buffer_t;
struct nx_gp;

/* Data-format tags. Every buffer carries its writer's tag; a reader whose
 * native format differs converts on get (receiver makes right). */
enum nx_format {
  NX_FORMAT_LITTLE = 1, /* little-endian integers, IEEE 754 floats */
  NX_FORMAT_BIG = 2     /* big-endian integers, IEEE 754 floats */
};

/* The format of this machine. */
NX_EXTERN int nx_format_native(void);

/* Bytes that an array of `count` values of a type takes in a buffer,
 * including the type tag and count (a buffer checks types on get); a single
 * value put with nx_put_<type> takes 4 bytes less. Use these for size
 * hints; a size hint is only a hint, buffers grow as needed. */
NX_EXTERN size_t nx_sizeof_int8(size_t count);
NX_EXTERN size_t nx_sizeof_int16(size_t count);
NX_EXTERN size_t nx_sizeof_int32(size_t count);
NX_EXTERN size_t nx_sizeof_int64(size_t count);
NX_EXTERN size_t nx_sizeof_float(size_t count);
NX_EXTERN size_t nx_sizeof_double(size_t count);
NX_EXTERN size_t nx_sizeof_char(size_t count);
NX_EXTERN size_t nx_sizeof_bytes(size_t count);
/* Bytes a global pointer takes (it carries its protocol descriptors). */
NX_EXTERN size_t nx_sizeof_gp(const struct nx_gp *gp);

/* Creates a stand-alone buffer (not bound to an RSR) for packing and
 * unpacking, in this machine's format. Returns 0, NX_EINVAL (`buf` NULL),
 * NX_ENOMEM (also for a size hint above SIZE_MAX / 2) or NX_ENOTINIT. */
NX_EXTERN int nx_buffer_create(size_t size_hint, nx_buffer_t **buf);

/* Makes the buffer write in `format` (NX_FORMAT_*). Only allowed while the
 * buffer is empty. Returns 0, NX_EBUSY (the buffer holds values already) or
 * NX_EINVAL (NULL, a bad format, or a received buffer, which is read-only).
 * Used to exercise receiver-makes-right on a machine of one format. */
NX_EXTERN int nx_buffer_set_format(nx_buffer_t *buf, int format);

/* The format tag the buffer's contents are in (NX_FORMAT_*), or NX_EINVAL
 * for NULL. */
NX_EXTERN int nx_buffer_format(const nx_buffer_t *buf);

/* The id (as nx_context_id gives it) of the context that sent the RSR
 * whose buffer this is: the context the sending thread ran in at
 * nx_rsr_send (nx_context_self), carried in the frame header, so a
 * handler need not pack it; through a gateway too. 0 for a buffer that
 * was not delivered to a handler (stand-alone, not yet sent) and for NULL.
 * Only an id: a reply still needs a gp to the sender. */
NX_EXTERN uint64_t nx_buffer_source(const nx_buffer_t *buf);

/* Moves the read position back to the first value. Returns 0 or NX_EINVAL
 * (NULL). */
NX_EXTERN int nx_buffer_rewind(nx_buffer_t *buf);

/* Bytes packed into the buffer, and bytes not yet read. */
NX_EXTERN size_t nx_buffer_length(const nx_buffer_t *buf);
NX_EXTERN size_t nx_buffer_remaining(const nx_buffer_t *buf);

/* What receive placement (nx_handler_set_place) did with a received
 * buffer's trailing array: 1 placed where the callback said; 0 not placed
 * (no callback, no trailing array, a module that does not place, or the
 * callback declined); a negative NX_E* code when the callback failed with
 * it or named too little memory (NX_EMSGSIZE). The values read the same in
 * every case. NX_EINVAL for a NULL buffer or one not received. */
NX_EXTERN int nx_buffer_placement(const nx_buffer_t *buf);

/* The packed contents of a buffer, in its format (nx_buffer_format), for a
 * program that moves them by other means (a file, a pipe, a launcher).
 * `*data` stays valid until the buffer changes or is released (a received
 * buffer still held at nx_finalize: until then, when its payload is
 * copied out of the protocol module's memory). Returns 0 or NX_EINVAL (a
 * NULL argument, an RSR buffer holding values put by reference, or a
 * received one whose trailing array was placed: neither is in its
 * contents). */
NX_EXTERN int nx_buffer_bytes(const nx_buffer_t *buf, const void **data,
                              size_t *len);

/* Makes a stand-alone buffer holding a copy of `len` bytes that another
 * buffer's nx_buffer_bytes gave, in `format`, ready to read from the start.
 * Malformed contents are found by the gets, as for any received buffer.
 * Returns 0, NX_EINVAL, NX_ENOMEM or NX_ENOTINIT. */
NX_EXTERN int nx_buffer_from_bytes(const void *data, size_t len, int format,
                                   nx_buffer_t **buf);

/* Keeps a buffer alive past the handler's return (no copy). Each retain
 * needs one release. A handler's buffer is released by the runtime when the
 * handler returns, so a handler releases only what it retained. Only for a
 * buffer the caller holds or its handler's own: one already sent is freed
 * memory. Returns 0 or NX_EINVAL (NULL, or an RSR buffer not yet sent:
 * nx_rsr_send takes it). */
NX_EXTERN int nx_buffer_retain(nx_buffer_t *buf);

/* Drops one reference of the program's; the last one frees the buffer. An
 * RSR buffer that will not be sent is released with this too. A buffer the
 * program holds no reference to is refused with NX_EINVAL and never read:
 * one given to nx_rsr_send (the runtime's from then on, freed at any time),
 * one released already, a handler's buffer the handler did not retain.
 * Returns 0 or NX_EINVAL. */
NX_EXTERN int nx_buffer_release(nx_buffer_t *buf);

/* Put: append one value, or `count` values. Return 0, NX_EINVAL (NULL, a
 * NULL `v` with count != 0, count > 2^32 - 1, or a received buffer, which is
 * read-only) or NX_ENOMEM. */
NX_EXTERN int nx_put_int8(nx_buffer_t *buf, int8_t v);
NX_EXTERN int nx_put_uint8(nx_buffer_t *buf, uint8_t v);
NX_EXTERN int nx_put_int16(nx_buffer_t *buf, int16_t v);
NX_EXTERN int nx_put_uint16(nx_buffer_t *buf, uint16_t v);
NX_EXTERN int nx_put_int32(nx_buffer_t *buf, int32_t v);
NX_EXTERN int nx_put_uint32(nx_buffer_t *buf, uint32_t v);
NX_EXTERN int nx_put_int64(nx_buffer_t *buf, int64_t v);
NX_EXTERN int nx_put_uint64(nx_buffer_t *buf, uint64_t v);
NX_EXTERN int nx_put_float(nx_buffer_t *buf, float v);
NX_EXTERN int nx_put_double(nx_buffer_t *buf, double v);
NX_EXTERN int nx_put_char(nx_buffer_t *buf, char v);

NX_EXTERN int nx_put_int8_array(nx_buffer_t *buf, const int8_t *v,
                                size_t count);
NX_EXTERN int nx_put_uint8_array(nx_buffer_t *buf, const uint8_t *v,
                                 size_t count);
NX_EXTERN int nx_put_int16_array(nx_buffer_t *buf, const int16_t *v,
                                 size_t count);
NX_EXTERN int nx_put_uint16_array(nx_buffer_t *buf, const uint16_t *v,
                                  size_t count);
NX_EXTERN int nx_put_int32_array(nx_buffer_t *buf, const int32_t *v,
                                 size_t count);
NX_EXTERN int nx_put_uint32_array(nx_buffer_t *buf, const uint32_t *v,
                                  size_t count);
NX_EXTERN int nx_put_int64_array(nx_buffer_t *buf, const int64_t *v,
                                 size_t count);
NX_EXTERN int nx_put_uint64_array(nx_buffer_t *buf, const uint64_t *v,
                                  size_t count);
NX_EXTERN int nx_put_float_array(nx_buffer_t *buf, const float *v,
                                 size_t count);
NX_EXTERN int nx_put_double_array(nx_buffer_t *buf, const double *v,
                                  size_t count);
NX_EXTERN int nx_put_char_array(nx_buffer_t *buf, const char *v, size_t count);
/* Opaque bytes: never converted. */
NX_EXTERN int nx_put_bytes(nx_buffer_t *buf, const void *v, size_t count);
/* A global pointer, with its protocol descriptors. */
NX_EXTERN int nx_put_gp(nx_buffer_t *buf, const struct nx_gp *gp);

/* Put by reference (zero copy): append `count` values that stay in the
 * caller's memory `v`; the runtime reads them while it sends the RSR, and
 * calls `fn(arg, v, status)` exactly once when it will not read them again:
 * status 0 once the frame is sent, or once the values were copied (then
 * the RSR's fate is reported as for any RSR); a negative code when the RSR
 * failed before that (NX_EPEERDEAD, NX_EUNREACH, ...) or the buffer was
 * released unsent (NX_ECANCELED). Until then `v` must stay valid and unchanged.
 * `fn` may run on any thread, also inside nx_rsr_send or nx_buffer_release
 * before they return; it must not block. Only for RSR buffers
 * (nx_rsr_init): NX_EINVAL for a stand-alone or received buffer, NULL `fn`
 * or `v` (with count != 0), count > 2^32 - 1. A module that cannot send
 * from several places, or a buffer written in a foreign format
 * (nx_buffer_set_format), copies the values once instead, still calling
 * `fn` when the buffer is done; so does a buffer past NX_BUFFER_REFS_MAX
 * references. On the wire the array is the same values the copying put
 * writes, laid out so that each element lands aligned for its type at the
 * receiver (docs/design.md). Returns 0, NX_EINVAL or NX_ENOMEM; on error
 * `fn` is not called. */
typedef void (*nx_release_fn)(void *arg, const void *v, int status);
#define NX_BUFFER_REFS_MAX 8
NX_EXTERN int nx_put_bytes_ref(nx_buffer_t *buf, const void *v, size_t count,
                               nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_int8_array_ref(nx_buffer_t *buf, const int8_t *v,
                                    size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_uint8_array_ref(nx_buffer_t *buf, const uint8_t *v,
                                     size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_int16_array_ref(nx_buffer_t *buf, const int16_t *v,
                                     size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_uint16_array_ref(nx_buffer_t *buf, const uint16_t *v,
                                      size_t count, nx_release_fn fn,
                                      void *arg);
NX_EXTERN int nx_put_int32_array_ref(nx_buffer_t *buf, const int32_t *v,
                                     size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_uint32_array_ref(nx_buffer_t *buf, const uint32_t *v,
                                      size_t count, nx_release_fn fn,
                                      void *arg);
NX_EXTERN int nx_put_int64_array_ref(nx_buffer_t *buf, const int64_t *v,
                                     size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_uint64_array_ref(nx_buffer_t *buf, const uint64_t *v,
                                      size_t count, nx_release_fn fn,
                                      void *arg);
NX_EXTERN int nx_put_float_array_ref(nx_buffer_t *buf, const float *v,
                                     size_t count, nx_release_fn fn, void *arg);
NX_EXTERN int nx_put_double_array_ref(nx_buffer_t *buf, const double *v,
                                      size_t count, nx_release_fn fn,
                                      void *arg);
NX_EXTERN int nx_put_char_array_ref(nx_buffer_t *buf, const char *v,
                                    size_t count, nx_release_fn fn, void *arg);

/* Get: read the next value into `*v`, or `count` values into `v[]`,
 * converting from the buffer's format. Return 0; NX_EINVAL for a NULL
 * argument or an RSR buffer not yet sent (write-only); NX_ERANGE when the
 * buffer holds too few bytes; NX_ETYPE when the next value has another
 * type, or an array of another length; NX_EPROTO when the data is
 * malformed. On error nothing is read: the buffer stays usable at the same
 * position. */
NX_EXTERN int nx_get_int8(nx_buffer_t *buf, int8_t *v);
NX_EXTERN int nx_get_uint8(nx_buffer_t *buf, uint8_t *v);
NX_EXTERN int nx_get_int16(nx_buffer_t *buf, int16_t *v);
NX_EXTERN int nx_get_uint16(nx_buffer_t *buf, uint16_t *v);
NX_EXTERN int nx_get_int32(nx_buffer_t *buf, int32_t *v);
NX_EXTERN int nx_get_uint32(nx_buffer_t *buf, uint32_t *v);
NX_EXTERN int nx_get_int64(nx_buffer_t *buf, int64_t *v);
NX_EXTERN int nx_get_uint64(nx_buffer_t *buf, uint64_t *v);
NX_EXTERN int nx_get_float(nx_buffer_t *buf, float *v);
NX_EXTERN int nx_get_double(nx_buffer_t *buf, double *v);
NX_EXTERN int nx_get_char(nx_buffer_t *buf, char *v);

NX_EXTERN int nx_get_int8_array(nx_buffer_t *buf, int8_t *v, size_t count);
NX_EXTERN int nx_get_uint8_array(nx_buffer_t *buf, uint8_t *v, size_t count);
NX_EXTERN int nx_get_int16_array(nx_buffer_t *buf, int16_t *v, size_t count);
NX_EXTERN int nx_get_uint16_array(nx_buffer_t *buf, uint16_t *v, size_t count);
NX_EXTERN int nx_get_int32_array(nx_buffer_t *buf, int32_t *v, size_t count);
NX_EXTERN int nx_get_uint32_array(nx_buffer_t *buf, uint32_t *v, size_t count);
NX_EXTERN int nx_get_int64_array(nx_buffer_t *buf, int64_t *v, size_t count);
NX_EXTERN int nx_get_uint64_array(nx_buffer_t *buf, uint64_t *v, size_t count);
NX_EXTERN int nx_get_float_array(nx_buffer_t *buf, float *v, size_t count);
NX_EXTERN int nx_get_double_array(nx_buffer_t *buf, double *v, size_t count);
NX_EXTERN int nx_get_char_array(nx_buffer_t *buf, char *v, size_t count);
NX_EXTERN int nx_get_bytes(nx_buffer_t *buf, void *v, size_t count);
/* Get in place (zero copy): `*v` points at the next `count` values inside
 * the buffer, aligned for their type and in this machine's byte order
 * (converted in place if the sender's order differs). Valid while the
 * buffer is held: a handler's buffer until the handler returns, or until
 * the matching nx_buffer_release after nx_buffer_retain, or nx_finalize if
 * that comes first (a payload still held then is copied out of the
 * protocol module's memory); reading it later is a use after free. Any
 * array reads this way, whichever put wrote it; one that a copying put left
 * unaligned for its type is copied once into memory the buffer owns
 * (nx_put_*_ref never leaves one unaligned). The same errors as the copying
 * gets, and NX_ENOMEM when that copy cannot be made; `*v` is written only
 * on success. */
NX_EXTERN int nx_get_bytes_ptr(nx_buffer_t *buf, const void **v, size_t count);
NX_EXTERN int nx_get_int8_array_ptr(nx_buffer_t *buf, const int8_t **v,
                                    size_t count);
NX_EXTERN int nx_get_uint8_array_ptr(nx_buffer_t *buf, const uint8_t **v,
                                     size_t count);
NX_EXTERN int nx_get_int16_array_ptr(nx_buffer_t *buf, const int16_t **v,
                                     size_t count);
NX_EXTERN int nx_get_uint16_array_ptr(nx_buffer_t *buf, const uint16_t **v,
                                      size_t count);
NX_EXTERN int nx_get_int32_array_ptr(nx_buffer_t *buf, const int32_t **v,
                                     size_t count);
NX_EXTERN int nx_get_uint32_array_ptr(nx_buffer_t *buf, const uint32_t **v,
                                      size_t count);
NX_EXTERN int nx_get_int64_array_ptr(nx_buffer_t *buf, const int64_t **v,
                                     size_t count);
NX_EXTERN int nx_get_uint64_array_ptr(nx_buffer_t *buf, const uint64_t **v,
                                      size_t count);
NX_EXTERN int nx_get_float_array_ptr(nx_buffer_t *buf, const float **v,
                                     size_t count);
NX_EXTERN int nx_get_double_array_ptr(nx_buffer_t *buf, const double **v,
                                      size_t count);
NX_EXTERN int nx_get_char_array_ptr(nx_buffer_t *buf, const char **v,
                                    size_t count);

/* The gp is written only on success and must be released with
 * nx_gp_release. The same errors as the copying gets (NX_ETYPE: the next
 * value is not a gp; NX_ERANGE: a truncated descriptor list; NX_EPROTO: a
 * malformed one, or a gp to a context without one), and NX_ENOMEM. */
NX_EXTERN int nx_get_gp(nx_buffer_t *buf, struct nx_gp *gp);

#ifdef __cplusplus
}
#endif

#endif /* NEXUS_BUFFER_H */
