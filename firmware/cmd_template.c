/* cmd_template.c — `ember template`: print the exact prompt a chat template
 * renders for a conversation, from a model's tokenizer.chat_template (and
 * its BOS/EOS token texts) or from a template file. Reads only the GGUF's
 * metadata and vocabulary, so vocabulary-only files work. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/text/tokenizer.h"
#include "core/tmpl/chat_tmpl.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember template (--model PATH | --template FILE) --messages FILE.json\n"
    "                      [--bos TEXT] [--eos TEXT] [--no-generation-prompt]\n"
    "  Prints the prompt the chat template renders for the conversation, exactly\n"
    "  (no newline added), as Hugging Face transformers renders it.\n"
    "  --model PATH       use the model's tokenizer.chat_template and its BOS/EOS\n"
    "                     token texts; a model without a template gets the ChatML\n"
    "                     fallback (said on stderr)\n"
    "  --template FILE    use this Jinja template file (raw bytes); BOS/EOS are\n"
    "                     <s> and </s> unless --bos/--eos say otherwise\n"
    "  --messages FILE    a JSON array of messages ({\"role\": ..., \"content\": ...}),\n"
    "                     or an object with a \"messages\" array (and optional \"tools\")\n"
    "  --bos TEXT, --eos TEXT   the bos_token / eos_token texts the template sees\n"
    "  --no-generation-prompt   add_generation_prompt = false (default true)\n"
    "  Example:\n"
    "    echo '[{\"role\": \"user\", \"content\": \"Hello\"}]' > m.json\n"
    "    ember template --model models/SmolLM2-135M-Instruct.gguf --messages m.json\n"
    "  Errors: one line 'ember: ...' on stderr; exit 2 for bad input (a missing\n"
    "  or malformed file, a template that does not parse or fails), 1 otherwise.\n";

/* The text of token id, or def when there is none. */
static const char *token_text(const em_tokenizer *tok, int32_t id, const char *def)
{
    const char *s = id >= 0 ? em_tokenizer_token_text(tok, id) : NULL;
    return s ? s : def;
}

int em_cmd_template(int argc, char **argv)
{
    const char *model_path = NULL, *tmpl_path = NULL, *msgs_path = NULL, *bos = NULL, *eos = NULL;
    int no_gen = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--template", "-t", EM_OPT_STR, &tmpl_path, 0, 0 },
        { "--messages", NULL, EM_OPT_STR, &msgs_path, 0, 0 },
        { "--bos", NULL, EM_OPT_STR, &bos, 0, 0 },
        { "--eos", NULL, EM_OPT_STR, &eos, 0, 0 },
        { "--no-generation-prompt", NULL, EM_OPT_FLAG, &no_gen, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("template", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!model_path == !tmpl_path)
        return em_cli_fail(2, "template: give exactly one of --model and --template (see ember template --help)");
    if (!msgs_path)
        return em_cli_fail(2, "template: --messages is required (see ember template --help)");

    em_err err = { 0 };
    em_gguf *g = NULL;
    em_tokenizer *tok = NULL;
    char *file_src = NULL, *msgs_text = NULL, *out = NULL;
    size_t src_len = 0, msgs_len = 0, out_len = 0;
    json_t *doc = NULL;
    const char *src = NULL, *where = tmpl_path;
    int status = 0;

    if ((rc = em_cli_read_file(msgs_path, &msgs_text, &msgs_len, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    json_error_t je;
    doc = json_loadb(msgs_text, msgs_len, JSON_ALLOW_NUL, &je);
    if (!doc) {
        status = em_cli_fail(2, "template: %s: not valid JSON (line %d, column %d: %s)", msgs_path, je.line,
                             je.column, je.text);
        goto done;
    }
    json_t *messages = json_is_object(doc) ? json_object_get(doc, "messages") : doc;
    json_t *tools = json_is_object(doc) ? json_object_get(doc, "tools") : NULL;
    if (!json_is_array(messages)) {
        status = em_cli_fail(2, "template: %s: expected a JSON array of messages or an object with a "
                             "\"messages\" array", msgs_path);
        goto done;
    }

    if (model_path) {
        if ((rc = em_gguf_open(model_path, &g, &err)) || (rc = em_tokenizer_create(g, &tok, &err))) {
            status = em_cli_fail_err(&err);
            goto done;
        }
        em_chat_gguf_template(g, &src, &src_len);
        where = model_path;
        if (!src)
            em_cli_note("template: %s has no tokenizer.chat_template: using the ChatML fallback", model_path);
        if (!bos)
            bos = token_text(tok, em_tokenizer_bos(tok), "");
        if (!eos)
            eos = token_text(tok, em_tokenizer_eos(tok), "");
    } else {
        if ((rc = em_cli_read_file(tmpl_path, &file_src, &src_len, &err))) {
            status = em_cli_fail_err(&err);
            goto done;
        }
        src = file_src;
        if (!bos)
            bos = "<s>";
        if (!eos)
            eos = "</s>";
    }

    rc = em_chat_render(src, src_len, messages, !no_gen, bos, eos, tools, NULL, &out, &out_len, &err);
    if (rc) {
        /* "template: line L, col C: why" -> "ember: template: FILE: line L, col C: why" */
        const char *why = !strncmp(err.msg, "template: ", 10) ? err.msg + 10 : err.msg;
        status = em_cli_fail(em_err_is_input(rc) ? 2 : 1, "template: %s: %s", where, why);
        goto done;
    }
    if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0)
        status = em_cli_fail(1, "template: cannot write the output");
done:
    free(out);
    free(file_src);
    free(msgs_text);
    json_decref(doc);
    em_tokenizer_destroy(tok);
    em_gguf_close(g);
    return status;
}
