/* What nxi_copy (nexus/src/buffers/buf.h) buys: glibc's memcpy against
 * nxi_copy, which copies with 16-byte SSE2 moves when 4 KiB <= n < 1 MiB and
 * the destination lies 1 to 63 bytes past the source within a page, timed in
 * turns in one run for the skewed copies a payload at offset 5 of a
 * page-aligned block makes (into it, and out of it into a page-aligned
 * array) and for an aligned copy, at 3 KiB to 1 MiB. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_args.h"
#include "buffers/buf.h"

/* The payload's offset in its block, as in a buffer's frame. */
#define SKEW 5
#define MAX_SIZE ((size_t)1 << 20) /* also nxi_copy's bound */

/* 3 KiB: below the SSE path's range; 1020 KiB: the top of it. */
static const size_t sizes[] = {3 * 1024,   4 * 1024,    64 * 1024,
                               128 * 1024, 1020 * 1024, MAX_SIZE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int reps = 21;
/* Bytes copied per timed run of one function at one size. */
static size_t volume = (size_t)16 << 20;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The copy is made through a pointer the compiler cannot see through, so
 * each call is a real call of the function measured. */
typedef void (*copy_fn)(void *, const void *, size_t);
static void copy_memcpy(void *d, const void *s, size_t n) { memcpy(d, s, n); }
static void copy_nxi(void *d, const void *s, size_t n) { nxi_copy(d, s, n); }
static copy_fn volatile fns[2] = {copy_memcpy, copy_nxi};

/* Microseconds per copy of `n` bytes from `src` to `dst` with fns[f]. */
static double time_copy(int f, void *dst, const void *src, size_t n) {
  copy_fn fn = fns[f];
  size_t count = volume / n;
  if (count < 8)
    count = 8;
  fn(dst, src, n); /* warm the caches and the pages */
  double t0 = now_ns();
  for (size_t i = 0; i < count; i++) {
    fn(dst, src, n);
    __asm__ volatile("" ::: "memory");
  }
  return (now_ns() - t0) / 1e3 / (double)count;
}

struct copy_case {
  const char *name;
  uint8_t *dst;
  const uint8_t *src;
  int skewed; /* a case the SSE path is for */
};

static void cpu_model(char *out, size_t len) {
  snprintf(out, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f == NULL)
    return;
  char line[256];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p != NULL) {
        p += 1 + strspn(p + 1, " \t");
        p[strcspn(p, "\n")] = '\0';
        snprintf(out, len, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

static void size_label(size_t n, char *out, size_t len) {
  if (n % ((size_t)1 << 20) == 0)
    snprintf(out, len, "%zu MiB", n >> 20);
  else
    snprintf(out, len, "%zu KiB", n >> 10);
}

static const char usage[] =
    "usage: bench_copy [--quick]\n"
    "  glibc's memcpy against nexus's nxi_copy for skewed and aligned "
    "copies,\n"
    "  3 KiB to 1 MiB, timed in turns; prints the times and the ratios.\n"
    "  --quick   fewer repetitions, less volume\n";

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      reps = 3;
      volume = (size_t)8 << 20;
    } else if (bench_is_help(argv[i])) {
      return bench_help(usage);
    } else {
      return bench_bad_arg("bench_copy", argv[i], NULL, usage);
    }
  }
  /* A page-aligned block holding a payload at offset SKEW, and two
   * page-aligned program arrays. */
  uint8_t *block = aligned_alloc(4096, MAX_SIZE + 4096);
  uint8_t *array = aligned_alloc(4096, MAX_SIZE);
  uint8_t *other = aligned_alloc(4096, MAX_SIZE);
  if (block == NULL || array == NULL || other == NULL) {
    fprintf(stderr, "bench_copy: out of memory\n");
    return 1;
  }
  memset(block, 1, MAX_SIZE + 4096);
  memset(array, 2, MAX_SIZE);
  memset(other, 3, MAX_SIZE);
  struct copy_case cases[] = {
      {"skewed put: array -> block+5", block + SKEW, array, 1},
      {"skewed get: block+5 -> array", array, block + SKEW, 1},
      {"aligned: array -> array", other, array, 0},
  };
  const size_t ncases = sizeof(cases) / sizeof(cases[0]);

  char cpu[128];
  cpu_model(cpu, sizeof(cpu));
  printf("memcpy against nxi_copy (nexus/src/buffers/buf.h); %s; median of %d "
         "runs "
         "of %zu MiB each,\nthe two in turns within each run\n",
         cpu, reps, volume >> 20);
  printf("  %-30s %-8s %6s %11s %11s %9s\n", "case", "size", "skew", "memcpy",
         "nxi_copy", "ratio");
  double ratio[3][NSIZES];
  for (size_t c = 0; c < ncases; c++) {
    for (size_t k = 0; k < NSIZES; k++) {
      size_t n = sizes[k];
      double v[2][32];
      for (int r = 0; r < reps; r++)
        for (int f = 0; f < 2; f++)
          v[f][r] = time_copy(f, cases[c].dst, cases[c].src, n);
      double med[2];
      for (int f = 0; f < 2; f++) {
        qsort(v[f], (size_t)reps, sizeof(double), cmp_double);
        med[f] = v[f][reps / 2];
      }
      ratio[c][k] = med[0] / med[1];
      char label[24];
      size_label(n, label, sizeof(label));
      unsigned skew =
          (unsigned)(((uintptr_t)cases[c].dst - (uintptr_t)cases[c].src) &
                     4095);
      printf("  %-30s %-8s %6u %8.2f us %8.2f us %8.2fx\n",
             k == 0 ? cases[c].name : "", label, skew, med[0], med[1],
             ratio[c][k]);
    }
  }
  /* The verdicts: the SSE path pays where it is taken when memcpy is more
   * than 1.1x slower there; nxi_copy must cost nothing (within 10%, the
   * noise of one run) where it is plain memcpy. */
  printf("verdicts (ratio memcpy / nxi_copy):\n");
  int pays = 0, hurts = 0;
  for (size_t c = 0; c < ncases; c++) {
    for (size_t k = 0; k < NSIZES; k++) {
      size_t n = sizes[k];
      unsigned skew =
          (unsigned)(((uintptr_t)cases[c].dst - (uintptr_t)cases[c].src) &
                     4095);
      /* nxi_copy's own test (buf.h): keep the two alike. */
      int taken = skew != 0 && skew < 64 && n >= 4096 && n < MAX_SIZE;
      char label[24];
      size_label(n, label, sizeof(label));
      if (taken) {
        int p = ratio[c][k] > 1.1;
        pays += p;
        printf("  %-30s %-8s SSE path taken: %s (%.2fx %s 1.1x)\n",
               cases[c].name, label, p ? "pays" : "does NOT pay", ratio[c][k],
               p ? ">" : "<=");
      } else {
        int h = ratio[c][k] < 0.9;
        hurts += h;
        printf("  %-30s %-8s plain memcpy (skew %u): %s (%.2fx)\n",
               cases[c].name, label, skew, h ? "HURTS" : "does not hurt",
               ratio[c][k]);
      }
    }
  }
  printf("summary: the SSE path pays in %d of its cases; nxi_copy hurts in "
         "%d of the others\n",
         pays, hurts);
  free(block);
  free(array);
  free(other);
  return 0;
}
