/* A loaded model: weights, KV cache, and its forward programs (compiled at
 * load, stepped per call). */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/cpu.h"
#include "base/status.h"
#include "graph/act_precision.h"
#include "model/llama_st.h"
#include "ops/matmul/matmul.h"

/* KV caches come from anonymous mappings: zero-filled by the kernel and only
 * resident once written, so a long context costs memory as it fills. */
static void *cache_alloc(size_t bytes) {
    if (bytes == 0) return NULL;
    /* pages are touched only as the context fills; huge pages where the
     * kernel offers them (decode streams the cache: fewer TLB misses) */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    loom_advise_huge_pages(p, bytes);
    return p;
}

static void cache_free(void *p, size_t bytes) {
    if (p) munmap(p, bytes);
}

loom_model_format loom_model_detect_format(const char *path) {
    struct stat st;
    if ((stat(path, &st) == 0 && S_ISDIR(st.st_mode)) || loom_path_ends_with(path, ".safetensors") ||
        loom_path_ends_with(path, ".json"))
        return LOOM_MODEL_SAFETENSORS;
    return loom_gguf_file_is_gguf(path) ? LOOM_MODEL_GGUF : LOOM_MODEL_LLAMA2C;
}

static loom_status load_weights(const char *path, loom_model *m) {
    LOOM_RETURN_IF(!path, LOOM_ERR_INVALID_ARG, "model_load: NULL path");
    m->format = loom_model_detect_format(path);
    switch (m->format) {
    case LOOM_MODEL_SAFETENSORS: /* a folder with config.json + weights, the file, or its index */
        return loom_llama_load_safetensors(path, &m->st, &m->st_owned, &m->cfg, &m->w);
    case LOOM_MODEL_GGUF: return loom_llama_load_gguf(path, m->params.n_threads, &m->gguf, &m->cfg, &m->w);
    default: return loom_llama2c_load(path, &m->file, &m->cfg, &m->w);
    }
}

loom_model_params loom_model_default_params(void) {
    loom_model_params p = {.n_threads = loom_cpu_count(), .n_ctx = 0, .mode = LOOM_MODE_FUSED, .dump_dir = NULL};
    const char *mm = getenv("LOOM_MMAP");
    p.use_mmap = mm && *mm && strcmp(mm, "0") != 0;
    const char *pk = getenv("LOOM_PACK_WEIGHTS");
    p.pack_weights = pk && *pk ? (strcmp(pk, "0") == 0 ? -1 : 1) : 0;
    return p;
}

loom_status loom_model_params_set_mode(loom_model_params *p, const char *flag) {
    LOOM_RETURN_IF(!p, LOOM_ERR_INVALID_ARG, "set_mode: NULL argument");
    const char *env = getenv("LOOM_MODE");
    if (flag || (env && *env)) return loom_mode_resolve(flag, NULL, &p->mode);
    loom_fusion_rules *r = NULL;
    LOOM_TRY(loom_fusion_rules_load(p->rules_path, &r));
    loom_status s = loom_mode_resolve(NULL, r, &p->mode);
    loom_fusion_rules_free(r);
    return s;
}

/* The program builder: the forward pass over n rows at pos, over the model's
 * token buffer and caches. */
static loom_status build_forward(void *ctx, loom_graph *g, const loom_step *s, int *out) {
    const loom_model_trace *tr = ctx;
    const int n = s->n_rows, pos = s->pos;
    loom_model *m = tr->m;
    const loom_llama_config *c = &m->cfg;
    loom_tensor t;
    const int64_t ids_shape[1] = {n};
    LOOM_TRY(loom_tensor_init(&t, LOOM_I32, 1, ids_shape, m->ids));
    loom_tensor_set_name(&t, "tokens");
    int ids = loom_graph_external(g, &t);
    const int64_t cache_shape[3] = {m->n_ctx, c->n_kv_heads, c->head_dim};
    const loom_dtype ct = m->params.kv_dtype;
    size_t per_layer = m->cache_bytes / (size_t)c->n_layers;
    for (int l = 0; l < c->n_layers; l++) {
        LOOM_TRY(loom_tensor_init(&t, ct, 3, cache_shape, (char *)m->k_cache + l * per_layer));
        loom_tensor_set_name(&t, "L%d.k_cache_store", l);
        m->kc[l] = loom_graph_external(g, &t);
        LOOM_TRY(loom_tensor_init(&t, ct, 3, cache_shape, (char *)m->v_cache + l * per_layer));
        loom_tensor_set_name(&t, "L%d.v_cache_store", l);
        m->vc[l] = loom_graph_external(g, &t);
        if (!m->k_scale) continue;
        const int64_t scale_shape[2] = {m->n_ctx, c->n_kv_heads};
        size_t rows = (size_t)m->n_ctx * (size_t)c->n_kv_heads;
        LOOM_TRY(loom_tensor_init(&t, LOOM_F32, 2, scale_shape, m->k_scale + l * rows));
        loom_tensor_set_name(&t, "L%d.k_scale_store", l);
        m->ksc[l] = loom_graph_external(g, &t);
        LOOM_TRY(loom_tensor_init(&t, LOOM_F32, 2, scale_shape, m->v_scale + l * rows));
        loom_tensor_set_name(&t, "L%d.v_scale_store", l);
        m->vsc[l] = loom_graph_external(g, &t);
    }
    *out = loom_llama_build(g, c, &m->w, ids, m->kc, m->vc, m->k_scale ? m->ksc : NULL,
                            m->k_scale ? m->vsc : NULL, n, pos, tr->all_logits);
    loom_graph_set_act_precision(g, m->params.act_precision); /* into the matmul nodes' attributes */
    return loom_graph_status(g);
}

static loom_status compile(loom_model *m, const char *name, int rows, int all, loom_program **out) {
    m->trace[all] = (loom_model_trace){.m = m, .all_logits = all};
    loom_program_desc d = {.name = name, .build = build_forward, .ctx = &m->trace[all], .max_rows = rows,
                           .max_end = m->n_ctx};
    return loom_program_compile(m->exec, &d, out);
}

/* The variant families the matrices (every dtype among them), the KV cache
 * and the activations of m need (loom_tune_needs). */
static unsigned weights_tune_needs(const loom_model *m) {
    loom_dtype seen[LOOM_DTYPE_COUNT];
    int n = 0;
    for (int l = -1; l < m->cfg.n_layers; l++) {
        const loom_llama_layer *y = l >= 0 ? &m->w.layers[l] : NULL;
        const loom_tensor *ts[7] = {y ? &y->wq : &m->w.output, y ? &y->wk : NULL, y ? &y->wv : NULL,
                                    y ? &y->wo : NULL, y ? &y->w1 : NULL, y ? &y->w2 : NULL, y ? &y->w3 : NULL};
        for (int i = 0; i < 7; i++) {
            if (!ts[i] || !ts[i]->data) continue;
            int k = 0;
            while (k < n && seen[k] != ts[i]->dtype) k++;
            if (k == n && n < LOOM_DTYPE_COUNT) seen[n++] = ts[i]->dtype;
        }
    }
    return loom_tune_needs(seen, n, m->params.kv_dtype, m->params.act_precision);
}

/* Matrix t as a GEMM's W: all rows of all its leading dimensions (a stack of
 * experts is one matrix of n_experts * rows rows). */
static int pack_desc(const loom_tensor *t, loom_pack_desc *d) {
    if (!t->data || t->ndim < 2 || !loom_dtype_is_quantized(t->dtype)) return 0;
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - 1; i++) rows *= t->shape[i];
    for (int i = 0; i < t->ndim - 2; i++) /* stacked contiguously */
        if (t->stride[i] != t->shape[i + 1] * t->stride[i + 1]) return 0;
    d->w = t->data, d->wtype = t->dtype, d->N = rows, d->K = t->shape[t->ndim - 1];
    d->ldw = t->stride[t->ndim - 2];
    return 1;
}

static int desc_cmp(const void *x, const void *y) {
    const char *a = ((const loom_pack_desc *)x)->w, *b = ((const loom_pack_desc *)y)->w;
    return a < b ? -1 : a > b;
}

static void drop_source(const void *w, size_t bytes, void *ctx) {
    loom_model *m = ctx;
    loom_byte_range r = {w, bytes};
    if (m->gguf) loom_gguf_drop(m->gguf, &r, 1);
}

/* The quantized matrices of the layers and the output projection, packed once
 * for the GEMM (loom_packed_weights). Views into a merged matrix (wq in wqkv,
 * w1 in w13) and a tied output are the same rows: packed once. */
static loom_status pack_weights(loom_model *m) {
    if (m->packed || m->params.pack_weights < 0) return LOOM_OK;
    const int per_layer = LOOM_LLAMA_LAYER_TENSORS;
    loom_pack_desc *d = malloc(((size_t)m->cfg.n_layers * per_layer + 1) * sizeof *d);
    LOOM_RETURN_IF(!d, LOOM_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int i = 0; i < per_layer; i++) {
            const loom_llama_layer_tensor *lt = &loom_llama_layer_tensors[i];
            if (!lt->norm) n += pack_desc((const loom_tensor *)((const char *)&m->w.layers[l] + lt->field), &d[n]);
        }
    n += pack_desc(&m->w.output, &d[n]);
    qsort(d, (size_t)n, sizeof *d, desc_cmp);
    int k = 0;
    for (int i = 0; i < n; i++) { /* drop a matrix inside the one before it */
        if (k > 0) {
            const loom_pack_desc *p = &d[k - 1];
            const char *end = (const char *)p->w + (size_t)p->N * loom_dtype_row_bytes(p->wtype, p->ldw);
            if ((const char *)d[i].w < end) continue;
        }
        d[k++] = d[i];
    }
    /* by default only matrices read from the file's mapping: their file pages
     * leave the process once packed (drop_source, make_gguf_resident). A matrix
     * converted at load (K-quants into q4_1 / q8_0) keeps its converted copy in
     * memory, so packing it would hold it twice: only with pack_weights 1. */
    if (m->params.pack_weights == 0) {
        int j = 0;
        for (int i = 0; i < k; i++)
            if (m->gguf && loom_gguf_maps(m->gguf, d[i].w, (size_t)d[i].N * loom_dtype_row_bytes(d[i].wtype, d[i].ldw)))
                d[j++] = d[i];
        k = j;
    }
    /* each matrix's file pages dropped once packed: the load's peak is the
     * packed form plus a matrix per thread, not twice the weights */
    loom_status s = loom_packed_weights_create_cb(d, k, loom_cpu_isa(), m->params.n_threads, drop_source, m,
                                                  &m->packed);
    free(d);
    return s;
}

/* The GGUF's pages made resident (huge pages), except those of the matrices
 * packed once: the GEMM reads only the panels (one row too, ops/matmul/matmul.c),
 * so nothing but an occasional reader (a tied embedding's rows, f32-activation
 * or reference runs) touches them; they stay the file's and read back from the
 * page cache when touched, so the model takes its weights' bytes once. (With
 * the mapping kept, use_mmap, packing dropped them as it went: drop_source.) */
static loom_status make_gguf_resident(loom_model *m) {
    int n = loom_packed_weights_count(m->packed);
    loom_byte_range *r = n > 0 ? malloc((size_t)n * sizeof *r) : NULL;
    for (int i = 0; r && i < n; i++) r[i].n = loom_packed_weights_source(m->packed, i, &r[i].p);
    if (!r) n = 0; /* out of memory: everything copied */
    int res = loom_gguf_make_resident_except(m->gguf, r, n);
    free(r);
    return res < 0 ? LOOM_ERR_IO : LOOM_OK;
}

loom_status loom_model_load(const char *path, const loom_model_params *p, loom_model **out) {
    LOOM_RETURN_IF(!out, LOOM_ERR_INVALID_ARG, "model_load: NULL argument");
    *out = NULL;
    loom_model_params params = p ? *p : loom_model_default_params();
    LOOM_RETURN_IF(params.n_threads < 1, LOOM_ERR_INVALID_ARG,
                   "thread count must be >= 1, got %d", params.n_threads);
    LOOM_RETURN_IF(params.n_ctx < 0, LOOM_ERR_INVALID_ARG, "context length must be >= 0, got %d",
                   params.n_ctx);
    LOOM_RETURN_IF(params.kv_dtype != LOOM_F32 && params.kv_dtype != LOOM_F16 &&
                       params.kv_dtype != LOOM_BF16 && params.kv_dtype != LOOM_I8,
                   LOOM_ERR_INVALID_ARG, "KV cache dtype %s: expected f32, f16, bf16 or i8",
                   loom_dtype_name(params.kv_dtype));
    /* activations against quantized weights: the caller's, the rules file's, loom's default */
    LOOM_TRY(loom_act_precision_resolve(params.act_precision, params.rules_path, &params.act_precision));
    loom_model *m = calloc(1, sizeof *m);
    LOOM_RETURN_IF(!m, LOOM_ERR_NOMEM, "out of memory");
    m->params = params;
    loom_status s = load_weights(path, m);
    if (s != LOOM_OK) {
        free(m);
        return s;
    }
    /* the quantized matrices packed for the GEMM first, from the file's pages,
     * so that the resident copy leaves those pages to the file; by default not
     * with the mapping kept (use_mmap: its pages are shared with other
     * processes through the page cache; a packed copy would be each one's own) */
    if (params.pack_weights >= 0 && !(params.pack_weights == 0 && params.use_mmap) &&
        params.act_precision == LOOM_ACT_PREC_Q8 && (s = pack_weights(m)) != LOOM_OK) {
        if (params.pack_weights > 0) goto fail;
        fprintf(stderr, "loom: weights not packed (%s); running without\n", loom_last_error());
        loom_clear_error();
        s = LOOM_OK;
    }
    if (!params.use_mmap) { /* the weights into huge pages, at the same addresses */
        if (m->gguf && (s = make_gguf_resident(m)) != LOOM_OK) goto fail;
        if (m->st) loom_safetensors_make_resident(m->st);
        if (m->format != LOOM_MODEL_GGUF && m->format != LOOM_MODEL_SAFETENSORS) loom_mapped_file_resident(&m->file);
    }
    const loom_llama_config *c = &m->cfg;
    /* the kernel variants these weights and this cache use: from the wisdom
     * file, or timed once on this CPU model (docs/tuning.md) */
    if ((s = loom_tune(weights_tune_needs(m), 0)) != LOOM_OK) goto fail;
    m->n_ctx = params.n_ctx ? params.n_ctx : c->seq_len;
    if (params.n_ctx_clamp && m->n_ctx > c->seq_len) m->n_ctx = c->seq_len;
    if (m->n_ctx > c->seq_len) {
        s = loom_set_error(LOOM_ERR_INVALID_ARG,
                           "context %d exceeds the model's maximum sequence length %d",
                           m->n_ctx, c->seq_len);
        goto fail;
    }
    size_t cache = (size_t)c->n_layers * (size_t)m->n_ctx * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    m->cache_bytes = cache * loom_dtype_size(params.kv_dtype);
    m->k_cache = cache_alloc(m->cache_bytes);
    m->v_cache = cache_alloc(m->cache_bytes);
    int q8 = params.kv_dtype == LOOM_I8; /* plus one f32 scale per cache row */
    m->scale_bytes = q8 ? cache / (size_t)c->head_dim * sizeof(float) : 0;
    m->k_scale = q8 ? cache_alloc(m->scale_bytes) : NULL;
    m->v_scale = q8 ? cache_alloc(m->scale_bytes) : NULL;
    m->prefill_rows = params.n_batch > 0 ? params.n_batch : LOOM_DEFAULT_BATCH;
    if (m->prefill_rows > m->n_ctx) m->prefill_rows = m->n_ctx;
    m->ids = malloc((size_t)m->prefill_rows * sizeof *m->ids);
    m->kc = malloc((size_t)c->n_layers * 4 * sizeof *m->kc);
    m->vc = m->kc ? m->kc + c->n_layers : NULL;
    m->ksc = m->kc ? m->kc + 2 * c->n_layers : NULL;
    m->vsc = m->kc ? m->kc + 3 * c->n_layers : NULL;
    if (!m->k_cache || !m->v_cache || (q8 && (!m->k_scale || !m->v_scale)) || !m->ids || !m->kc) {
        cache_free(m->k_cache, m->cache_bytes);
        cache_free(m->v_cache, m->cache_bytes);
        cache_free(m->k_scale, m->scale_bytes);
        cache_free(m->v_scale, m->scale_bytes);
        m->k_cache = m->v_cache = NULL;
        m->k_scale = m->v_scale = NULL;
        s = loom_set_error(LOOM_ERR_NOMEM, "cannot allocate a KV cache of %zu bytes",
                           2 * (m->cache_bytes + m->scale_bytes));
        goto fail;
    }
    /* the cache starts as zeros (fresh anonymous pages) so a dump never shows
     * stale memory; pages are touched only as positions fill */
    if ((s = loom_executor_init(&m->exec, params.n_threads, params.mode)) != LOOM_OK) goto fail;
    if (params.dump_dir && (s = loom_executor_set_dump(m->exec, params.dump_dir)) != LOOM_OK) goto fail;
    /* fusion rules: the file, its preset and the checkpoint action go to the executor */
    if ((params.mode != LOOM_MODE_STEP_BY_STEP || params.rules_path || params.fusion_preset) &&
        (s = loom_executor_load_rules(m->exec, params.rules_path, params.fusion_preset)) != LOOM_OK)
        goto fail;
    if (params.checkpoint_action > 0) m->exec->ckpt_action = params.checkpoint_action - 1;
    /* the programs: a decode step, and prompt chunks (compiled once, here) */
    s = compile(m, "prefill", m->prefill_rows, 0, &m->prefill);
    if (s == LOOM_ERR_UNSUPPORTED && m->prefill_rows > 2) {
        /* a bucket whose last row count crosses a rule's threshold (the rules
         * run attention of up to decode_max_q_len rows with the decode kernel,
         * so a bucket of 17 rows traces 16 differently): one row fewer */
        loom_clear_error();
        m->prefill_rows--;
        s = compile(m, "prefill", m->prefill_rows, 0, &m->prefill);
    }
    if (s != LOOM_OK) goto fail;
    if (m->n_ctx >= 2 && (s = compile(m, "decode", 1, 0, &m->decode)) != LOOM_OK) goto fail;
    *out = m;
    return LOOM_OK;
fail:
    loom_model_free(m);
    return s;
}

void loom_model_free(loom_model *m) {
    if (!m) return;
    loom_program_free(m->decode);
    loom_program_free(m->prefill);
    loom_program_free(m->prefill_all);
    loom_executor_free(m->exec);
    loom_packed_weights_free(m->packed); /* before the weights it was made from go */
    cache_free(m->k_cache, m->cache_bytes);
    cache_free(m->v_cache, m->cache_bytes);
    cache_free(m->k_scale, m->scale_bytes);
    cache_free(m->v_scale, m->scale_bytes);
    free(m->ids);
    free(m->kc); /* vc, ksc, vsc point into it */
    free(m->w.layers);
    loom_free_aligned(m->w.owned);
    loom_mapped_file_close(&m->file);
    loom_gguf_close(m->gguf);
    loom_safetensors_close(m->st);
    free(m->st_owned);
    free(m);
}

loom_model_info loom_model_get_info(const loom_model *m) {
    const loom_llama_config *c = &m->cfg;
    loom_model_info i = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
                         c->head_dim, c->vocab_size, c->seq_len, m->n_ctx};
    return i;
}

/* Runs tokens[0..n) at positions pos..: one decode step, or prompt chunks of
 * up to prefill_rows; copies the last position's logits, or all n. */
static loom_status forward(loom_model *m, const int32_t *tokens, int n, int pos, int all, float *logits) {
    LOOM_RETURN_IF(!m || !tokens || !logits, LOOM_ERR_INVALID_ARG, "forward: NULL argument");
    const loom_llama_config *c = &m->cfg;
    LOOM_RETURN_IF(n < 1, LOOM_ERR_INVALID_ARG, "forward: need at least one token, got %d", n);
    LOOM_RETURN_IF(pos < 0 || pos > m->n_ctx - n, LOOM_ERR_INVALID_ARG,
                   "forward: positions %d..%ld do not fit the context of %d tokens", pos, (long)pos + n - 1,
                   m->n_ctx);
    for (int i = 0; i < n; i++)
        LOOM_RETURN_IF(tokens[i] < 0 || tokens[i] >= c->vocab_size, LOOM_ERR_INVALID_ARG,
                       "forward: token %d at index %d is outside the vocabulary of %d", tokens[i], i,
                       c->vocab_size);
    const size_t V = (size_t)c->vocab_size;
    if (all && !m->prefill_all) LOOM_TRY(compile(m, "prefill_all", m->prefill_rows, 1, &m->prefill_all));
    loom_program *p = all ? m->prefill_all : n == 1 && m->decode ? m->decode : m->prefill;
    for (int done = 0; done < n;) {
        int rows = n - done < m->prefill_rows ? n - done : m->prefill_rows;
        if (p == m->decode) rows = 1;
        memcpy(m->ids, tokens + done, (size_t)rows * sizeof *m->ids);
        loom_step st = {.n_rows = rows, .pos = pos + done, .n_out = 1};
        LOOM_TRY(loom_program_run(p, &st));
        const loom_tensor *lt = loom_program_output(p);
        if (all) memcpy(logits + (size_t)done * V, lt->data, (size_t)rows * V * sizeof(float));
        else if (done + rows == n) memcpy(logits, lt->data, V * sizeof(float));
        done += rows;
    }
    return LOOM_OK;
}

loom_status loom_model_forward(loom_model *m, const int32_t *tokens, int n, int pos, float *logits) {
    return forward(m, tokens, n, pos, 0, logits);
}

loom_status loom_model_forward_all(loom_model *m, const int32_t *tokens, int n, int pos, float *logits) {
    return forward(m, tokens, n, pos, 1, logits);
}

loom_graph *loom_model_last_graph(loom_model *m) {
    const loom_program *last = m->exec->last;
    if (!last) return NULL;
    loom_program *p = last == m->decode ? m->decode : last == m->prefill ? m->prefill : m->prefill_all;
    loom_program_account(p);
    return (loom_graph *)loom_program_graph(p);
}

void loom_model_set_timing(loom_model *m, int on) {
    if (m->decode) loom_program_set_timing(m->decode, on);
    if (m->prefill) loom_program_set_timing(m->prefill, on);
    if (m->prefill_all) loom_program_set_timing(m->prefill_all, on);
}

void loom_model_report_checkpoints(const loom_model *m) {
    if (m && m->exec && m->exec->mode == LOOM_MODE_FUSED_WITH_CHECKPOINTS)
        loom_executor_print_checkpoints(m->exec, stderr);
}
