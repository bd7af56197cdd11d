/*
 * Measured selection of kernel variants and the wisdom file (tune.c; the
 * public entry points, loom_tune and friends, are in loom.h).
 */
#ifndef LOOM_GRAPH_TUNE_H
#define LOOM_GRAPH_TUNE_H

#include <stddef.h>

#include "base/variants.h"
#include "loom.h"

typedef enum loom_wisdom_mode {
    LOOM_WISDOM_FILE = 0,   /* read, measure what is missing, write */
    LOOM_WISDOM_READONLY,   /* read, measure what is missing, never write */
    LOOM_WISDOM_OFF,        /* neither: the default variants */
} loom_wisdom_mode;

typedef struct loom_wisdom_entry {
    int    present;
    int    choice;
    double us[LOOM_VARIANTS_MAX];  /* median microseconds; <= 0 unknown */
} loom_wisdom_entry;

typedef struct loom_wisdom {
    loom_wisdom_entry fam[LOOM_VF_COUNT];
} loom_wisdom;

/* LOOM_WISDOM's mode and the file it names (path[0] == 0: none). */
loom_wisdom_mode loom_wisdom_mode_get(char *path, size_t cap);
/* "AuthenticAMD-25-17": vendor, family, model; the file name's <cpu>. */
void loom_cpu_key(char *buf, size_t cap);
/* Parses a wisdom file's text: LOOM_ERR_FORMAT for anything but an object
 * of this format; entries of unknown families or variants, or measured by
 * another loom version, are left out (measured again). */
loom_status loom_wisdom_parse(const char *text, size_t len, loom_wisdom *w);
/* The file's text (malloc'd; NULL when out of memory); what[f], when given,
 * describes the problem family f was timed on. */
char *loom_wisdom_format(const loom_wisdom *w, const char *const *what);
/* Reads and parses path (LOOM_ERR_IO when unreadable). */
loom_status loom_wisdom_read(const char *path, loom_wisdom *w);
/* Writes w to path (its directory made if missing) through a temporary file
 * renamed over it, so a reader sees the old file or the new. */
loom_status loom_wisdom_write(const char *path, const loom_wisdom *w, const char *const *what);
/* Seconds this process spent timing variants. */
double loom_tune_seconds(void);
/* Forgets what was read and measured and returns every family not forced by
 * LOOM_VARIANTS to its default (tests). */
void loom_tune_reset_for_tests(void);

#endif
