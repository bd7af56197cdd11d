/* Chat templates: whole conversations match the texts the models' Jinja
 * templates produce (written out by hand below from SmolLM2-Instruct's and
 * Meta's Llama 2 chat templates), per-turn rendering concatenates to the
 * whole, and templates are recognised from their Jinja source. */
#include <string.h>

#include "check.h"
#include "model/chat.h"

static const char smollm2_jinja[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}";

static const char llama2_jinja[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}... "
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}...";

static void expect_str(const char *got, const char *want, const char *what) {
    CHECK_MSG(got && strcmp(got, want) == 0, "%s:\n got  [%s]\n want [%s]", what, got ? got : "(null)", want);
}

int main(void) {
    loom_chat_template t;
    char *s = NULL;

    /* recognition */
    CHECK(loom_chat_template_from_jinja(smollm2_jinja, strlen(smollm2_jinja), &t) == LOOM_OK);
    CHECK(t.format == LOOM_CHAT_CHATML);
    expect_str(t.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
               "default system of SmolLM2");
    loom_chat_template smol = t;
    CHECK(loom_chat_template_from_jinja(llama2_jinja, strlen(llama2_jinja), &t) == LOOM_OK);
    CHECK(t.format == LOOM_CHAT_LLAMA2 && t.default_system[0] == '\0');
    loom_chat_template l2 = t;
    CHECK(loom_chat_template_from_jinja("{{ messages }}", 14, &t) == LOOM_ERR_UNSUPPORTED);
    CHECK(strstr(loom_last_error(), "--chat-template") != NULL);
    CHECK(loom_chat_template_from_name("chatml", &t) == LOOM_OK && t.format == LOOM_CHAT_CHATML &&
          t.default_system[0] == '\0');
    CHECK(loom_chat_template_from_name("llama2", &t) == LOOM_OK && t.format == LOOM_CHAT_LLAMA2);
    CHECK(loom_chat_template_from_name("vicuna", &t) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "vicuna") != NULL);
    CHECK(strcmp(loom_chat_format_name(LOOM_CHAT_LLAMA2), "llama2") == 0);

    /* SmolLM2: no system message given -> the template's default */
    const loom_chat_msg conv[] = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
    CHECK(loom_chat_render(&smol, conv, 3, 1, &s) == LOOM_OK);
    expect_str(s,
               "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
               "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
               "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
               "smollm2 whole");
    /* per turn: turn 1 + reply + turn 2 == whole */
    char *t1 = NULL, *t2 = NULL;
    CHECK(loom_chat_render_turn(&smol, 1, NULL, "Hi", &t1) == LOOM_OK);
    CHECK(loom_chat_render_turn(&smol, 0, NULL, "2+2?", &t2) == LOOM_OK);
    char joined[1024];
    snprintf(joined, sizeof joined, "%s%s%s", t1, "Hello!", t2);
    expect_str(joined, s, "smollm2 per turn");
    free(s), free(t1), free(t2);
    /* an explicit system message replaces the default */
    const loom_chat_msg conv_sys[] = {{"system", "Be brief."}, {"user", "Hi"}};
    CHECK(loom_chat_render(&smol, conv_sys, 2, 0, &s) == LOOM_OK);
    expect_str(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
               "smollm2 with system, no generation prompt");
    free(s);
    CHECK(loom_chat_render_turn(&smol, 1, "Be brief.", "Hi", &s) == LOOM_OK);
    expect_str(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\n", "smollm2 first turn with system");
    free(s);

    /* Llama 2: <<SYS>> inside the first [INST], contents stripped */
    const loom_chat_msg conv2[] = {{"system", "Be kind."}, {"user", " Hi "}, {"assistant", "Hello!"},
                                   {"user", "Bye"}};
    CHECK(loom_chat_render(&l2, conv2, 4, 1, &s) == LOOM_OK);
    expect_str(s, "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]",
               "llama2 whole");
    CHECK(loom_chat_render_turn(&l2, 1, "Be kind.", " Hi ", &t1) == LOOM_OK);
    CHECK(loom_chat_render_turn(&l2, 0, NULL, "Bye", &t2) == LOOM_OK);
    snprintf(joined, sizeof joined, "%s%s%s", t1, " Hello!", t2);
    expect_str(joined, s, "llama2 per turn");
    free(s), free(t1), free(t2);
    CHECK(loom_chat_render(&l2, conv2 + 1, 1, 1, &s) == LOOM_OK);
    expect_str(s, "<s>[INST] Hi [/INST]", "llama2 without system");
    free(s);

    /* bad conversations */
    const loom_chat_msg badc[] = {{"user", "a"}, {"system", "late"}};
    CHECK(loom_chat_render(&smol, badc, 2, 1, &s) == LOOM_ERR_INVALID_ARG);
    CHECK(strstr(loom_last_error(), "message 1") != NULL);
    const loom_chat_msg nulc[] = {{"user", NULL}};
    CHECK(loom_chat_render(&smol, nulc, 1, 1, &s) == LOOM_ERR_INVALID_ARG);
    CHECK(loom_chat_render_turn(&smol, 1, NULL, NULL, &s) == LOOM_ERR_INVALID_ARG);

    printf("test_chat: %d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ != 0;
}
