/* One table of every NX_* environment variable: its kind, default, bounds and
 * meaning, and the parsers that read them. */
#ifndef NXU_OPT_H
#define NXU_OPT_H

#include <stddef.h>
#include <stdint.h>

enum nxu_opt_kind {
  NXU_OPT_SIZE,   /* bytes: digits with an optional k, m or g suffix */
  NXU_OPT_UINT,   /* a decimal number */
  NXU_OPT_CHOICE, /* one of the words in `choices` ("a|b|c") */
  NXU_OPT_HEX,    /* exactly 2 * max hex digits (a key of max bytes) */
  NXU_OPT_TEXT    /* free text, checked by whoever reads it */
};

struct nxu_opt {
  const char *name;
  enum nxu_opt_kind kind;
  const char *def;     /* the default, as nxinfo --config shows it */
  uint64_t def_value;  /* SIZE and UINT: the default as a number */
  uint64_t min, max;   /* SIZE and UINT: bounds; HEX: max is the bytes */
  const char *choices; /* CHOICE: the words, the first is the default */
  const char *who;     /* "core", "nxrun" or a module's name */
  const char *meaning;
};

/* The table, in the order nxinfo --config prints it. */
extern const struct nxu_opt nxu_opts[];
extern const size_t nxu_opt_count;

/* The entry for `name`, or NULL. */
const struct nxu_opt *nxu_opt_find(const char *name);

/* Checks `value` against entry `o`; 0, or NX_EINVAL with a one-line reason
 * in `why` naming the variable and what it expects. */
int nxu_opt_check(const struct nxu_opt *o, const char *value, char *why,
                  size_t why_len);

/* Checks every variable of the table that `who` reads ("core", a module's
 * name; NULL: all) and that is set in the environment; the first
 * malformed one gives NX_EINVAL and its reason. */
int nxu_opt_check_all(const char *who, char *why, size_t why_len);

/* Reads a SIZE or UINT variable: its default when unset or empty, else
 * the checked value. NX_EINVAL (reason in `why`) for a malformed value or
 * a name the table lacks. */
int nxu_opt_number(const char *name, uint64_t *out, char *why, size_t why_len);

/* nxu_opt_number for a size_t. */
int nxu_opt_size(const char *name, size_t *out, char *why, size_t why_len);

/* Reads a CHOICE variable as the index of its word in `choices` (0, the
 * default, when unset or empty). */
int nxu_opt_choice(const char *name, int *out, char *why, size_t why_len);

#endif /* NXU_OPT_H */
