/* softcap (y = c * tanh(x / c)) in float, elements split over threads as the
 * reference splits them; each element is computed alone, so the result does
 * not depend on the thread count. (scale runs its reference kernel, one f32
 * product an element, at every level.) */
#include "ops/vec/vec_scale.h"

#include <math.h>

#include "ops/ref/ref.h"

loom_status loom_softcap_generic(const loom_kernel_args *a) {
    const loom_tensor *x = a->src[0], *y = a->dst;
    const float c = ((const loom_softcap_attrs *)a->attrs)->cap, inv = 1.0f / c;
    const float *xd = x->data;
    float *yd = y->data;
    int64_t lo, hi;
    loom_ref_split(loom_tensor_nelem(x), a->ith, a->nth, &lo, &hi);
    if (loom_tensor_is_contiguous(x) && loom_tensor_is_contiguous(y)) {
        for (int64_t e = lo; e < hi; e++) yd[e] = c * tanhf(xd[e] * inv);
        return LOOM_OK;
    }
    for (int64_t e = lo; e < hi; e++)
        yd[loom_ref_row_offset(y, y->ndim, e)] = c * tanhf(xd[loom_ref_row_offset(x, x->ndim, e)] * inv);
    return LOOM_OK;
}
