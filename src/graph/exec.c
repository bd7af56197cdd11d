/*
 * The executor: thread pool, kernel level, mode, fusion rules and the buffers
 * the programs of one model share. Programs (program.c) grow the buffers when
 * they are compiled; running them reuses what is there.
 */
#include "graph/exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/status.h"
#include "graph/ops_init.h"
#include "graph/program.h"

static const char *const mode_names[] = {
    [LOOM_MODE_STEP_BY_STEP] = "step_by_step",
    [LOOM_MODE_FUSED] = "fused",
    [LOOM_MODE_FUSED_WITH_CHECKPOINTS] = "fused_with_checkpoints",
};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == LOOM_MODE_COUNT, "mode names");

const char *loom_mode_name(loom_exec_mode m) {
    return (unsigned)m < LOOM_MODE_COUNT ? mode_names[m] : "unknown";
}

loom_status loom_mode_parse(const char *name, loom_exec_mode *out) {
    for (int i = 0; i < LOOM_MODE_COUNT; i++)
        if (name && strcmp(name, mode_names[i]) == 0) {
            *out = (loom_exec_mode)i;
            return LOOM_OK;
        }
    return loom_set_error(LOOM_ERR_INVALID_ARG,
                          "unknown mode '%s' (expected step_by_step, fused or fused_with_checkpoints)",
                          name ? name : "(null)");
}

loom_status loom_executor_init(loom_executor **out, int n_threads, loom_exec_mode mode) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "executor_init: NULL argument");
    LOOM_RETURN_IF(n_threads < 1 || n_threads > 1024, LOOM_ERR_INVALID_ARG,
                   "thread count %d out of range 1..1024", n_threads);
    LOOM_RETURN_IF((unsigned)mode >= LOOM_MODE_COUNT, LOOM_ERR_INVALID_ARG, "unknown mode %d",
                   (int)mode);
    loom_ops_init();
    loom_executor *e = calloc(1, sizeof *e);
    LOOM_RETURN_IF(!e, LOOM_ERR_NOMEM, "executor_init: out of memory");
    loom_status s = loom_pool_init(&e->pool, n_threads);
    if (s != LOOM_OK) {
        free(e);
        return s;
    }
    e->n_threads = n_threads;
    e->isa = loom_cpu_isa();
    e->mode = mode;
    e->ckpt_action = -1;
    *out = e;
    return LOOM_OK;
}

void loom_executor_free(loom_executor *e) {
    if (!e) return;
    loom_program_free(e->oneshot);
    loom_pool_free(e->pool);
    loom_free_aligned(e->arena);
    loom_free_aligned(e->ref_arena);
    loom_free_aligned(e->scratch);
    loom_free_aligned(e->shared);
    free(e->kv_save);
    free(e->dump_dir);
    loom_fusion_rules_free(e->rules);
    free(e->ckpt);
    free(e);
}

loom_status loom_executor_set_dump(loom_executor *e, const char *dir) {
    free(e->dump_dir);
    e->dump_dir = NULL;
    if (!dir) return LOOM_OK;
    if (mkdir(dir, 0777) != 0) {
        int err = errno;
        struct stat st;
        /* an existing path is fine only when it is a directory we can write into */
        if (err != EEXIST || stat(dir, &st) != 0)
            return loom_set_error(LOOM_ERR_IO, "--dump: cannot create directory '%s': %s", dir, strerror(err));
        if (!S_ISDIR(st.st_mode))
            return loom_set_error(LOOM_ERR_IO, "--dump: '%s' exists and is not a directory", dir);
        if (access(dir, W_OK | X_OK) != 0)
            return loom_set_error(LOOM_ERR_IO, "--dump: cannot write into directory '%s': %s", dir,
                                  strerror(errno));
    }
    e->dump_dir = strdup(dir);
    LOOM_RETURN_IF(!e->dump_dir, LOOM_ERR_NOMEM, "out of memory");
    e->dump_seq = 0;
    return LOOM_OK;
}

loom_status loom_exec_reserve(loom_executor *e, unsigned char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return LOOM_OK;
    loom_free_aligned(*buf);
    *buf = loom_alloc_aligned(need, LOOM_ALIGN);
    *cap = *buf ? need : 0;
    e->buffers_gen++;
    LOOM_RETURN_IF(!*buf, LOOM_ERR_NOMEM, "executor: cannot allocate %zu bytes", need);
    e->n_allocs++;
    return LOOM_OK;
}

loom_status loom_exec_reserve_scratch(loom_executor *e, size_t scratch, size_t shared) {
    if (scratch > e->scratch_cap) {
        loom_free_aligned(e->scratch);
        e->scratch = loom_alloc_aligned(scratch * (size_t)e->n_threads, LOOM_ALIGN);
        e->scratch_cap = e->scratch ? scratch : 0;
        LOOM_RETURN_IF(!e->scratch, LOOM_ERR_NOMEM, "executor: cannot allocate %zu bytes of scratch per thread",
                       scratch);
        e->n_allocs++;
    }
    return loom_exec_reserve(e, &e->shared, &e->shared_cap, shared);
}

void loom_executor_set_rules(loom_executor *e, loom_fusion_rules *r) {
    loom_fusion_rules_free(e->rules);
    e->rules = r;
}

loom_status loom_executor_load_rules(loom_executor *e, const char *path, const char *preset) {
    loom_fusion_rules *r;
    LOOM_TRY(loom_fusion_rules_load(path, &r));
    if (preset) {
        loom_status s = loom_fusion_rules_preset(r, preset);
        if (s != LOOM_OK) {
            loom_fusion_rules_free(r);
            return s;
        }
    }
    loom_executor_set_rules(e, r);
    return LOOM_OK;
}

loom_status loom_executor_rules(loom_executor *e, const loom_fusion_rules **out) {
    if (!e->rules) LOOM_TRY(loom_fusion_rules_load(NULL, &e->rules));
    *out = e->rules;
    return LOOM_OK;
}

const loom_graph *loom_executor_last_graph(const loom_executor *e) {
    return e->last ? loom_program_graph(e->last) : NULL;
}

loom_status loom_mode_resolve(const char *flag, const loom_fusion_rules *rules, loom_exec_mode *out) {
    if (flag) return loom_mode_parse(flag, out);
    const char *env = getenv("LOOM_MODE");
    if (env && *env) {
        loom_status s = loom_mode_parse(env, out);
        if (s != LOOM_OK) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", loom_last_error());
            return loom_set_error(s, "LOOM_MODE: %s", msg);
        }
        return LOOM_OK;
    }
    int m = loom_fusion_rules_mode(rules);
    *out = m >= 0 ? (loom_exec_mode)m : LOOM_MODE_FUSED;
    return LOOM_OK;
}

loom_status loom_executor_run(loom_executor *e, loom_graph *g) {
    LOOM_RETURN_IF(!e || !g, LOOM_ERR_INVALID_ARG, "executor_run: NULL argument");
    loom_program_free(e->oneshot);
    e->oneshot = NULL;
    LOOM_TRY(loom_program_compile_graph(e, g, &e->oneshot));
    loom_program_set_timing(e->oneshot, 1);
    LOOM_TRY(loom_program_run(e->oneshot, NULL));
    loom_program_account(e->oneshot); /* the node stats callers read (cheap next to a compile) */
    return LOOM_OK;
}

void loom_executor_print_checkpoints(const loom_executor *e, FILE *f) {
    fprintf(f, "checkpoints (each fused op vs its unfused decomposition from the same inputs; tolerance relative "
               "to max(1, |ref|): %.3g, or f16's / bf16's where attention reads such a KV cache, f16's for i8):\n",
            loom_fusion_rules_checkpoint_tol(e->rules));
    if (e->ckpt_unchecked)
        fprintf(f, "  (%d fused ops have no decomposition within their layer and are not checked)\n",
                e->ckpt_unchecked);
    fprintf(f, "  %-12s %6s %12s %12s %10s %8s\n", "checkpoint", "runs", "max abs", "max rel", "tolerance",
            "beyond");
    for (int i = 0; i < e->n_ckpt; i++)
        if (e->ckpt[i].runs)
            fprintf(f, "  %-12s %6d %12.3e %12.3e %10.3g %8d\n", e->ckpt[i].name, e->ckpt[i].runs,
                    e->ckpt[i].max_abs, e->ckpt[i].max_rel, e->ckpt[i].tol, e->ckpt[i].failed_runs);
}
