/* cmd_tokenize.c — `ember tokenize`: print the token ids of a text on one
 * line, space-separated. Reads only the tokenizer metadata of the GGUF file,
 * so vocabulary-only files (no tensors) work too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/gguf.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember tokenize --model PATH (--text TEXT | --file F) [--no-bos] [--parse-special]\n"
    "  Prints the token ids of the text on one line, space-separated.\n"
    "  --no-bos          do not add the BOS token the model's metadata asks for\n"
    "  --parse-special   turn special-token strings (\"<|im_start|>\") into their ids\n";

int em_cmd_tokenize(int argc, char **argv)
{
    const char *model_path = NULL, *text_arg = NULL, *file_path = NULL;
    int no_bos = 0, parse_special = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--text", "-t", EM_OPT_STR, &text_arg, 0, 0 },
        { "--file", "-f", EM_OPT_STR, &file_path, 0, 0 },
        { "--no-bos", NULL, EM_OPT_FLAG, &no_bos, 0, 0 },
        { "--parse-special", NULL, EM_OPT_FLAG, &parse_special, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("tokenize", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!model_path)
        return em_cli_fail(2, "tokenize: --model is required (see ember tokenize --help)");
    if (!text_arg == !file_path)
        return em_cli_fail(2, "tokenize: give exactly one of --text and --file");

    em_err err = { 0 };
    em_gguf *g = NULL;
    em_tokenizer *tok = NULL;
    char *file_text = NULL;
    int32_t *ids = NULL;
    size_t len = 0, n_ids = 0;
    int status = 0;
    const char *text = text_arg;

    if (file_path) {
        if ((rc = em_cli_read_file(file_path, &file_text, &len, &err))) {
            status = em_cli_fail_err(&err);
            goto done;
        }
        text = file_text;
    } else {
        len = strlen(text_arg);
    }
    if ((rc = em_gguf_open(model_path, &g, &err)) ||
        (rc = em_tokenizer_create(g, &tok, &err)) ||
        (rc = em_tokenizer_encode(tok, text, len, !no_bos, parse_special, &ids, &n_ids, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    /* --no-bos drops BOS only: an EOS the metadata asks for stays */
    int add_eos = no_bos && em_tokenizer_add_eos(tok);
    for (size_t i = 0; i < n_ids; i++)
        printf(i ? " %d" : "%d", ids[i]);
    if (add_eos)
        printf(n_ids ? " %d" : "%d", em_tokenizer_eos(tok));
    putchar('\n');
    if (fflush(stdout) != 0)
        status = em_cli_fail(1, "tokenize: cannot write the output");
done:
    free(ids);
    free(file_text);
    em_tokenizer_destroy(tok);
    em_gguf_close(g);
    return status;
}
