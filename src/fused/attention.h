/*
 * Fused attention operators (the ops-transformer part of loom):
 * loom_flash_attention_score (prefill), loom_incre_flash_attention (decode,
 * split-KV) and loom_fused_infer_attention_score (either, by query length).
 * They are public: declared in include/loom_ops.h, with their tensors and
 * params structs; docs/attention.md has the full reference.
 */
#ifndef LOOM_FUSED_ATTENTION_H
#define LOOM_FUSED_ATTENTION_H

#include "loom_ops.h"

#endif /* LOOM_FUSED_ATTENTION_H */
