/* Stop strings: generated text is released for printing only once it cannot
 * be the beginning of a stop string, so a stop string is never printed, in
 * whatever pieces the tokens split it. The API is public (loom.h:
 * loom_stop_strings_init / _push / _flush / _free); stop_strings.c has it. */
#ifndef LOOM_MODEL_STOP_STRINGS_H
#define LOOM_MODEL_STOP_STRINGS_H

#include "loom.h"

#endif
