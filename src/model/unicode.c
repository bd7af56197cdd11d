#include "model/unicode.h"

#include "model/unicode_data.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

int loom_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *p = (const unsigned char *)s;
    unsigned char b = p[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    int len;
    uint32_t c, min;
    if ((b & 0xE0) == 0xC0) {
        len = 2, c = b & 0x1F, min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
        len = 3, c = b & 0x0F, min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
        len = 4, c = b & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        c = c << 6 | (p[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

int loom_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t loom_utf8_check(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = loom_utf8_decode(s + i, n - i, &cp);
        if (k == 0) return i;
        i += (size_t)k;
    }
    return n;
}

loom_uc_class loom_uc_class_of(uint32_t cp) {
    if (cp > 0x10FFFF) return UC_UNASSIGNED;
    /* Last range whose start is <= cp. */
    size_t lo = 0, hi = N_OF(ucd_class_ranges);
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((ucd_class_ranges[mid] >> 3) <= cp) lo = mid;
        else hi = mid;
    }
    return (loom_uc_class)(ucd_class_ranges[lo] & 7);
}

int loom_uc_is_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

uint32_t loom_uc_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    size_t lo = 0, hi = N_OF(ucd_lower_runs);
    while (lo < hi) {  /* first run starting after cp */
        size_t mid = (lo + hi) / 2;
        if (ucd_lower_runs[mid].first <= cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return cp;
    const ucd_lower_run *r = &ucd_lower_runs[lo - 1];
    uint32_t k = cp - r->first;
    if (k % r->stride == 0 && k / r->stride < r->count) return (uint32_t)((int32_t)cp + r->delta);
    return cp;
}

int loom_uc_strip_accents(uint32_t cp, uint32_t out[3]) {
    if (cp < 0xC0) {
        out[0] = cp;
        return 1;
    }
    /* Hangul syllables decompose algorithmically into conjoining jamo. */
    if (cp >= 0xAC00 && cp <= 0xD7A3) {
        uint32_t s = cp - 0xAC00, t = s % 28;
        out[0] = 0x1100 + s / (21 * 28);
        out[1] = 0x1161 + (s % (21 * 28)) / 28;
        if (t == 0) return 2;
        out[2] = 0x11A7 + t;
        return 3;
    }
    size_t lo = 0, hi = N_OF(ucd_strip1);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ucd_strip1[mid][0] < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < N_OF(ucd_strip1) && ucd_strip1[lo][0] == cp) {
        out[0] = ucd_strip1[lo][1];
        return 1;
    }
    for (size_t i = 0; i < N_OF(ucd_stripn); i++) {
        if (ucd_stripn[i].cp != cp) continue;
        for (uint32_t j = 0; j < ucd_stripn[i].n; j++) out[j] = ucd_stripn[i].out[j];
        return (int)ucd_stripn[i].n;
    }
    /* A lone nonspacing mark is removed too. */
    if (loom_uc_class_of(cp) == UC_MARK_NS) return 0;
    out[0] = cp;
    return 1;
}
