/* libFuzzer target: the GGUF reader on arbitrary bytes. Every accessor runs
 * over whatever opens, so that values, arrays and tensor views are touched,
 * and tensors of the types the Llama loader converts (K-quants, q5) are
 * converted. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "model/gguf.h"
#include "model/llama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* An exact-size copy: ASan then flags any read past the end. */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    if (size) memcpy(copy, data, size);
    loom_gguf *g = NULL;
    if (loom_gguf_open_memory(copy, size, "fuzz.gguf", &g) == LOOM_OK) {
        char buf[256];
        for (int64_t i = 0; i < loom_gguf_n_kv(g); i++) {
            const char *key = loom_gguf_kv_key(g, i);
            loom_gguf_kv_format(g, i, buf, sizeof buf);
            uint64_t u64;
            int64_t i64;
            double d;
            int b;
            const char *s;
            size_t sl;
            loom_gguf_get_u64(g, key, &u64);
            loom_gguf_get_i64(g, key, &i64);
            loom_gguf_get_f64(g, key, &d);
            loom_gguf_get_bool(g, key, &b);
            loom_gguf_get_str(g, key, &s, &sl);
            loom_gguf_type et;
            uint64_t n;
            if (loom_gguf_get_arr_info(g, key, &et, &n) == LOOM_OK && n <= 4096) {
                void *vals = malloc(n * 8 + 8);
                uint64_t *lens = malloc(n * 8 + 8);
                if (vals && lens) {
                    loom_gguf_get_arr_i32(g, key, vals, n);
                    loom_gguf_get_arr_f32(g, key, vals, n);
                    loom_gguf_get_arr_str(g, key, vals, lens, n);
                }
                free(vals);
                free(lens);
            }
        }
        for (int64_t i = 0; i < loom_gguf_n_tensors(g); i++) {
            loom_gguf_tensor_info info;
            loom_tensor t;
            if (loom_gguf_tensor_info_at(g, i, &info) == LOOM_OK && info.nbytes > 0) {
                /* Touch the first and last byte of the tensor's data. */
                volatile uint8_t sink = ((const uint8_t *)info.data)[0];
                sink ^= ((const uint8_t *)info.data)[info.nbytes - 1];
                (void)sink;
            }
            loom_gguf_tensor_at(g, i, &t);
            /* a type the Llama loader converts: the whole tensor (its data lies in the
             * copy, as validated), into an exact-size buffer. It converts, or fails as a
             * bad file (LOOM_ERR_FORMAT) with a message; converted, every scale is finite. */
            loom_dtype to;
            if (loom_gguf_tensor_info_at(g, i, &info) == LOOM_OK && loom_ggml_convert_target(info.ggml_type, &to)) {
                int64_t n = loom_gguf_tensor_nelem(&info);
                size_t nbl = (size_t)n / 32, bb = loom_dtype_block_bytes(to);
                uint8_t *out = n <= (1 << 20) ? malloc(nbl * bb + 1) : NULL;
                if (out) {
                    loom_status st = loom_ggml_convert_row(info.ggml_type, info.data, n, out);
                    if (st != LOOM_OK && (st != LOOM_ERR_FORMAT || !loom_last_error()[0])) abort();
                    for (size_t b = 0; st == LOOM_OK && b < nbl; b++) { /* d (and q4_1's m) lead each block */
                        uint16_t h[2];
                        memcpy(h, out + b * bb, sizeof h);
                        if (!isfinite(loom_f16_to_f32(h[0])) || (to == LOOM_Q4_1 && !isfinite(loom_f16_to_f32(h[1]))))
                            abort();
                    }
                }
                free(out);
            }
        }
    }
    /* the Llama loader's metadata (families, experts) and tensor checks over what opens */
    loom_llama_config cfg;
    if (g && loom_llama_config_from_gguf(g, &cfg) == LOOM_OK && cfg.n_layers <= 64) {
        loom_llama_weights w;
        memset(&w, 0, sizeof w);
        w.layers = calloc((size_t)cfg.n_layers, sizeof *w.layers);
        if (w.layers && loom_llama_weights_from_gguf(g, &cfg, &w, 1) == LOOM_OK) {
            /* experts: [n_experts, rows, cols] as the config says */
            const loom_tensor *e = &w.layers[0].ffn_gate_exps;
            if (cfg.n_experts > 0 && (e->ndim != 3 || e->shape[0] != cfg.n_experts)) abort();
        }
        free(w.layers);
        loom_free_aligned(w.owned);
    }
    loom_gguf_close(g);
    free(copy);
    return 0;
}
