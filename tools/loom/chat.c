/* loom chat: an interactive conversation with a chat model. One line of
 * stdin is one user message (a line ending in '\' continues on the next);
 * the reply streams to stdout token by token; Ctrl-D (end of input) ends,
 * Ctrl-C stops the reply (at the prompt, or twice within a second, it quits).
 * Each turn is a request to the batch engine (one sequence) whose prompt is
 * the whole conversation so far; the engine's prefix cache holds the blocks
 * of the turns before (the previous replies' included), so a turn computes
 * little more than its own tokens. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"

typedef struct chat_state {
    loom_model *model;
    loom_tokenizer *tok;
    loom_engine *eng;
    loom_request_params rp; /* sampling (the seed moves on by one a turn), -r stops */
    loom_chat_template *tmpl;
    const char *system;
    int32_t *ids;       /* [ids_cap] one turn's tokens */
    size_t ids_cap;
    int32_t *hist;      /* [n_ctx] the conversation's tokens (turns and replies) */
    int n_ctx;
    int pos;            /* tokens in the conversation */
    int turns;
    int first;          /* next turn starts the conversation */
    int n_predict;      /* reply limit in tokens */
    int verbose;
} chat_state;

/* Ctrl-C. During a reply (its prefill included) it asks the reply to stop;
 * at the prompt, or a second time within a second while the first has not
 * been acted on (a long forward pass), it ends the program at once, as
 * llama.cpp does: nothing is left to save. Only async-signal-safe calls. */
static volatile sig_atomic_t g_replying, g_stop_reply;
static struct timespec g_last_sigint;  /* touched by the handler only */

static void on_sigint(int sig) {
    (void)sig;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double gap = (double)(now.tv_sec - g_last_sigint.tv_sec) + (now.tv_nsec - g_last_sigint.tv_nsec) * 1e-9;
    g_last_sigint = now;
    if (!g_replying || (g_stop_reply && gap < 1.0)) {
        static const char nl = '\n';
        ssize_t w = write(STDERR_FILENO, &nl, 1);
        (void)w;
        _exit(130);
    }
    g_stop_reply = 1;
}

static int catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  /* reads and writes go on after a reply is stopped */
    return sigaction(SIGINT, &sa, NULL);
}

/* Reads one message (joining lines that end in '\'); NULL at end of input. */
static char *read_message(FILE *in) {
    char *msg = NULL, *line = NULL;
    size_t len = 0, cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, in)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        int more = n > 0 && line[n - 1] == '\\';
        if (more) line[--n] = '\n';
        char *m = realloc(msg, len + (size_t)n + 1);
        if (!m) break;
        msg = m;
        memcpy(msg + len, line, (size_t)n);
        len += (size_t)n;
        msg[len] = '\0';
        if (!more) break;
    }
    free(line);
    return msg;
}

/* Appends the ids of text[0..len) (control tokens written in it parsed). */
static int encode_piece(chat_state *c, const char *text, size_t len, int flags, int *n) {
    int got = 0;
    if (loom_tokenizer_encode_ex(c->tok, text, len, flags, c->ids + *n, (int)(c->ids_cap - (size_t)*n),
                                 &got) != LOOM_OK) {
        cli_fail("chat", "cannot tokenize the message");
        return 1;
    }
    *n += got;
    return 0;
}

/* Encodes the turn's text; 1 on error (message printed). Llama 2's "<s>" and
 * "</s>" become the vocabulary's BOS and EOS ids whatever their token types
 * say (converted vocabularies may not mark them as control tokens). */
static int encode_turn(chat_state *c, const char *text, int *n) {
    size_t len = strlen(text);
    if (len + 4 > c->ids_cap) {  /* at most one id per byte, plus BOS */
        int32_t *p = len + 4 < (size_t)1 << 28 ? realloc(c->ids, (len + 4) * sizeof *p) : NULL;
        if (!p) {
            fprintf(stderr, "loom chat: the message of %zu bytes is too long\n", len);
            return 1;
        }
        c->ids = p;
        c->ids_cap = len + 4;
    }
    *n = 0;
    int flags = LOOM_TOK_PARSE_SPECIAL;
    const char *name = loom_chat_template_name(c->tmpl);
    if (strcmp(name, "llama2") != 0 && strcmp(name, "mistral") != 0) {
        /* chatml, qwen3 and phi3 carry no BOS in their text: add it when the
         * vocabulary asks; llama3's text starts with <|begin_of_text|>, gemma's with <bos> */
        if (c->first && strcmp(name, "llama3") != 0 && strcmp(name, "gemma") != 0 && loom_tokenizer_add_bos(c->tok))
            flags |= LOOM_TOK_BOS;
        return encode_piece(c, text, len, flags, n);
    }
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *b = strstr(p, "<s>"), *e = strstr(p, "</s>");
        const char *mark = b && (!e || b < e) ? b : e;
        size_t seg = mark ? (size_t)(mark - p) : (size_t)(end - p);
        if (seg && encode_piece(c, p, seg, flags, n)) return 1;
        if (!mark) break;
        int id = mark == b ? loom_tokenizer_bos(c->tok) : loom_tokenizer_eos(c->tok);
        if (id >= 0) c->ids[(*n)++] = id;
        p = mark + (mark == b ? 3 : 4);
    }
    return 0;
}

/* One turn: render, run, stream the reply. 0 ok, 1 on a message that was
 * refused (the conversation goes on), -1 on a fatal error. */
static int chat_reply(chat_state *c, const char *user);
static int chat_turn(chat_state *c, const char *user) {
    g_stop_reply = 0;
    g_replying = 1;
    int rc = chat_reply(c, user);
    g_replying = 0;
    return rc;
}

static int chat_reply(chat_state *c, const char *user) {
    char *text = NULL;
    int n = 0;
    if (loom_chat_render_turn(c->tmpl, c->first, c->system, user, &text) != LOOM_OK)
        return cli_fail("chat", "cannot render the chat template"), -1;
    int rc = encode_turn(c, text, &n);
    free(text);
    if (rc) return 1;
    if (!c->first && c->pos + n + 1 > c->n_ctx) {
        fprintf(stderr, "loom chat: the context is full (%d of %d tokens); starting a new "
                        "conversation (raise -c for longer ones)\n", c->pos, c->n_ctx);
        c->first = 1;
        c->pos = 0;
        if (loom_chat_render_turn(c->tmpl, 1, c->system, user, &text) != LOOM_OK)
            return cli_fail("chat", "cannot render the chat template"), -1;
        rc = encode_turn(c, text, &n);
        free(text);
        if (rc) return 1;
    }
    if (c->pos + n + 1 > c->n_ctx) {
        fprintf(stderr, "loom chat: this message is %d tokens; with the conversation it does not fit "
                        "the context of %d tokens (-c)\n", n, c->n_ctx);
        return 1;
    }
    /* the request: the conversation so far and this turn; the reply keeps one
     * position for the template's close, which the next turn's text starts with */
    memcpy(c->hist + c->pos, c->ids, (size_t)n * sizeof *c->ids);
    int n_prompt = c->pos + n, room = c->n_ctx - 1 - n_prompt;
    loom_request_params rp = c->rp;
    rp.sampling.seed += (uint64_t)c->turns;
    rp.max_tokens = c->n_predict < room ? c->n_predict : room;
    const int64_t id = c->turns++;
    if (loom_engine_add(c->eng, id, c->hist, n_prompt, &rp) != LOOM_OK)
        return cli_fail("chat", "cannot run the message"), -1;
    c->pos = n_prompt;
    c->first = 0;
    double t0 = cli_time_s(), t1 = t0;
    int n_gen = 0, first = 1, cancelled = 0;
    loom_finish_reason why = LOOM_FINISH_NONE;
    while (loom_engine_pending(c->eng)) {
        if (g_stop_reply && !cancelled) {
            loom_engine_cancel(c->eng, id); /* finishes at the next step */
            cancelled = 1;
        }
        const loom_engine_event *ev;
        int n_ev;
        if (loom_engine_step(c->eng, &ev, &n_ev) != LOOM_OK) return cli_fail("chat", "forward pass failed"), -1;
        for (int i = 0; i < n_ev; i++) {
            if (first) t1 = cli_time_s(), first = 0;
            if (ev[i].token >= 0) c->hist[c->pos++] = ev[i].token, n_gen++;
            fwrite(ev[i].text, 1, ev[i].text_len, stdout);
            fflush(stdout);
            if (ev[i].finish) why = ev[i].finish;
            if (ev[i].finish == LOOM_FINISH_ERROR) {
                fprintf(stderr, "loom chat: %s\n", ev[i].error ? ev[i].error : "the reply failed");
                return -1;
            }
        }
    }
    double t2 = cli_time_s();
    if (why == LOOM_FINISH_CANCELLED)
        fprintf(stderr, "%sloom chat: reply stopped (Ctrl-C at the prompt quits)\n", n_gen ? "\n" : "");
    printf("\n");
    fflush(stdout);
    int cut = why == LOOM_FINISH_LENGTH && n_gen >= c->n_predict;
    if (why == LOOM_FINISH_LENGTH && !cut)
        fprintf(stderr, "loom chat: the context of %d tokens is full; reply cut\n", c->n_ctx);
    if (cut && c->verbose) fprintf(stderr, "loom chat: reply cut at -n %d tokens\n", c->n_predict);
    if (c->verbose) {
        loom_engine_stats st = loom_engine_get_stats(c->eng);
        fprintf(stderr, "[prompt %d tokens, %.1f tok/s | reply %d tokens, %.1f tok/s | context %d/%d | "
                        "prefix cache: %ld blocks reused]\n",
                n, n / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_gen,
                n_gen > 1 ? (n_gen - 1) / (t2 - t1 > 0 ? t2 - t1 : 1e-9) : 0.0, c->pos, c->n_ctx, st.prefix_hits);
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *tok_path = NULL, *system = NULL, *system_file = NULL, *tmpl_name = NULL,
               *mode = NULL, *kv_dtype = NULL, *act = NULL;
    int n_predict = 512, threads = loom_model_default_params().n_threads, n_ctx = 4096, top_k = 40, verbose = 0,
        last_n = 64;
    float temp = 0.7f, top_p = 0.9f, min_p = 0.0f, penalty = 1.0f;
    arg_u64 seed = {0};  /* not given: taken from the clock */
    arg_list stops = {0};
    const arg_opt opts[] = {
        {"-m", "--model", ARG_STR, &model_path, "MODEL",
         "GGUF chat model (default: SmolLM2-135M-Instruct from scripts/fetch-models.sh)"},
        {"-z", "--tokenizer", ARG_STR, &tok_path, "TOKENIZER", "tokenizer (default: the model's own)"},
        {"-s", "--system", ARG_STR, &system, "TEXT", "system message (default: the template's)"},
        {"-sysf", "--system-prompt-file", ARG_STR, &system_file, "FILE", "the system message from FILE"},
        {NULL, "--chat-template", ARG_STR, &tmpl_name, "NAME",
         "chatml, qwen3, llama2, llama3, mistral, phi3 or gemma (default: from the model's template)"},
        {"-n", "--n-predict", ARG_INT, &n_predict, "N", "longest reply in tokens (default 512)"},
        {NULL, "--temp", ARG_FLOAT, &temp, "T", "temperature, 0 = greedy (default 0.7)"},
        {NULL, "--top-k", ARG_INT, &top_k, "K", "keep the K most likely tokens, 0 = off (default 40)"},
        {NULL, "--top-p", ARG_FLOAT, &top_p, "P", "nucleus sampling mass in (0,1] (default 0.9)"},
        {NULL, "--min-p", ARG_FLOAT, &min_p, "P", "keep tokens with p >= P * p_max, 0 = off (default 0)"},
        {NULL, "--repeat-penalty", ARG_FLOAT, &penalty, "X",
         "penalize the tokens of the last --repeat-last-n, 1 = off (default 1.0)"},
        {NULL, "--repeat-last-n", ARG_INT, &last_n, "N", "tokens the penalty looks back at, -1 = the context (default 64)"},
        {"-r", "--reverse-prompt", ARG_STR_LIST, &stops, "TEXT",
         "end the reply when it contains TEXT, which is not printed (repeatable)"},
        {NULL, "--seed", ARG_U64_SET, &seed, "S", "random seed (default: from the clock)"},
        {"-t", "--threads", ARG_INT, &threads, "N", "threads (default: the CPUs loom may run on)"},
        {"-c", "--ctx-size", ARG_INT, &n_ctx, "N",
         "context length, 0 = the model's (default 4096, at most the model's)"},
        {NULL, "--kv-dtype", ARG_STR, &kv_dtype, "TYPE", CLI_KV_DTYPE_HELP},
        {NULL, "--act-precision", ARG_STR, &act, "q8|full", CLI_ACT_PRECISION_HELP},
        {NULL, "--mode", ARG_STR, &mode, "MODE",
         "step_by_step, fused or fused_with_checkpoints (default: $LOOM_MODE, the rules', fused)"},
        {"-v", "--verbose", ARG_FLAG, &verbose, NULL, "print speed and context use after each reply"},
    };
    const char *usage = "[-m MODEL] [-s SYSTEM | -sysf FILE] [--chat-template NAME] [-n N] [--temp T] "
                        "[--top-k K] [--top-p P] [--min-p P] [--repeat-penalty X] [--repeat-last-n N] "
                        "[-r TEXT].. [--seed S] [-t N] [-c N] [--kv-dtype T] [--act-precision q8|full] [--mode MODE] [-v]";
    int r = args_parse("chat", usage, opts, (int)(sizeof opts / sizeof opts[0]), argc, argv, 2);
    if (r != 0) return r > 0 ? 0 : 2;
    if (!seed.set) seed.value = cli_clock_seed();
    if (threads <= 0 || n_predict <= 0 || n_ctx < 0) {
        fprintf(stderr, "loom chat: -t and -n must be >= 1 and -c >= 0 (got %d, %d, %d)\n", threads,
                n_predict, n_ctx);
        return 1;
    }
    if (!(penalty > 0.0f) || last_n < -1) {
        fprintf(stderr, "loom chat: %s\n", last_n < -1 ? "--repeat-last-n must be >= -1"
                                                       : "--repeat-penalty must be > 0 (1 = off)");
        return 1;
    }
    if (system && system_file) {
        fprintf(stderr, "loom chat: -s and --system-prompt-file both give the system message; use one\n");
        return 1;
    }
    if (system_file && strcmp(system_file, "-") == 0) {
        fprintf(stderr, "loom chat: --system-prompt-file -: stdin holds the conversation; give a file\n");
        return 1;
    }
    chat_state c = {0};
    if (tmpl_name) {  /* its errors before the model loads; made again below */
        if (loom_chat_template_init(tmpl_name, &c.tmpl) != LOOM_OK) return cli_fail("chat", "--chat-template");
        loom_chat_template_free(c.tmpl);
        c.tmpl = NULL;
    }
    loom_model_params mp = loom_model_default_params();
    mp.n_threads = threads;
    if (cli_kv_dtype("chat", kv_dtype, &mp.kv_dtype)) return 1;
    if (cli_act_precision("chat", act, &mp.act_precision)) return 1;
    if (loom_model_params_set_mode(&mp, mode) != LOOM_OK) return cli_fail("chat", "--mode");
    /* --repeat-last-n -1 (the context) is set once the context is known */
    loom_sampler_params sp = {.temperature = temp, .top_k = top_k, .top_p = top_p, .seed = seed.value,
                              .min_p = min_p, .repeat_penalty = penalty, .repeat_last_n = last_n < 0 ? 1 : last_n};
    loom_sampler *probe_sampler = NULL;
    if (loom_sampler_init(&probe_sampler, 1, &sp) != LOOM_OK) return cli_fail("chat", "bad sampling option");
    loom_sampler_free(probe_sampler);
    if (stops.n > LOOM_MAX_STOPS) {
        fprintf(stderr, "loom chat: at most %d -r strings, got %d\n", LOOM_MAX_STOPS, stops.n);
        return 1;
    }
    loom_stop_filter *probe = NULL;  /* -r's errors before the model loads */
    if (loom_stop_filter_init(&probe, stops.v, stops.n) != LOOM_OK) return cli_fail("chat", "-r");
    loom_stop_filter_free(probe);

    /* the model's trained context caps -c */
    char def[1024];
    if (cli_resolve_model("chat", &model_path, def, sizeof def)) return 1;
    char *system_text = NULL;
    if (system_file) {
        if (cli_read_text("chat", "--system-prompt-file", system_file, &system_text)) return 1;
        system = system_text;
    }
    mp.n_ctx = n_ctx;
    mp.n_ctx_clamp = 1;
    int rc = 1;
    if (cli_load("chat", model_path, tok_path, &mp, &c.model, &c.tok)) goto done;
    if (tmpl_name) {
        if (loom_chat_template_init(tmpl_name, &c.tmpl) != LOOM_OK) {
            cli_fail("chat", "--chat-template");
            goto done;
        }
    } else {
        if (loom_chat_template_from_model(c.model, &c.tmpl) != LOOM_OK) {
            cli_fail("chat", "chat template");
            goto done;
        }
    }
    loom_model_info info = loom_model_get_info(c.model);
    c.n_ctx = info.n_ctx;
    c.system = system;
    c.first = 1;
    c.n_predict = n_predict;
    c.verbose = verbose;
    c.rp = loom_request_default_params();
    c.rp.sampling = sp;
    c.rp.sampling.repeat_last_n = last_n < 0 ? c.n_ctx : last_n;
    for (int i = 0; i < stops.n; i++) c.rp.stops[c.rp.n_stops++] = stops.v[i];
    c.ids_cap = (size_t)c.n_ctx + 4;
    c.ids = malloc(c.ids_cap * sizeof *c.ids);
    c.hist = malloc(((size_t)c.n_ctx + 4) * sizeof *c.hist);
    if (!c.ids || !c.hist) {
        cli_fail("chat", "out of memory");
        goto done;
    }
    /* one generation path: the batch engine, one sequence over the context */
    loom_engine_params ep = loom_engine_default_params();
    ep.n_seq_max = 1, ep.seq_len = c.n_ctx;
    if (loom_engine_create(c.model, c.tok, &ep, &c.eng) != LOOM_OK) {
        cli_fail("chat", "cannot start the engine");
        goto done;
    }
    if (catch_sigint() != 0) {
        fprintf(stderr, "loom chat: cannot catch Ctrl-C (sigaction failed)\n");
        goto done;
    }
    int tty = isatty(0);
    if (tty)
        fprintf(stderr, "loom chat: %s, template %s, context %d. Type a message; Ctrl-C stops a reply, "
                        "Ctrl-D ends.\n", model_path, loom_chat_template_name(c.tmpl), c.n_ctx);
    if (verbose) fprintf(stderr, "loom chat: seed %llu\n", (unsigned long long)seed.value);
    for (;;) {
        if (tty) fprintf(stderr, "> ");
        char *msg = read_message(stdin);
        if (!msg) break;
        int t = msg[0] ? chat_turn(&c, msg) : 0;
        free(msg);
        if (t < 0) goto done;
    }
    if (tty) fprintf(stderr, "\n");
    rc = 0;
done:
    free(system_text);
    loom_engine_free(c.eng);
    free(c.ids);
    free(c.hist);
    loom_chat_template_free(c.tmpl);
    loom_tokenizer_free(c.tok);
    loom_model_free(c.model);
    return rc;
}
