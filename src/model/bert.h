/* BERT encoders (all-MiniLM-L6-v2, bert-base-like) from Hugging Face
 * safetensors + config.json + tokenizer.json, as sentence embeddings:
 * token + position + token-type embeddings, LayerNorm, post-norm layers of
 * bidirectional attention (padding-masked over a padded batch) and GELU FFN,
 * then mean pooling over the real tokens and L2 normalisation. */
#ifndef LOOM_MODEL_BERT_H
#define LOOM_MODEL_BERT_H

#include "graph/exec.h"
#include "graph/graph.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

typedef struct loom_bert_config {
    int   dim;            /* hidden_size */
    int   hidden_dim;     /* intermediate_size */
    int   n_layers;
    int   n_heads;
    int   head_dim;       /* dim / n_heads */
    int   vocab_size;
    int   max_pos;        /* max_position_embeddings */
    int   type_vocab;     /* type_vocab_size */
    float ln_eps;         /* layer_norm_eps */
    int   gelu_tanh;      /* 1 for "gelu_new" / "gelu_pytorch_tanh" */
} loom_bert_config;

typedef struct loom_bert_layer {
    loom_tensor wq, wk, wv;   /* [dim, dim] (W[out, in]) */
    loom_tensor bq, bk, bv;   /* [dim] f32 */
    loom_tensor wo, bo;       /* [dim, dim], [dim] */
    loom_tensor ln1_g, ln1_b; /* attention output LayerNorm [dim] */
    loom_tensor w_up, b_up;   /* [hidden_dim, dim], [hidden_dim] */
    loom_tensor w_down, b_down; /* [dim, hidden_dim], [dim] */
    loom_tensor ln2_g, ln2_b; /* output LayerNorm [dim] */
} loom_bert_layer;

typedef struct loom_bert_weights {
    loom_tensor tok_embd;     /* [vocab_size, dim] */
    loom_tensor pos_embd;     /* [max_pos, dim] */
    loom_tensor type_embd;    /* [type_vocab, dim] */
    loom_tensor emb_ln_g, emb_ln_b;  /* [dim] */
    loom_bert_layer *layers;  /* [n_layers], malloc'd */
    float *owned;             /* f32 copies of vectors stored as f16/bf16 (malloc'd) */
} loom_bert_weights;

/* Reads config.json (model_type "bert" or a Bert* architecture; other
 * architectures are LOOM_ERR_UNSUPPORTED) and the weights from st, checking
 * every shape (LOOM_ERR_SHAPE naming the tensor, expected vs found). Tensor
 * names may carry a "bert." prefix. Views point into st's mapping. */
loom_status loom_bert_load_weights(const char *config_path, const loom_safetensors *st,
                                   loom_bert_config *cfg, loom_bert_weights *w);
void loom_bert_weights_free(loom_bert_weights *w);

/* Appends the encoder graph for a variable-length batch packed without
 * padding: T tokens of num_seqs sequences one after another. ids, pos and
 * types are I32 [T] tensor ids (pos restarts at 0 for every sequence); cu is
 * an I32 [num_seqs] tensor id of cumulative sequence ends (the last is T).
 * Attention is the fused flash attention graph op in layout TND, so every
 * token attends to the tokens of its own sequence only and no padding is
 * computed. Without data in cu (loom plan) the sequences are taken to be of
 * equal length. Returns the id of the last hidden states [T, dim] (marked as
 * output), -1 on error. */
int loom_bert_build(loom_graph *g, const loom_bert_config *c, const loom_bert_weights *w, int ids,
                    int pos, int types, int cu, int64_t T);

/* ---- sentence embeddings: the model folder's weights, tokenizer, executor */

/* loom_bert_load, _free, _dim and loom_bert_embed (texts) are public: loom.h. */

/* Embeddings of n token sequences (ids[i][0..lens[i]), [CLS]/[SEP] included)
 * into out[n * dim]: mean over each sequence's tokens of the last hidden
 * state, L2-normalised when normalize. Sequences run in padded batches. An
 * embedding that is not finite (a NaN weight) is LOOM_ERR_FORMAT naming the
 * input (from 1). */
loom_status loom_bert_embed_tokens(loom_bert *m, const int32_t *const *ids, const int *lens, int n,
                                   int normalize, float *out);

#endif
