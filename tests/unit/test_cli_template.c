/* test_cli_template.c — `ember template`: corpus templates rendered from a
 * messages file byte for byte as the golden case says (array and object
 * forms, with and without the generation prompt); --model with a
 * vocabulary-only GGUF that carries a chat template (BOS/EOS from its
 * vocabulary) and with a shared model that has none (the ChatML fallback,
 * said on stderr); bad input (bad JSON, missing files, template errors,
 * raise_exception, flag misuse) exits 2 with one "ember: " line. Needs
 * $EMBER_BIN; skips (77) without $EMBER_SHARED. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/gguf.h"
#include "tests/common/testutil.h"

static const char *bin;
static char *tmp;

static char *tmp_path(const char *name)
{
    static char buf[4][4200];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", tmp, name);
    return b;
}

/* argv: ember template, then args (NULL-terminated, at most 12). */
static void build_argv(char *argv[16], char *const args[])
{
    int n = 0;
    argv[n++] = (char *)bin;
    argv[n++] = "template";
    for (int i = 0; args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
}

static int run(char *const args[], char **out, char **err)
{
    char *argv[16];
    build_argv(argv, args);
    return test_run(argv, out, err);
}

static void expect_bad(const char *what, const char *needle, char *const args[])
{
    char *argv[16];
    build_argv(argv, args);
    test_expect_cli_error(what, argv, needle);
}

/* Case `name` of template `tmpl` in the corpus: render it with the CLI
 * (messages as an array, or as {"messages": ...} when object) and compare. */
static void golden_case(const char *tmpl, const char *name, int object)
{
    char jinja[4200], cases_path[4200];
    snprintf(jinja, sizeof jinja, "%s/%s.jinja", test_shared("golden/templates"), tmpl);
    snprintf(cases_path, sizeof cases_path, "%s/%s.cases.json", test_shared("golden/templates"), tmpl);
    json_t *cases = json_load_file(cases_path, 0, NULL), *cs = NULL;
    for (size_t i = 0; cases && i < json_array_size(cases); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(cases, i), "name")), name))
            cs = json_array_get(cases, i);
    CHECKF(cs != NULL, "%s: no case %s", tmpl, name);
    if (!cs) {
        json_decref(cases);
        return;
    }
    json_t *msgs = json_object_get(cs, "messages");
    json_t *doc = object ? json_pack("{sO}", "messages", msgs) : json_incref(msgs);
    char *mpath = tmp_path("messages.json");
    json_dump_file(doc, mpath, JSON_ENSURE_ASCII);
    json_decref(doc);
    char *args[12] = { "--template", jinja, "--messages", mpath, "--bos",
                       (char *)json_string_value(json_object_get(cs, "bos_token")), "--eos",
                       (char *)json_string_value(json_object_get(cs, "eos_token")), NULL, NULL };
    if (!json_is_true(json_object_get(cs, "add_generation_prompt")))
        args[8] = "--no-generation-prompt";
    char *out = NULL, *err = NULL;
    int st = run(args, &out, &err);
    if (json_is_true(json_object_get(cs, "error"))) {
        CHECKF(st == 2 && err && !strncmp(err, "ember: template: ", 17) && test_count_lines(err) == 1,
               "%s/%s: status %d, stderr [%s], expected an error", tmpl, name, st, err ? err : "");
        const char *why = json_string_value(json_object_get(cs, "error_message"));
        CHECKF(err && why && strstr(err, why), "%s/%s: stderr [%s] lacks the template's message", tmpl, name,
               err ? err : "");
        CHECKF(out && !*out, "%s/%s: wrote to stdout on error", tmpl, name);
    } else {
        const char *want = json_string_value(json_object_get(cs, "expected"));
        CHECKF(st == 0, "%s/%s: status %d: %s", tmpl, name, st, err ? err : "");
        CHECKF(out && want && !strcmp(out, want), "%s/%s: printed [%s], expected [%s]", tmpl, name, out ? out : "",
               want ? want : "");
        CHECKF(err && !*err, "%s/%s: wrote to stderr: %s", tmpl, name, err ? err : "");
    }
    free(out);
    free(err);
    json_decref(cases);
}

/* A vocabulary-only GGUF (no tensors) with a chat template. */
static int write_vocab(const char *path, const char *chat_template)
{
    em_gguf_writer *w = NULL;
    if (em_gguf_writer_create(32, &w, NULL))
        return -1;
    const char *toks[6] = { "<unk>", "<|begin|>", "<|end|>", "a", "b", "\xe2\x96\x81" };
    float scores[6] = { 0, 0, 0, -1, -2, -3 };
    int32_t types[6] = { 2, 3, 3, 1, 1, 1 };
    em_gguf_w_str(w, "general.architecture", "llama");
    em_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    em_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 6);
    em_gguf_w_arr(w, "tokenizer.ggml.scores", EM_GGUF_F32, scores, 6);
    em_gguf_w_arr(w, "tokenizer.ggml.token_type", EM_GGUF_I32, types, 6);
    em_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    em_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (chat_template)
        em_gguf_w_str(w, "tokenizer.chat_template", chat_template);
    FILE *f = fopen(path, "wb");
    int rc = f ? em_gguf_w_header(w, f, NULL) : -1;
    if (!rc)
        rc = em_gguf_w_finish(w, NULL);
    if (f)
        fclose(f);
    em_gguf_writer_destroy(w);
    return rc;
}

int main(void)
{
    bin = getenv("EMBER_BIN");
    if (!bin) {
        fprintf(stderr, "EMBER_BIN is not set\n");
        return 1;
    }
    if (!test_shared_dir()) {
        printf("cli-template: no shared folder: skipped\n");
        return 77;
    }
    tmp = test_tmpdir();
    CHECK(tmp != NULL);
    if (!tmp)
        return test_summary("cli-template");

    golden_case("test-Llama-3", "multi_turn_system", 0);
    golden_case("test-Llama-3", "user_only_no_gen", 1);
    golden_case("HuggingFaceTB-SmolLM2-135M-Instruct", "tricky_content", 0);
    golden_case("Qwen-Qwen2.5-7B-Instruct", "system_user", 1);
    golden_case("microsoft-Phi-3.5-mini-instruct", "assistant_last", 0);
    golden_case("google-gemma-2-2b-it", "system_user", 0);   /* raise_exception */
    golden_case("google-gemma-2-2b-it", "multi_turn", 0);

    /* --model: a vocabulary-only file with a template; BOS/EOS from its vocabulary */
    char *vocab = strdup(tmp_path("vocab.gguf")), *msgs = strdup(tmp_path("m.json"));
    const char *m = "[{\"role\": \"user\", \"content\": \"Hello \\u00e9\"}]";
    test_write_file(msgs, m, strlen(m));
    CHECK(write_vocab(vocab, "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
                             "{% if add_generation_prompt %}[assistant]{% endif %}{{ eos_token }}") == 0);
    char *out = NULL, *err = NULL;
    int st = run((char *[]){ "--model", vocab, "--messages", msgs, NULL }, &out, &err);
    CHECKF(st == 0 && out && !strcmp(out, "<|begin|>[user]Hello \xc3\xa9[assistant]<|end|>") && err && !*err,
           "--model with a template: status %d, out [%s], err [%s]", st, out ? out : "", err ? err : "");
    free(out);
    free(err);
    st = run((char *[]){ "--model", vocab, "--messages", msgs, "--no-generation-prompt", "--bos", "B", NULL }, &out, &err);
    CHECKF(st == 0 && out && !strcmp(out, "B[user]Hello \xc3\xa9<|end|>"), "--model --bos: [%s] %s", out ? out : "",
           err ? err : "");
    free(out);
    free(err);

    /* --model on a shared model without a template: the fallback, said on stderr */
    char *stories = strdup(test_shared("models/TinyStories-656K-Q8_0.gguf"));
    st = run((char *[]){ "--model", stories, "--messages", msgs, NULL }, &out, &err);
    CHECKF(st == 0 && out && !strcmp(out, "<|im_start|>user\nHello \xc3\xa9<|im_end|>\n<|im_start|>assistant\n"),
           "fallback: status %d, out [%s]", st, out ? out : "");
    CHECKF(err && test_count_lines(err) == 1 && strstr(err, "ember: template: ") && strstr(err, "ChatML fallback"),
           "fallback: stderr [%s]", err ? err : "");
    free(out);
    free(err);

    /* bad input: exit 2, one line */
    char *tm = strdup(tmp_path("t.jinja")), *bad = strdup(tmp_path("bad.json"));
    test_write_file(bad, "[{\"role\": ", 10);
    test_write_file(tm, "{{ messages[0].content }}", 25);
    char *obj = strdup(tmp_path("obj.json"));
    test_write_file(obj, "{\"msgs\": []}", 12);
    expect_bad("bad JSON", "not valid JSON", (char *[]){ "--template", tm, "--messages", bad, NULL });
    expect_bad("no messages array", "\"messages\" array", (char *[]){ "--template", tm, "--messages", obj, NULL });
    expect_bad("missing messages file", "missing.json", (char *[]){ "--template", tm, "--messages", tmp_path("missing.json"), NULL });
    expect_bad("missing template file", "nope.jinja", (char *[]){ "--template", tmp_path("nope.jinja"), "--messages", msgs, NULL });
    expect_bad("missing model", "none.gguf", (char *[]){ "--model", tmp_path("none.gguf"), "--messages", msgs, NULL });
    expect_bad("model not GGUF", NULL, (char *[]){ "--model", bad, "--messages", msgs, NULL });
    char *syn = strdup(tmp_path("syntax.jinja"));
    test_write_file(syn, "line one\n{{ messages | nosuch }}", 32);
    expect_bad("syntax error", "line 2, col 15: unknown filter 'nosuch'", (char *[]){ "--template", syn, "--messages", msgs, NULL });
    char *rte = strdup(tmp_path("raise.jinja"));
    const char *raise = "{% if messages|length < 2 %}{{ raise_exception('need two messages') }}{% endif %}";
    test_write_file(rte, raise, strlen(raise));
    expect_bad("raise_exception", "need two messages", (char *[]){ "--template", rte, "--messages", msgs, NULL });
    char *loop = strdup(tmp_path("loop.jinja"));
    const char *hostile = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    test_write_file(loop, hostile, strlen(hostile));
    expect_bad("step limit", "EM_TMPL_MAX_STEPS", (char *[]){ "--template", loop, "--messages", msgs, NULL });
    expect_bad("both sources", "exactly one", (char *[]){ "--template", tm, "--model", vocab, "--messages", msgs, NULL });
    expect_bad("no source", "exactly one", (char *[]){ "--messages", msgs, NULL });
    expect_bad("no messages", "--messages", (char *[]){ "--template", tm, NULL });
    expect_bad("unknown flag", NULL, (char *[]){ "--template", tm, "--messages", msgs, "--bogus", NULL });
    st = run((char *[]){ "--help", NULL }, &out, &err);
    CHECKF(st == 0 && out && strstr(out, "usage: ember template"), "--help: %d", st);
    free(out);
    free(err);

    free(vocab);
    free(msgs);
    free(stories);
    free(tm);
    free(bad);
    free(obj);
    free(syn);
    free(rte);
    free(loop);
    test_rmtree(tmp);
    free(tmp);
    return test_summary("cli-template");
}
