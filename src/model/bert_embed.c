/* Sentence embeddings with a BERT encoder: folder loading, variable-length
 * batches packed without padding (TND attention), mean pooling, L2
 * normalisation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "base/status.h"
#include "graph/exec.h"
#include "model/bert.h"
#include "model/hf_config.h"

#define BERT_BATCH_TOKENS 4096  /* tokens per forward pass (more when one input is longer) */
#define BERT_BATCH_SEQS 64

struct loom_bert {
    loom_bert_config cfg;
    loom_bert_weights w;
    loom_safetensors *st;
    loom_tokenizer *tok;
    loom_executor *exec;
    loom_graph *graph;
    int max_tokens;        /* per input, [CLS] and [SEP] included */
};

int loom_bert_dim(const loom_bert *m) { return m ? m->cfg.dim : 0; }

void loom_bert_free(loom_bert *m) {
    if (!m) return;
    loom_graph_free(m->graph);
    loom_executor_free(m->exec);
    loom_tokenizer_free(m->tok);
    loom_bert_weights_free(&m->w);
    loom_safetensors_close(m->st);
    free(m);
}

/* sentence_bert_config.json's max_seq_length, if the file is there. */
static int sbert_max_len(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
    char *text;
    size_t len;
    struct stat sb;
    if (stat(path, &sb) != 0 || loom_read_text_file(path, &text, &len) != LOOM_OK) {
        loom_clear_error();
        return 0;
    }
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *m = root ? cJSON_GetObjectItemCaseSensitive(root, "max_seq_length") : NULL;
    int v = cJSON_IsNumber(m) && m->valuedouble >= 1 && m->valuedouble <= 1 << 20 ? (int)m->valuedouble : 0;
    cJSON_Delete(root);
    free(text);
    return v;
}

loom_status loom_bert_load(const char *dir, int n_threads, loom_bert **out) {
    LOOM_RETURN_IF(!dir || !out, LOOM_ERR_INVALID_ARG, "bert: NULL argument");
    LOOM_RETURN_IF(n_threads < 1 || n_threads > 1024, LOOM_ERR_INVALID_ARG,
                   "bert: %d threads (1..1024 allowed)", n_threads);
    *out = NULL;
    struct stat sb;
    LOOM_RETURN_IF(stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode), LOOM_ERR_IO,
                   "bert: '%s' is not a model folder (config.json, model.safetensors, tokenizer.json)", dir);
    loom_bert *m = calloc(1, sizeof *m);
    LOOM_RETURN_IF(!m, LOOM_ERR_NOMEM, "bert: out of memory");
    loom_status s = loom_safetensors_open(dir, &m->st);
    if (s == LOOM_OK) s = loom_bert_load_weights(dir, m->st, &m->cfg, &m->w);
    if (s == LOOM_OK) s = loom_tokenizer_load_hf_json(dir, &m->tok);
    if (s == LOOM_OK && strcmp(loom_tokenizer_kind_name(m->tok), "bert") != 0)
        s = loom_set_error(LOOM_ERR_UNSUPPORTED, "bert: '%s': the tokenizer is %s, not WordPiece", dir,
                           loom_tokenizer_kind_name(m->tok));
    if (s == LOOM_OK && loom_tokenizer_vocab_size(m->tok) > m->cfg.vocab_size)
        s = loom_set_error(LOOM_ERR_FORMAT, "bert: '%s': the tokenizer has %d tokens, the model %d", dir,
                           loom_tokenizer_vocab_size(m->tok), m->cfg.vocab_size);
    if (s == LOOM_OK && m->cfg.n_layers > 0) { /* bf16 weights: the GEMM variant (docs/tuning.md) */
        loom_dtype wdt[2] = {m->w.layers[0].wq.dtype, m->w.layers[0].w_up.dtype};
        s = loom_tune(loom_tune_needs(wdt, 2, LOOM_F32, LOOM_ACT_PREC_DEFAULT), 0);
    }
    /* fused by default (LOOM_MODE says otherwise): the built-in rules put each
     * projection's bias, and the GELU or residual add after it, into its GEMM */
    loom_exec_mode mode = LOOM_MODE_FUSED;
    if (s == LOOM_OK) s = loom_mode_resolve(NULL, NULL, &mode);
    if (s == LOOM_OK) s = loom_executor_init(&m->exec, n_threads, mode);
    if (s == LOOM_OK) s = loom_graph_init(&m->graph);
    if (s != LOOM_OK) {
        loom_bert_free(m);
        return s;
    }
    m->max_tokens = m->cfg.max_pos;
    int sl = sbert_max_len(dir);
    if (sl > 0 && sl < m->max_tokens) m->max_tokens = sl;
    *out = m;
    return LOOM_OK;
}

/* One batch: sequences 0..nb of ids/lens packed one after another (T tokens, no
 * padding), attention per sequence through the TND flash attention. */
/* Inputs first .. first + nb - 1 (0-based; messages count from 1). */
static loom_status run_batch(loom_bert *m, const int32_t *const *ids, const int *lens, int nb, int first,
                             int normalize, float *out) {
    int64_t T = 0, D = m->cfg.dim;
    for (int b = 0; b < nb; b++) T += lens[b];
    int32_t *tok = malloc(sizeof(int32_t) * ((size_t)T * 3 + (size_t)nb));
    if (!tok) return loom_set_error(LOOM_ERR_NOMEM, "bert: out of memory for a batch of %lld tokens", (long long)T);
    int32_t *pos = tok + T, *types = tok + 2 * T, *cu = tok + 3 * T;
    int64_t t = 0;
    for (int b = 0; b < nb; b++) {
        int n = lens[b];
        for (int j = 0; j < n; j++, t++) {
            tok[t] = ids[b][j];
            pos[t] = j;
            types[t] = 0;
        }
        cu[b] = (int32_t)t;
    }
    loom_graph *g = m->graph;
    loom_graph_reset(g);
    loom_tensor t_ids, t_pos, t_types, t_cu;
    int64_t n_seqs = nb;
    loom_tensor_init(&t_ids, LOOM_I32, 1, &T, tok);
    loom_tensor_init(&t_pos, LOOM_I32, 1, &T, pos);
    loom_tensor_init(&t_types, LOOM_I32, 1, &T, types);
    loom_tensor_init(&t_cu, LOOM_I32, 1, &n_seqs, cu);
    int x = loom_bert_build(g, &m->cfg, &m->w, loom_graph_external(g, &t_ids), loom_graph_external(g, &t_pos),
                            loom_graph_external(g, &t_types), loom_graph_external(g, &t_cu), T);
    loom_status s = loom_graph_status(g);
    if (s == LOOM_OK) s = loom_executor_run(m->exec, g);
    if (s == LOOM_OK) {
        const float *hs = loom_graph_tensor(g, x)->data;
        for (int b = 0; b < nb; b++) {
            int n = lens[b];
            const float *rows = hs + (size_t)(cu[b] - n) * (size_t)D;
            float *o = out + (size_t)b * (size_t)D;
            for (int64_t d = 0; d < D; d++) {
                double acc = 0.0;
                for (int j = 0; j < n; j++) acc += rows[(size_t)j * D + d];
                o[d] = (float)(acc / n);
            }
            if (normalize) {
                double ss = 0.0;
                for (int64_t d = 0; d < D; d++) ss += (double)o[d] * o[d];
                double inv = 1.0 / fmax(sqrt(ss), 1e-12);  /* torch F.normalize's eps */
                for (int64_t d = 0; d < D; d++) o[d] = (float)(o[d] * inv);
            }
            /* a NaN or infinite weight (or an overflow) must not come out as a vector */
            for (int64_t d = 0; d < D && s == LOOM_OK; d++)
                if (!isfinite(o[d]))
                    s = loom_set_error(LOOM_ERR_FORMAT, "bert: the embedding of input %d is %s at dimension %lld "
                                       "(a NaN or infinite weight, or an overflow, in the model)", first + b + 1,
                                       isnan(o[d]) ? "NaN" : "infinite", (long long)d);
        }
    }
    free(tok);
    return s;
}

loom_status loom_bert_embed_tokens(loom_bert *m, const int32_t *const *ids, const int *lens, int n,
                                   int normalize, float *out) {
    LOOM_RETURN_IF(!m || (n > 0 && (!ids || !lens || !out)) || n < 0, LOOM_ERR_INVALID_ARG,
                   "bert: NULL argument or negative count");
    for (int i = 0; i < n; i++) {
        LOOM_RETURN_IF(lens[i] < 1 || lens[i] > m->cfg.max_pos, LOOM_ERR_INVALID_ARG,
                       "bert: input %d has %d tokens (1..%d allowed)", i, lens[i], m->cfg.max_pos);
        for (int j = 0; j < lens[i]; j++)
            LOOM_RETURN_IF(ids[i][j] < 0 || ids[i][j] >= m->cfg.vocab_size, LOOM_ERR_INVALID_ARG,
                           "bert: input %d token %d is id %d (0..%d allowed)", i, j, ids[i][j],
                           m->cfg.vocab_size - 1);
    }
    /* inputs in order, packed into batches of at most BERT_BATCH_TOKENS tokens
     * and BERT_BATCH_SEQS sequences (results do not depend on the grouping) */
    loom_status s = LOOM_OK;
    for (int i = 0; i < n && s == LOOM_OK;) {
        int nb = 0;
        int64_t tokens = 0;
        while (i + nb < n && nb < BERT_BATCH_SEQS) {
            if (nb > 0 && tokens + lens[i + nb] > BERT_BATCH_TOKENS) break;
            tokens += lens[i + nb];
            nb++;
        }
        s = run_batch(m, ids + i, lens + i, nb, i, normalize, out + (size_t)i * (size_t)m->cfg.dim);
        i += nb;
    }
    return s;
}

loom_status loom_bert_embed(loom_bert *m, const char *const *texts, int n, int normalize, float *out) {
    LOOM_RETURN_IF(!m || n < 0 || (n > 0 && (!texts || !out)), LOOM_ERR_INVALID_ARG, "bert: NULL argument");
    int cap = m->max_tokens;
    int32_t *buf = malloc(sizeof(int32_t) * (size_t)(n ? n : 1) * (size_t)cap);
    int32_t **ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
    int *lens = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int32_t *tmp = NULL;
    loom_status s = buf && ids && lens ? LOOM_OK : loom_set_error(LOOM_ERR_NOMEM, "bert: out of memory");
    for (int i = 0; i < n && s == LOOM_OK; i++) {
        ids[i] = buf + (size_t)i * cap;
        const char *t = texts[i] ? texts[i] : "";
        size_t len = strlen(t);
        /* the whole text first, then truncation keeping [SEP] last (as HF does) */
        size_t need = len + 2;
        free(tmp);
        tmp = malloc(sizeof(int32_t) * need);
        if (!tmp) {
            s = loom_set_error(LOOM_ERR_NOMEM, "bert: out of memory");
            break;
        }
        int nt = 0;
        s = loom_tokenizer_encode_ex(m->tok, t, len, LOOM_TOK_BOS | LOOM_TOK_EOS, tmp, (int)need, &nt);
        if (s != LOOM_OK) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s", loom_last_error());
            s = loom_set_error(s, "input %d: %s", i + 1, msg);
            break;
        }
        if (nt > cap) {
            tmp[cap - 1] = tmp[nt - 1];
            nt = cap;
        }
        memcpy(ids[i], tmp, sizeof(int32_t) * (size_t)nt);
        lens[i] = nt;
    }
    if (s == LOOM_OK) s = loom_bert_embed_tokens(m, (const int32_t *const *)ids, lens, n, normalize, out);
    free(tmp);
    free(buf);
    free(ids);
    free(lens);
    return s;
}
