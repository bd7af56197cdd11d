/* Vectorised primitive-op kernels: registered into the op table by level.
 * Each registered kernel is a one-line binding of a shared driver
 * (vec_ops.c) to one level's row functions (vec_<level>.c). */
#include "ops/register.h"

#include "ops/vec/vec.h"

#include "base/cpu.h"

const loom_vec_fns *loom_vec_fns_for(loom_isa isa) {
#if defined(__x86_64__)
    const loom_cpu_features *f = loom_cpu_get();
    if (isa >= LOOM_ISA_AVX512 && f->avx512f && f->avx512bw && f->avx512vl) return &loom_vec_avx512;
    if (isa >= LOOM_ISA_AVX2 && f->avx2 && f->fma) return &loom_vec_avx2;
#endif
    (void)isa;
    return &loom_vec_generic;
}

/* Defines <op>_<level>(args) = loom_vec_<op>(args, &loom_vec_<level>). */
#define BIND(op, level)                                                       \
    static loom_status op##_##level(const loom_kernel_args *a) {              \
        return loom_vec_##op(a, &loom_vec_##level);                           \
    }

#define BIND_ALL(level)                                                       \
    BIND(rms_norm, level) BIND(add, level) BIND(mul, level) BIND(silu, level) \
    BIND(softmax, level) BIND(rope, level) BIND(get_rows, level) BIND(copy, level)

#define SET_ALL(table, isa, level)                                            \
    do {                                                                      \
        table[LOOM_OP_RMS_NORM].opt[isa] = rms_norm_##level;                  \
        table[LOOM_OP_ADD].opt[isa] = add_##level;                            \
        table[LOOM_OP_MUL].opt[isa] = mul_##level;                            \
        table[LOOM_OP_SILU].opt[isa] = silu_##level;                          \
        table[LOOM_OP_SOFTMAX].opt[isa] = softmax_##level;                    \
        table[LOOM_OP_ROPE].opt[isa] = rope_##level;                          \
        table[LOOM_OP_GET_ROWS].opt[isa] = get_rows_##level;                  \
        table[LOOM_OP_COPY].opt[isa] = copy_##level;                          \
    } while (0)

BIND_ALL(generic)
#if defined(__x86_64__)
BIND_ALL(avx2)
BIND_ALL(avx512)
#endif

void loom_register_vec_kernels(loom_op_info *table) {
    SET_ALL(table, LOOM_ISA_GENERIC, generic);
#if defined(__x86_64__)
    SET_ALL(table, LOOM_ISA_AVX2, avx2);
    SET_ALL(table, LOOM_ISA_AVX512, avx512);
#endif
    /* RoPE keeps a position's cos/sin table in scratch; the reference ignores it */
    table[LOOM_OP_ROPE].scratch_size = loom_vec_rope_scratch;
}
