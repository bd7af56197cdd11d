/* loom tune: the kernel variants this CPU runs, how they were chosen, and the
 * timings behind the choice (docs/tuning.md). Reads the wisdom file and times
 * what it lacks; --remeasure times every family again and rewrites it. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "cli.h"

int cmd_tune(int argc, char **argv) {
    int remeasure = 0;
    const char *force = NULL;
    const arg_opt opts[] = {
        {NULL, "--remeasure", ARG_FLAG, &remeasure, NULL,
         "time every family again and rewrite the wisdom file (unless LOOM_WISDOM=readonly)"},
        {NULL, "--force", ARG_STR, &force, "LIST",
         "family=variant[,...]: use these (as LOOM_VARIANTS) and show the others"},
    };
    int r = args_parse("tune", "[--remeasure] [--force family=variant,...]", opts,
                       (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (force && loom_variants_force(force) != LOOM_OK) return cli_fail("tune", "--force");
    if (loom_tune(LOOM_TUNE_ALL, remeasure) != LOOM_OK) return cli_fail("tune", "timing the variants failed");
    loom_tune_print(stdout);
    return 0;
}
