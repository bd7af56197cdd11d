/* loom batch: offline batch inference. Each line of a JSONL file is a request
 * (serve/batch_request.h); all of them run through the batch engine at once,
 * --parallel sequences at a time, and each gets one output line, in input
 * order: {"id", "text", "finish_reason", "usage": {"prompt_tokens",
 * "completion_tokens"}}, or {"id", "error": {"message"}} for a line that could
 * not run. A progress line on stderr: requests done / total, tokens/s, KV
 * blocks in use. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "loom.h"

typedef struct job {
    loom_batch_request req;
    char *error;          /* the line could not run (parse or add error), or it ended in error */
    char *text;           /* generated text */
    size_t n_text, cap_text;
    const char *finish;
    int n_prompt, n_gen;
    long line;            /* its line in the input */
} job;

static int append(job *j, const char *t, size_t n) {
    if (j->n_text + n + 1 > j->cap_text) {
        size_t c = j->cap_text ? 2 * j->cap_text : 256;
        while (c < j->n_text + n + 1) c *= 2;
        char *p = realloc(j->text, c);
        if (!p) return 0;
        j->text = p, j->cap_text = c;
    }
    memcpy(j->text + j->n_text, t, n);
    j->n_text += n;
    j->text[j->n_text] = '\0';
    return 1;
}

static char *dup_msg(const char *m) {
    size_t n = strlen(m);
    char *d = malloc(n + 1);
    if (d) memcpy(d, m, n + 1);
    return d;
}

/* Reads the whole input (path "-": stdin). */
static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, 65536, f);
        n += r;
        if (r < 65536) break;
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (err) {
        free(buf);
        return NULL;
    }
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static void print_result(FILE *out, const job *j, long line) {
    cJSON *o = cJSON_CreateObject();
    cJSON *id = j->req.id_json ? cJSON_Parse(j->req.id_json) : NULL;
    cJSON_AddItemToObject(o, "id", id ? id : cJSON_CreateNumber((double)line));
    if (j->error && !j->finish) {
        cJSON *e = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(e, "message", j->error);
    } else {
        cJSON_AddStringToObject(o, "text", j->text ? j->text : "");
        cJSON_AddStringToObject(o, "finish_reason", j->finish ? j->finish : "error");
        if (j->error) cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "error"), "message", j->error);
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    }
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(out, "%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
}

static void progress(int done, int total, double tps, const loom_engine_stats *st, int final) {
    int tty = isatty(STDERR_FILENO);
    if (!tty && !final) return;
    fprintf(stderr, "%sbatch: %d/%d requests done | %.1f tok/s | KV blocks %d/%d in use%s", tty ? "\r" : "", done, total,
            tps, st->blocks_used, st->n_blocks, final ? "\n" : "");
    fflush(stderr);
}

int cmd_batch(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *in_path = NULL, *out_path = NULL, *mode = NULL,
               *kv_dtype = NULL, *tmpl_name = NULL;
    int threads = loom_model_default_params().n_threads, parallel = 16, n_ctx = 0, n_batch = 0, no_cache = 0,
        invariant = 0;
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL", "model (default: SmolLM2-135M-Instruct)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER", "tokenizer (default: the model's own)"},
        {"-f", "--file", ARG_STR, &in_path, "FILE", "JSONL requests, one per line (- for stdin)"},
        {"-o", "--output", ARG_STR, &out_path, "FILE", "write the results here (default: stdout)"},
        {"-np", "--parallel", ARG_INT, &parallel, "N", "sequences that run at once (default 16)"},
        {"-c", "--ctx-size", ARG_INT, &n_ctx, "N", "KV positions of all sequences together (default: the model's context)"},
        {"-b", "--batch-size", ARG_INT, &n_batch, "N", "token rows one step may run (default 512)"},
        {NULL, "--no-prefix-cache", ARG_FLAG, &no_cache, NULL, "do not reuse the KV blocks of shared prompt prefixes"},
        {NULL, "--batch-invariant", ARG_FLAG, &invariant, NULL,
         "bit-identical results whatever runs alongside, however chunked, at any thread count (docs/batch.md)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default: the CPUs loom may run on)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--mode", ARG_STR, &mode, "MODE", "step_by_step, fused or fused_with_checkpoints (default fused)"},
        {NULL, "--chat-template", ARG_STR, &tmpl_name, "NAME",
         "chatml, qwen3, llama2, llama3, mistral, phi3 or gemma for \"messages\" (default: the model's own)"},
    };
    const char *usage = "-f FILE [-o FILE] [-m MODEL] [-z TOKENIZER] [-np N] [-c N] [-b N] [--no-prefix-cache] [--batch-invariant] [-t N] "
                        "[--kv-dtype T] [--mode MODE] [--chat-template NAME]";
    int r = args_parse("batch", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!in_path) {
        fprintf(stderr, "loom batch: give the requests with -f FILE (- for stdin)\n");
        return 2;
    }
    if (threads < 1 || parallel < 1 || n_ctx < 0 || n_batch < 0) {
        fprintf(stderr, "loom batch: -t and -np must be >= 1, -c and -b >= 0\n");
        return 1;
    }
    size_t in_len = 0;
    char *input = read_all(in_path, &in_len);
    if (!input) {
        fprintf(stderr, "loom batch: -f: cannot read '%s'\n", in_path);
        return 1;
    }
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = threads;
    if (cli_kv_dtype("batch", kv_dtype, &mp.kv_dtype) || loom_model_params_set_mode(&mp, mode) != LOOM_OK) {
        free(input);
        return mode ? cli_fail("batch", "--mode") : 1;
    }
    loom_model *model = NULL;
    loom_tokenizer *tok = NULL;
    loom_engine *eng = NULL;
    loom_chat_template *tmpl = NULL;
    job *jobs = NULL;
    int n_jobs = 0, rc = 1;
    FILE *out = stdout;
    if (cli_load("batch", model_path, tok_path, &mp, &model, &tok)) goto done;
    int have_tmpl = tmpl_name ? loom_chat_template_init(tmpl_name, &tmpl) == LOOM_OK
                              : loom_chat_template_from_model(model, &tmpl) == LOOM_OK;
    if (tmpl_name && !have_tmpl) {
        cli_fail("batch", "--chat-template");
        goto done;
    }
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = parallel, ep.n_ctx = n_ctx, ep.prefix_cache = !no_cache, ep.batch_invariant = invariant;
    if (n_batch) ep.n_batch = n_batch;
    if (loom_engine_create(model, tok, &ep, &eng) != LOOM_OK) {
        cli_fail("batch", "cannot start the engine");
        goto done;
    }
    /* the lines: each a request, or an error of its own */
    int cap = 64;
    jobs = calloc((size_t)cap, sizeof *jobs);
    uint64_t seed0 = cli_clock_seed();
    long line_no = 0;
    int total = 0;
    for (char *p = input; jobs && p < input + in_len;) {
        char *nl = memchr(p, '\n', (size_t)(input + in_len - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(input + in_len - p);
        line_no++;
        char *line = p;
        p += len + (nl != NULL);
        size_t blank = 0;
        while (blank < len && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r')) blank++;
        if (blank == len) continue; /* empty lines are not requests */
        if (n_jobs == cap) {
            job *q = realloc(jobs, sizeof *q * (size_t)(2 * cap));
            if (!q) break;
            memset(q + cap, 0, sizeof *q * (size_t)cap);
            jobs = q, cap *= 2;
        }
        job *j = &jobs[n_jobs++];
        j->line = line_no;
        if (loom_batch_request_parse(line, len, line_no, &j->req) != LOOM_OK) {
            j->error = dup_msg(loom_last_error());
            continue;
        }
        if (!j->req.id_json) { /* the default id: the line number */
            char num[32];
            snprintf(num, sizeof num, "%ld", line_no);
            j->req.id_json = dup_msg(num); /* freed with the request (cJSON's allocator is malloc) */
        }
        char *text = j->req.prompt, *rendered = NULL;
        if (!text && !have_tmpl) {
            char msg[160];
            snprintf(msg, sizeof msg, "line %ld: \"messages\" need a chat template: the model has none (use --chat-template)", line_no);
            j->error = dup_msg(msg);
            continue;
        }
        if (!text && loom_chat_render(tmpl, j->req.msgs, j->req.n_msgs, 1, &rendered) != LOOM_OK) {
            char msg[320];
            snprintf(msg, sizeof msg, "line %ld: %s", line_no, loom_last_error());
            j->error = dup_msg(msg);
            continue;
        }
        /* the engine adds BOS when the vocabulary asks: not a second one from the template */
        const char *src = text ? text
                               : rendered + (loom_tokenizer_add_bos(tok) ? loom_chat_bos_length(tmpl, rendered) : 0);
        if (!j->req.has_seed) j->req.params.sampling.seed = seed0 + (uint64_t)line_no;
        loom_status s = loom_engine_add_text(eng, n_jobs - 1, src, strlen(src), &j->req.params, &j->n_prompt);
        free(rendered);
        if (s != LOOM_OK) { /* e.g. a prompt longer than the context: finish_reason "error" */
            char msg[320];
            snprintf(msg, sizeof msg, "line %ld: %s", line_no, loom_last_error());
            j->error = dup_msg(msg);
            j->finish = "error";
            continue;
        }
        total++;
    }
    if (out_path && !(out = fopen(out_path, "w"))) {
        fprintf(stderr, "loom batch: -o: cannot write '%s'\n", out_path);
        out = stdout;
        goto done;
    }
    double t0 = cli_time_s(), last = 0;
    long tokens = 0;
    int done_n = 0;
    while (loom_engine_pending(eng)) {
        const loom_engine_event *ev;
        int n_ev;
        if (loom_engine_step(eng, &ev, &n_ev) != LOOM_OK && n_ev == 0) {
            cli_fail("batch", "step failed");
            goto done;
        }
        for (int i = 0; i < n_ev; i++) {
            job *j = &jobs[ev[i].id];
            if (!append(j, ev[i].text, ev[i].text_len)) {
                fprintf(stderr, "loom batch: out of memory\n");
                goto done;
            }
            tokens += ev[i].token >= 0;
            j->n_gen = ev[i].n_generated;
            if (ev[i].finish) {
                j->finish = loom_finish_reason_name(ev[i].finish);
                if (ev[i].error) j->error = dup_msg(ev[i].error);
                done_n++;
            }
        }
        double now = cli_time_s();
        if (now - last > 0.1) {
            loom_engine_stats st = loom_engine_get_stats(eng);
            progress(done_n, total, tokens / (now - t0 > 0 ? now - t0 : 1e-9), &st, 0);
            last = now;
        }
    }
    double t1 = cli_time_s();
    loom_engine_stats st = loom_engine_get_stats(eng);
    progress(done_n, total, tokens / (t1 - t0 > 0 ? t1 - t0 : 1e-9), &st, 1);
    for (int i = 0; i < n_jobs; i++) print_result(out, &jobs[i], jobs[i].line);
    rc = ferror(out) ? 1 : 0;
    if (rc) fprintf(stderr, "loom batch: cannot write the results\n");
done:
    if (out != stdout && fclose(out) != 0) rc = 1;
    for (int i = 0; i < n_jobs; i++) {
        loom_batch_request_free(&jobs[i].req);
        free(jobs[i].error), free(jobs[i].text);
    }
    free(jobs);
    free(input);
    loom_engine_free(eng);
    loom_chat_template_free(tmpl);
    loom_tokenizer_free(tok);
    loom_model_free(model);
    return rc;
}
