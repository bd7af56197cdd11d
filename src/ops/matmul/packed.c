/*
 * Weights packed once for the quantized GEMM (matmul.h, loom_packed_weights).
 *
 * The quantized GEMM lays each panel of nr W rows out for its dot-product
 * instruction (gemm_q_kernels.h) and normally does it on every call: at a few
 * rows of x (a batch of decoding sequences) that costs as much as the
 * products. Packed here once, in the set's compact form (q4 kept at 4 bits,
 * f16 scales: the file's bytes, transposed), the panels are read where they
 * are.
 *
 * A process-wide table maps each packed matrix's address range to its panels;
 * loom_matmul_run looks the weights of every quantized call up (a binary
 * search under a read lock), so every caller of the matmul family - the matmul
 * op, the fused QKV and FFN, MoE experts - finds them without passing anything
 * along. Row
 * ranges of a packed matrix (a head's rows, a block of the FFN's hidden
 * dimension, one expert of a stack) hit when they start at a panel boundary.
 */
#include "ops/matmul/gemm_q_kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"

typedef struct packed_entry {
    const char *base, *end;     /* W's rows */
    size_t row_bytes;
    int64_t N, K, ldw;
    loom_dtype wtype;
    const loom_gemm_q_kset *ks;
    const uint8_t *panels;
} packed_entry;

struct loom_packed_weights {
    void *block;
    size_t bytes;
    int n;
    packed_entry *entries;
};

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static packed_entry *table;     /* sorted by base, ranges disjoint */
static int table_n, table_cap;
static atomic_int table_used;   /* table_n, read without the lock: nothing packed, no lookup */
static atomic_uint_fast64_t hits;

static int packable(loom_dtype wt, int64_t N, int64_t K, int64_t ldw, const loom_gemm_q_kset *ks) {
    return (wt == LOOM_Q8_0 || wt == LOOM_Q4_0 || wt == LOOM_Q4_1) && ks->micro_packed && N > 0 && K > 0 &&
           K % 32 == 0 && ldw >= K && ldw % 32 == 0;
}

size_t loom_matmul_packed_bytes(loom_dtype wt, int64_t N, int64_t K, loom_isa isa) {
    const loom_gemm_q_kset *ks = loom_gemm_q_kset_for(isa);
    if (isa <= LOOM_ISA_REF || !packable(wt, N, K, K, ks)) return 0;
    int64_t panels = (N + ks->nr - 1) / ks->nr;
    return (size_t)panels * (size_t)(K / 32) * loom_gemm_q_packed_block_bytes(wt, ks->nr);
}

/* One panel: the set's own packing into tmp, then its q4 bytes two quads to a
 * byte, and the file's f16 scales (and q4_1's mins) copied as they are (the
 * layouts are in gemm_q_kernels.h). */
static void pack_panel(const loom_gemm_q_kset *ks, loom_dtype wt, const char *w, size_t row_bytes, int cols,
                       int64_t nb, uint8_t *tmp, uint8_t *out) {
    const int nr = ks->nr;
    const size_t bb = loom_gemm_q_panel_block_bytes(nr), pbb = loom_gemm_q_packed_block_bytes(wt, nr);
    const size_t sof = loom_gemm_q_packed_scale_offset(wt, nr), bs = loom_dtype_block_bytes(wt);
    ks->pack(wt, w, row_bytes, cols, nb, tmp);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = tmp + (size_t)b * bb;
        uint8_t *o = out + (size_t)b * pbb;
        if (wt == LOOM_Q8_0) memcpy(o, q, sof);
        else
            for (size_t i = 0; i < sof; i++) o[i] = (uint8_t)(q[i] | q[i + sof] << 4);
        uint16_t *d = (uint16_t *)(o + sof), *mn = d + nr; /* every block starts with d, q4_1's m next */
        memset(d, 0, pbb - sof);
        for (int c = 0; c < cols; c++) {
            const char *blk = w + (size_t)c * row_bytes + (size_t)b * bs;
            memcpy(&d[c], blk, 2);
            if (wt == LOOM_Q4_1) memcpy(&mn[c], blk + 2, 2);
        }
    }
}

static int entry_cmp(const void *x, const void *y) {
    const packed_entry *a = x, *b = y;
    return a->base < b->base ? -1 : a->base > b->base;
}

static int overlaps(const packed_entry *a, const packed_entry *b) { return a->base < b->end && b->base < a->end; }

/* Adds p's entries (sorted) to the table, kept sorted; nothing changes if one
 * overlaps a matrix packed already. */
static loom_status table_add(const loom_packed_weights *p) {
    loom_status s = LOOM_OK;
    pthread_rwlock_wrlock(&table_lock);
    for (int i = 0; i < p->n && s == LOOM_OK; i++)
        for (int j = 0; j < table_n; j++)
            if (overlaps(&p->entries[i], &table[j])) {
                s = loom_set_error(LOOM_ERR_INVALID_ARG, "pack_weights: a matrix at %p is packed already",
                                   (const void *)p->entries[i].base);
                break;
            }
    if (s == LOOM_OK && table_n + p->n > table_cap) {
        int cap = (table_n + p->n) * 2;
        packed_entry *t = realloc(table, (size_t)cap * sizeof *t);
        if (t) table = t, table_cap = cap;
        else s = loom_set_error(LOOM_ERR_NOMEM, "out of memory");
    }
    if (s == LOOM_OK) {
        memcpy(table + table_n, p->entries, (size_t)p->n * sizeof *table);
        table_n += p->n;
        qsort(table, (size_t)table_n, sizeof *table, entry_cmp);
        atomic_store(&table_used, table_n);
    }
    pthread_rwlock_unlock(&table_lock);
    return s;
}

static void table_remove(const loom_packed_weights *p) {
    pthread_rwlock_wrlock(&table_lock);
    int k = 0;
    for (int j = 0; j < table_n; j++) {
        int mine = 0;
        for (int i = 0; i < p->n && !mine; i++) mine = table[j].panels == p->entries[i].panels;
        if (!mine) table[k++] = table[j];
    }
    table_n = k;
    atomic_store(&table_used, table_n);
    pthread_rwlock_unlock(&table_lock);
}

const uint8_t *loom_gemm_q_packed_find(const loom_matmul_args *a, const loom_gemm_q_kset *ks, int count) {
    const char *w = a->w;
    const uint8_t *found = NULL;
    if (atomic_load_explicit(&table_used, memory_order_relaxed) == 0) return NULL; /* e.g. loom run */
    pthread_rwlock_rdlock(&table_lock);
    int lo = 0, hi = table_n; /* the last entry with base <= w */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (table[mid].base <= w) lo = mid;
        else hi = mid;
    }
    if (table_n > 0 && table[lo].base <= w && w < table[lo].end) {
        const packed_entry *e = &table[lo];
        size_t off = (size_t)(w - e->base);
        int64_t row = (int64_t)(off / e->row_bytes);
        if (e->ks == ks && e->wtype == a->wtype && e->K == a->K && e->ldw == a->ldw && off % e->row_bytes == 0 &&
            row % ks->nr == 0 && row + a->N <= e->N)
            found = e->panels + (size_t)(row / ks->nr) * (size_t)(e->K / 32) *
                                    loom_gemm_q_packed_block_bytes(e->wtype, ks->nr);
    }
    pthread_rwlock_unlock(&table_lock);
    if (found && count) atomic_fetch_add_explicit(&hits, 1, memory_order_relaxed);
    return found;
}

uint64_t loom_matmul_packed_hits(void) { return (uint64_t)atomic_load_explicit(&hits, memory_order_relaxed); }

loom_status loom_packed_weights_create(const loom_pack_desc *d, int n, loom_isa isa, loom_packed_weights **out) {
    return loom_packed_weights_create_cb(d, n, isa, 1, NULL, NULL, out);
}

/* The packing shared among threads: units of up to UNIT_PANELS panels of one
 * matrix, taken in turn; the thread finishing a matrix's last unit reports it. */
#define UNIT_PANELS 64

typedef struct pack_job {
    loom_packed_weights *p;
    const loom_gemm_q_kset *ks;
    size_t tmp_bytes;
    int n_units;
    int *unit_entry;          /* per unit: its matrix; its first panel in unit_panel */
    int64_t *unit_panel;
    atomic_int next;          /* the next unit to take */
    atomic_int *left;         /* per matrix: units not packed yet */
    void (*packed)(const void *w, size_t bytes, void *ctx);
    void *ctx;
} pack_job;

static void pack_units(pack_job *j, uint8_t *tmp) {
    const int nr = j->ks->nr;
    for (int u; (u = atomic_fetch_add(&j->next, 1)) < j->n_units;) {
        packed_entry *e = &j->p->entries[j->unit_entry[u]];
        int64_t nb = e->K / 32, p0 = j->unit_panel[u], np = (e->N + nr - 1) / nr;
        size_t pbytes = (size_t)nb * loom_gemm_q_packed_block_bytes(e->wtype, nr);
        for (int64_t q = p0; q < np && q < p0 + UNIT_PANELS; q++) {
            int64_t r = q * nr;
            int cols = (int)(e->N - r < nr ? e->N - r : nr);
            pack_panel(j->ks, e->wtype, e->base + (size_t)r * e->row_bytes, e->row_bytes, cols, nb, tmp,
                       (uint8_t *)e->panels + (size_t)q * pbytes);
        }
        if (atomic_fetch_sub(&j->left[j->unit_entry[u]], 1) == 1 && j->packed)
            j->packed(e->base, (size_t)(e->end - e->base), j->ctx);
    }
}

static void *pack_thread(void *arg) {
    pack_job *j = arg;
    uint8_t *tmp = loom_alloc_aligned(j->tmp_bytes, LOOM_ALIGN);
    if (tmp) pack_units(j, tmp); /* else the other threads take every unit */
    loom_free_aligned(tmp);
    return NULL;
}

loom_status loom_packed_weights_create_cb(const loom_pack_desc *d, int n, loom_isa isa, int nth,
                                          void (*packed)(const void *w, size_t bytes, void *ctx), void *ctx,
                                          loom_packed_weights **out) {
    LOOM_RETURN_IF(!out || (n > 0 && !d) || n < 0, LOOM_ERR_INVALID_ARG, "pack_weights: invalid arguments");
    *out = NULL;
    for (int i = 0; i < n; i++)
        LOOM_RETURN_IF(!d[i].w, LOOM_ERR_INVALID_ARG, "pack_weights: matrix %d has no data", i);
    const loom_gemm_q_kset *ks = loom_gemm_q_kset_for(isa);
    loom_packed_weights *p = calloc(1, sizeof *p);
    LOOM_RETURN_IF(!p, LOOM_ERR_NOMEM, "out of memory");
    p->entries = calloc((size_t)(n > 0 ? n : 1), sizeof *p->entries);
    size_t total = 0, tmp_bytes = 0;
    int n_units = 0;
    for (int i = 0; p->entries && i < n; i++) {
        if (isa <= LOOM_ISA_REF || !packable(d[i].wtype, d[i].N, d[i].K, d[i].ldw, ks)) continue;
        packed_entry *e = &p->entries[p->n++];
        e->row_bytes = loom_dtype_row_bytes(d[i].wtype, d[i].ldw);
        e->base = d[i].w, e->end = e->base + (size_t)d[i].N * e->row_bytes;
        e->N = d[i].N, e->K = d[i].K, e->ldw = d[i].ldw, e->wtype = d[i].wtype, e->ks = ks;
        total += loom_matmul_packed_bytes(d[i].wtype, d[i].N, d[i].K, isa);
        size_t t = (size_t)(d[i].K / 32) * loom_gemm_q_panel_block_bytes(ks->nr);
        if (t > tmp_bytes) tmp_bytes = t;
        n_units += (int)(((d[i].N + ks->nr - 1) / ks->nr + UNIT_PANELS - 1) / UNIT_PANELS);
    }
    pack_job j = {.p = p, .ks = ks, .tmp_bytes = tmp_bytes, .n_units = n_units, .packed = packed, .ctx = ctx};
    uint8_t *tmp = p->n ? loom_alloc_aligned(tmp_bytes, LOOM_ALIGN) : NULL;
    p->block = p->n ? loom_alloc_aligned(total, LOOM_ALIGN) : NULL;
    j.unit_entry = malloc((size_t)(n_units + 1) * sizeof *j.unit_entry);
    j.unit_panel = malloc((size_t)(n_units + 1) * sizeof *j.unit_panel);
    j.left = malloc((size_t)(p->n + 1) * sizeof *j.left);
    if (!p->entries || !j.unit_entry || !j.unit_panel || !j.left || (p->n && (!tmp || !p->block))) {
        loom_free_aligned(tmp);
        free(j.unit_entry), free(j.unit_panel), free(j.left);
        p->n = 0; /* not in the table */
        loom_packed_weights_free(p);
        return loom_set_error(LOOM_ERR_NOMEM, "pack_weights: cannot allocate %zu bytes", total);
    }
    p->bytes = total;
    qsort(p->entries, (size_t)p->n, sizeof *p->entries, entry_cmp);
    loom_status s = LOOM_OK;
    for (int i = 1; i < p->n && s == LOOM_OK; i++)
        if (overlaps(&p->entries[i], &p->entries[i - 1]))
            s = loom_set_error(LOOM_ERR_INVALID_ARG, "pack_weights: two matrices share rows (at %p)",
                               (const void *)p->entries[i].base);
    /* every matrix's place in the block, and the units */
    uint8_t *o = p->block;
    int u = 0;
    for (int i = 0; i < p->n; i++) {
        packed_entry *e = &p->entries[i];
        int64_t np = (e->N + ks->nr - 1) / ks->nr;
        e->panels = o;
        o += (size_t)np * (size_t)(e->K / 32) * loom_gemm_q_packed_block_bytes(e->wtype, ks->nr);
        int k = 0;
        for (int64_t q = 0; q < np; q += UNIT_PANELS, k++) j.unit_entry[u] = i, j.unit_panel[u++] = q;
        atomic_init(&j.left[i], k);
    }
    atomic_init(&j.next, 0);
    if (s == LOOM_OK && p->n > 0) {
        enum { MAX_HELPERS = 63 };
        pthread_t th[MAX_HELPERS];
        int helpers = nth - 1 < n_units - 1 ? nth - 1 : n_units - 1, started = 0;
        if (helpers > MAX_HELPERS) helpers = MAX_HELPERS;
        while (started < helpers && pthread_create(&th[started], NULL, pack_thread, &j) == 0) started++;
        pack_units(&j, tmp); /* with as many helpers as could start, or alone */
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    }
    loom_free_aligned(tmp);
    free(j.unit_entry), free(j.unit_panel), free(j.left);
    if (s == LOOM_OK && p->n > 0) s = table_add(p);
    if (s != LOOM_OK) {
        p->n = 0; /* not in the table */
        loom_packed_weights_free(p);
        return s;
    }
    *out = p;
    return LOOM_OK;
}

size_t loom_packed_weights_bytes(const loom_packed_weights *p) { return p ? p->bytes : 0; }
int loom_packed_weights_count(const loom_packed_weights *p) { return p ? p->n : 0; }

size_t loom_packed_weights_source(const loom_packed_weights *p, int i, const void **w) {
    if (!p || i < 0 || i >= p->n) return 0;
    *w = p->entries[i].base;
    return (size_t)(p->entries[i].end - p->entries[i].base);
}

void loom_packed_weights_free(loom_packed_weights *p) {
    if (!p) return;
    if (p->n) table_remove(p);
    loom_free_aligned(p->block);
    free(p->entries);
    free(p);
}
