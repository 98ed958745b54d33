/* cmd_embed.c — `ember embed`: the embedding of each input text, one JSON
 * line per input ({"index", "tokens", "embedding"}), from an encoder
 * (bert) or any decoder's final hidden states, pooled as the model says
 * or as asked and L2-normalised. Runs the CPU reference (core/run/encode.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/run/encode.h"
#include "core/text/tokenizer.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember embed --model PATH (--text TEXT ... | --file F) [--pooling mean|cls|last] [--no-normalize]\n"
    "  Prints one JSON line per input: {\"index\": i, \"tokens\": n, \"embedding\": [...]}.\n"
    "  --text TEXT       an input (may repeat, up to 16)\n"
    "  --file F          one input per line of F (empty lines skipped)\n"
    "  --pooling P       how the tokens' hidden states make one vector: mean, cls (the first\n"
    "                    token's) or last; default the model's pooling_type, else mean\n"
    "  --no-normalize    leave the vector as pooled (default: unit length)\n"
    "  An encoder (bert: all-MiniLM-L6-v2) or any decoder (its output-normed hidden states).\n"
    "  Runs on the CPU reference. Example:\n"
    "    ember embed --model all-MiniLM-L6-v2-F16.gguf --text 'The cat sits on the mat.'\n";

/* One input: tokenized, embedded, printed. 0, or the exit status. */
static int embed_one(const em_model *m, const em_tokenizer *tok, size_t index, const char *text, size_t len,
                     em_pooling pool, int normalize, float *vec)
{
    em_err err = { 0 };
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = em_tokenizer_encode(tok, text, len, 1, 0, &ids, &n, &err);
    if (!rc && n > (size_t)UINT32_MAX)
        rc = em_err_set(&err, EM_ERANGE, "input %zu: too many tokens", index);
    if (!rc)
        rc = em_ref_embed(m, ids, (uint32_t)n, pool, normalize, vec, &err);
    free(ids);
    if (rc)
        return em_cli_fail(rc == EM_ENOMEM ? 1 : 2, "embed: input %zu: %s", index, err.msg);
    uint32_t dim = em_model_hparams(m)->n_embd;
    printf("{\"index\": %zu, \"tokens\": %zu, \"embedding\": [", index, n);
    for (uint32_t d = 0; d < dim; d++)
        printf(d ? ", %.7g" : "%.7g", vec[d]);
    printf("]}\n");
    return 0;
}

int em_cmd_embed(int argc, char **argv)
{
    const char *model_path = NULL, *file_path = NULL, *pooling = NULL;
    em_cli_list texts = { 0 };
    int no_normalize = 0;
    em_cli_opt opts[] = {
        { "--model", "-m", EM_OPT_STR, &model_path, 0, 0 },
        { "--text", "-t", EM_OPT_MULTI, &texts, 0, 0 },
        { "--file", "-f", EM_OPT_STR, &file_path, 0, 0 },
        { "--pooling", NULL, EM_OPT_STR, &pooling, 0, 0 },
        { "--no-normalize", NULL, EM_OPT_FLAG, &no_normalize, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("embed", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!model_path)
        return em_cli_fail(2, "embed: --model is required (see ember embed --help)");
    if (!texts.n == !file_path)
        return em_cli_fail(2, "embed: give --text (one or more) or --file, not both");
    em_pooling pool = EM_POOL_NONE;
    if (pooling && !strcmp(pooling, "mean"))
        pool = EM_POOL_MEAN;
    else if (pooling && !strcmp(pooling, "cls"))
        pool = EM_POOL_CLS;
    else if (pooling && !strcmp(pooling, "last"))
        pool = EM_POOL_LAST;
    else if (pooling)
        return em_cli_fail(2, "embed: --pooling must be mean, cls or last, not '%s'", pooling);

    em_err err = { 0 };
    char *file_text = NULL;
    size_t file_len = 0;
    if (file_path && em_cli_read_file(file_path, &file_text, &file_len, &err))
        return em_cli_fail_err(&err);
    em_model *m = NULL;
    em_tokenizer *tok = NULL;
    if ((rc = em_cli_open_model("embed", model_path, &m, &tok))) {
        free(file_text);
        return rc;
    }
    float *vec = malloc(em_model_hparams(m)->n_embd * sizeof *vec);
    int status = vec ? 0 : em_cli_fail(1, "embed: out of memory");
    size_t index = 0;
    for (int i = 0; !status && i < texts.n; i++)
        status = embed_one(m, tok, index++, texts.vals[i], strlen(texts.vals[i]), pool, !no_normalize, vec);
    for (const char *p = file_text; !status && p && p < file_text + file_len;) {
        const char *nl = memchr(p, '\n', (size_t)(file_text + file_len - p));
        const char *next = nl ? nl + 1 : file_text + file_len;
        size_t len = (size_t)((nl ? nl : next) - p);
        if (len && p[len - 1] == '\r')
            len--;
        if (len)
            status = embed_one(m, tok, index++, p, len, pool, !no_normalize, vec);
        p = next;
    }
    if (!status && fflush(stdout) != 0)
        status = em_cli_fail(1, "embed: cannot write the output");
    free(vec);
    free(file_text);
    em_tokenizer_destroy(tok);
    em_model_close(m);
    return status;
}
