/*
 * Fused transformer operators (the ops-transformer part): add + RMSNorm,
 * SwiGLU, the whole FFN block, the KV-cache write and QKV + RoPE. Each op has
 *   - a params struct with defaults (loom_<op>_default_params),
 *   - a thread-level kernel (ith, nth, scratch) for the graph executor, whose
 *     results are bit-identical for any nth,
 *   - a convenience wrapper that validates tensors and runs on a loom_pool
 *     (NULL = the calling thread only): the public op (include/loom_ops.h),
 *   - a reference decomposition into primitive reference ops (src/fused/ref/).
 */
#ifndef LOOM_FUSED_FUSED_H
#define LOOM_FUSED_FUSED_H

#include "base/cpu.h"
#include "base/threadpool.h"
#include "fused/attention.h"
#include "loom.h"
#include "loom_ops.h"
#include "ops/matmul/matmul.h"

/* The public ops (add + RMSNorm, SwiGLU, the FFN, the KV-cache write, QKV +
 * RoPE), their params and defaults are declared in include/loom_ops.h;
 * below are the thread-level pieces the graph executor runs. */

/* Thread-level pieces of loom_ffn, for the graph executor. */
typedef struct loom_ffn_args {
    const float *x;   int64_t ldx;      /* [M, D] */
    const void  *w_gate, *w_up;         /* [H, D] rows, row stride ldw (elements) */
    loom_dtype   wtype; int64_t ldw;
    float       *h;   int64_t ldh;      /* [M, H] */
    int64_t      M, D, H;
    loom_ffn_params p;
} loom_ffn_args;

size_t loom_ffn_gate_up_scratch(const loom_ffn_args *a);
loom_status loom_ffn_gate_up_kernel(const loom_ffn_args *a, loom_isa isa, int ith, int nth,
                                    void *scratch);


#endif
