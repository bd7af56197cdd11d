#include "graph/ops_init.h"

#include <pthread.h>

#include "fused/fused_graph_ops.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void) { loom_fused_register_ops(loom_op_table_mutable()); }

void loom_ops_init(void) { pthread_once(&once, init_once); }
