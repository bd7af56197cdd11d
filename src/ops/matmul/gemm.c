/* gemm path of the matmul family. Until its optimised kernels land, it runs the
 * reference product on this thread's columns, so the dispatch is complete. */
#include "ops/matmul/internal.h"

size_t loom_gemm_scratch_size(const loom_matmul_args *a) { return (size_t)a->K * sizeof(float) + 64; }

loom_status loom_gemm_run(const loom_matmul_args *a, loom_isa isa, int ith, int nth, void *scratch) {
    (void)isa;
    int64_t lo, hi;
    loom_matmul_split(a->N, 1, ith, nth, &lo, &hi);
    loom_matmul_ref_block(a, 0, a->M, lo, hi, scratch);
    return LOOM_OK;
}
