/* NX_EXTERN: marks the functions libnexus exports; everything else in the
 * library is hidden. */
#ifndef NEXUS_EXPORT_H
#define NEXUS_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define NX_EXTERN __attribute__((visibility("default")))
#else
#define NX_EXTERN
#endif

#endif /* NEXUS_EXPORT_H */
