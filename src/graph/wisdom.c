/*
 * The wisdom file (docs/tuning.md): which kernel variant each op family uses
 * on one CPU model, with the timings behind the choice. JSON (libcjson):
 *   {"format": "loom-wisdom 1", "cpu": brand, "cpu_key": "AuthenticAMD-25-17",
 *    "families": {"gemm.bf16": {"choice": "native", "us": {"native": 270.1,
 *                 "widen": 556.3}, "problem": "...", "kernels": "0.1.0 r1"}, ...}}
 * An entry written by other kernels (another loom version or variants
 * revision), or naming an unknown family or variant, is left out and measured
 * again; anything but an object of this format is an error.
 */
#include "graph/tune.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cpu.h"
#include "base/file.h"
#include "base/status.h"

#define WISDOM_FORMAT "loom-wisdom 1"

/* "0.1.0 r1": the kernels that made a measurement. */
static const char *kernels_id(void) {
    static char id[48];
    if (!id[0]) snprintf(id, sizeof id, "%s r%d", loom_version(), LOOM_VARIANTS_REVISION);
    return id;
}

void loom_cpu_key(char *buf, size_t cap) {
    const loom_cpu_features *c = loom_cpu_get();
    char raw[64];
    snprintf(raw, sizeof raw, "%s-%d-%d", c->vendor[0] ? c->vendor : "cpu", c->family, c->model);
    size_t j = 0;
    for (size_t i = 0; raw[i] && j + 1 < cap; i++) {
        char ch = raw[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        buf[j++] = ok ? ch : '_';
    }
    if (cap) buf[j] = '\0';
}

loom_wisdom_mode loom_wisdom_mode_get(char *path, size_t cap) {
    const char *env = getenv("LOOM_WISDOM");
    if (env && strcmp(env, "off") == 0) return LOOM_WISDOM_OFF;
    int ro = env && strcmp(env, "readonly") == 0;
    if (env && *env && !ro) {
        snprintf(path, cap, "%s", env);
        return LOOM_WISDOM_FILE;
    }
    char key[80];
    loom_cpu_key(key, sizeof key);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) snprintf(path, cap, "%s/loom/wisdom-%s.json", xdg, key);
    else if (home && *home) snprintf(path, cap, "%s/.cache/loom/wisdom-%s.json", home, key);
    else path[0] = '\0';
    return ro ? LOOM_WISDOM_READONLY : LOOM_WISDOM_FILE;
}

loom_status loom_wisdom_parse(const char *text, size_t len, loom_wisdom *w) {
    memset(w, 0, sizeof *w);
    cJSON *root = cJSON_ParseWithLength(text, len);
    LOOM_RETURN_IF(!root, LOOM_ERR_FORMAT, "wisdom: not JSON (near byte %td)",
                   cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - text : (ptrdiff_t)0);
    loom_status s = LOOM_OK;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *fams = cJSON_GetObjectItemCaseSensitive(root, "families");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, WISDOM_FORMAT) != 0) {
        s = loom_set_error(LOOM_ERR_FORMAT, "wisdom: \"format\" is not \"%s\"", WISDOM_FORMAT);
        goto done;
    }
    if (!cJSON_IsObject(fams)) {
        s = loom_set_error(LOOM_ERR_FORMAT, "wisdom: \"families\" must be an object");
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, fams) {
        int f = loom_variant_family_parse(e->string);
        if (f < 0 || !cJSON_IsObject(e)) continue; /* a family of another version: ignored */
        const cJSON *ch = cJSON_GetObjectItemCaseSensitive(e, "choice");
        const cJSON *ver = cJSON_GetObjectItemCaseSensitive(e, "kernels");
        const cJSON *us = cJSON_GetObjectItemCaseSensitive(e, "us");
        int v = cJSON_IsString(ch) ? loom_variant_parse((loom_variant_family)f, ch->valuestring) : -1;
        /* measured by another version of the kernels: measured again */
        if (v < 0 || !cJSON_IsString(ver) || strcmp(ver->valuestring, kernels_id()) != 0) continue;
        loom_wisdom_entry *we = &w->fam[f];
        we->present = 1, we->choice = v;
        for (int i = 0; i < loom_variant_count((loom_variant_family)f); i++) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(us, loom_variant_name((loom_variant_family)f, i));
            we->us[i] = cJSON_IsNumber(t) && t->valuedouble > 0 && t->valuedouble < 1e9 ? t->valuedouble : -1.0;
        }
    }
done:
    cJSON_Delete(root);
    return s;
}

char *loom_wisdom_format(const loom_wisdom *w, const char *const *what) {
    cJSON *root = cJSON_CreateObject(), *fams = cJSON_CreateObject();
    char key[80];
    loom_cpu_key(key, sizeof key);
    cJSON_AddStringToObject(root, "format", WISDOM_FORMAT);
    cJSON_AddStringToObject(root, "cpu", loom_cpu_get()->brand);
    cJSON_AddStringToObject(root, "cpu_key", key);
    cJSON_AddItemToObject(root, "families", fams);
    for (int f = 0; f < LOOM_VF_COUNT; f++) {
        const loom_wisdom_entry *we = &w->fam[f];
        if (!we->present) continue;
        cJSON *e = cJSON_CreateObject(), *us = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "choice", loom_variant_name((loom_variant_family)f, we->choice));
        for (int v = 0; v < loom_variant_count((loom_variant_family)f); v++)
            if (we->us[v] > 0)
                cJSON_AddNumberToObject(us, loom_variant_name((loom_variant_family)f, v), round(we->us[v] * 10) / 10);
        cJSON_AddItemToObject(e, "us", us);
        if (what && what[f]) cJSON_AddStringToObject(e, "problem", what[f]);
        cJSON_AddStringToObject(e, "kernels", kernels_id());
        cJSON_AddItemToObject(fams, loom_variant_family_name((loom_variant_family)f), e);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

/* mkdir -p of path's directory. */
static int make_dirs(const char *path) {
    char d[1024];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash) return 0;
    *slash = '\0';
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(d, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    return mkdir(d, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Written whole to a temporary file and renamed over the old one, so a reader
 * (another process tuning at the same time) sees the old file or the new. */
loom_status loom_wisdom_write(const char *path, const loom_wisdom *w, const char *const *what) {
    char *text = loom_wisdom_format(w, what);
    LOOM_RETURN_IF(!text, LOOM_ERR_NOMEM, "wisdom: out of memory");
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    loom_status s = LOOM_OK;
    FILE *f = make_dirs(path) == 0 ? fopen(tmp, "w") : NULL;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) == EOF) s = LOOM_ERR_IO;
    if (f && fclose(f) != 0) s = LOOM_ERR_IO;
    if (s == LOOM_OK && rename(tmp, path) != 0) s = LOOM_ERR_IO;
    if (s != LOOM_OK) {
        if (f) unlink(tmp);
        loom_set_error(LOOM_ERR_IO, "wisdom: cannot write %s: %s", path, strerror(errno));
    }
    free(text);
    return s;
}

loom_status loom_wisdom_read(const char *path, loom_wisdom *w) {
    memset(w, 0, sizeof *w);
    char *text = NULL;
    size_t len = 0;
    loom_status s = loom_read_file(path, (size_t)1 << 20, &text, &len);
    if (s == LOOM_OK) s = loom_wisdom_parse(text, len, w);
    free(text);
    return s;
}
