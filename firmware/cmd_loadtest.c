/* cmd_loadtest.c — `ember loadtest`: the load test users run against their
 * box, or against any OpenAI-compatible server, over the streaming chat
 * completions API. For each number of concurrent users it reports output
 * tokens/s, TTFT and TPOT p50/p99 (defined as `ember bench --users` defines
 * them), goodput within an SLO, errors by kind, the cost per 1M output
 * tokens, and the most users within the SLO; as a table, JSON or an SVG
 * chart. The requests run in firmware/loadtest_run.c over the client of
 * firmware/http_client.c; the outputs are firmware/loadtest_report.c. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "firmware/cli.h"
#include "firmware/commands.h"
#include "firmware/http_client.h"
#include "firmware/loadtest.h"

static const char usage[] =
    "usage: ember loadtest --url URL --users N,N,... [--api-key K] [--model NAME]\n"
    "                      [--requests-per-user N] [--prompt-tokens A-B] [--gen-tokens A-B]\n"
    "                      [--background N] [--slo-ttft-ms X] [--slo-tpot-ms Y]\n"
    "                      [--gpu-cost-per-hour X] [--temperature T] [--timeout-s S] [--seed S]\n"
    "                      [--json] [--svg OUT]\n"
    "  Measures an OpenAI-compatible server (ember serve, vLLM, llama.cpp's server, ...)\n"
    "  at URL (http://host:port, with or without /v1) with each number of concurrent\n"
    "  users in turn: every user sends --requests-per-user streaming chat completions\n"
    "  (default 4) one after another, with a prompt of A-B common words (default\n"
    "  32-96, about as many tokens) and max_tokens drawn from A-B (default 16-48),\n"
    "  temperature 0 and ignore_eos; --background N more users send requests marked\n"
    "  \"priority\": \"background\" for the whole of each level. --model defaults to the\n"
    "  first of GET /v1/models. Reports output tokens/s, TTFT and TPOT p50/p99, goodput\n"
    "  (requests within --slo-ttft-ms and --slo-tpot-ms), errors by kind, $ per 1M output\n"
    "  tokens at --gpu-cost-per-hour, and the most users within the SLO. --timeout-s\n"
    "  (default 600) bounds a connect and every wait for a byte.\n";

/* "A-B" or "N" into [lo, hi] within [1, max]; 0, or the exit status of the error line. */
static int parse_range(const char *flag, const char *s, uint32_t max, uint32_t *lo, uint32_t *hi)
{
    char *end;
    errno = 0;
    unsigned long a = *s >= '0' && *s <= '9' ? strtoul(s, &end, 10) : 0, b = a;
    if (!(*s >= '0' && *s <= '9'))
        return em_cli_fail(2, "loadtest: %s: '%s' is not N or A-B", flag, s);
    if (*end == '-') {
        const char *t = end + 1;
        b = *t >= '0' && *t <= '9' ? strtoul(t, &end, 10) : 0;
        if (!(*t >= '0' && *t <= '9'))
            return em_cli_fail(2, "loadtest: %s: '%s' is not N or A-B", flag, s);
    }
    if (*end)
        return em_cli_fail(2, "loadtest: %s: '%s' is not N or A-B", flag, s);
    if (errno || a < 1 || b > max || a > max)
        return em_cli_fail(2, "loadtest: %s: '%s' is out of range [1, %u]", flag, s, max);
    if (a > b)
        return em_cli_fail(2, "loadtest: %s: '%s': the low end is above the high end", flag, s);
    *lo = (uint32_t)a;
    *hi = (uint32_t)b;
    return 0;
}

/* Enough open files for n connections, raising the soft limit if it must. */
static int ensure_files(uint32_t n)
{
    struct rlimit rl;
    rlim_t want = n + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
        return 0;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        return em_cli_fail(2, "loadtest: %u users need %llu open files; the limit is %llu (ulimit -n)", n,
                           (unsigned long long)want, (unsigned long long)rl.rlim_cur);
    return 0;
}

int em_cmd_loadtest(int argc, char **argv)
{
    const char *url = NULL, *users = NULL, *prompt = "32-96", *gen = "16-48", *svg = NULL;
    em_loadtest_opts o = { .slo_ttft_ms = -1, .slo_tpot_ms = -1, .gpu_cost_per_hour = -1 };
    long reqs = 4, background = 0, seed = 1;
    double timeout_s = 600, temp = 0;
    int json = 0;
    em_cli_opt opts[] = {
        { "--url", NULL, EM_OPT_STR, &url, 0, 0 },
        { "--api-key", NULL, EM_OPT_STR, &o.api_key, 0, 0 },
        { "--model", "-m", EM_OPT_STR, &o.model, 0, 0 },
        { "--users", NULL, EM_OPT_STR, &users, 0, 0 },
        { "--requests-per-user", NULL, EM_OPT_INT, &reqs, 1, 1 << 20 },
        { "--prompt-tokens", NULL, EM_OPT_STR, &prompt, 0, 0 },
        { "--gen-tokens", NULL, EM_OPT_STR, &gen, 0, 0 },
        { "--background", NULL, EM_OPT_INT, &background, 0, EM_LOADTEST_MAX_USERS - 1 },
        { "--slo-ttft-ms", NULL, EM_OPT_FLOAT, &o.slo_ttft_ms, 0, 1e9 },
        { "--slo-tpot-ms", NULL, EM_OPT_FLOAT, &o.slo_tpot_ms, 0, 1e9 },
        { "--gpu-cost-per-hour", NULL, EM_OPT_FLOAT, &o.gpu_cost_per_hour, 0, 1e6 },
        { "--temperature", "--temp", EM_OPT_FLOAT, &temp, 0, 100 },
        { "--timeout-s", NULL, EM_OPT_FLOAT, &timeout_s, 0.1, 86400 },
        { "--seed", NULL, EM_OPT_INT, &seed, 0, 4294967295.0 },
        { "--json", NULL, EM_OPT_FLAG, &json, 0, 0 },
        { "--svg", NULL, EM_OPT_STR, &svg, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("loadtest", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    if (!url)
        return em_cli_fail(2, "loadtest: --url URL is required (the server, e.g. http://127.0.0.1:8080)");
    if (!users)
        return em_cli_fail(2, "loadtest: --users N,N,... is required (e.g. --users 1,4,16,64)");
    if ((rc = em_cli_parse_list("loadtest", "--users", users, o.levels, EM_LOADTEST_MAX_LEVELS, &o.n_levels,
                                EM_LOADTEST_MAX_USERS)) ||
        (rc = parse_range("--prompt-tokens", prompt, 1 << 17, &o.prompt_lo, &o.prompt_hi)) ||
        (rc = parse_range("--gen-tokens", gen, 1 << 20, &o.gen_lo, &o.gen_hi)))
        return rc;
    uint32_t most = 0;
    for (uint32_t i = 0; i < o.n_levels; i++)
        most = o.levels[i] > most ? o.levels[i] : most;
    if (most + (uint32_t)background > EM_LOADTEST_MAX_USERS)
        return em_cli_fail(2, "loadtest: %u users and %ld background users: more than %d together", most,
                           background, EM_LOADTEST_MAX_USERS);
    if ((uint64_t)most * (uint64_t)reqs > (1u << 20))
        return em_cli_fail(2, "loadtest: %u users x %ld requests: over %u requests at one level", most, reqs,
                           1u << 20);
    if (o.api_key && (!*o.api_key || strpbrk(o.api_key, "\r\n") || strlen(o.api_key) > 512))
        return em_cli_fail(2, "loadtest: --api-key: empty, over 512 bytes, or with a line break");
    if (o.model) {
        json_t *s = json_string(o.model);   /* NULL: not UTF-8, which no JSON body can carry */
        json_decref(s);
        if (!s || !*o.model)
            return em_cli_fail(2, "loadtest: --model: empty or not valid UTF-8");
    }
    em_err err = { 0 };
    if (svg && em_cli_check_out_path("--svg", svg, &err))
        return em_cli_fail(2, "loadtest: %s", err.msg);
    em_http_url u;
    if (em_http_url_parse(url, "/v1", &u, &err) || em_http_url_resolve(&u, &err))
        return em_cli_fail(2, "loadtest: --url: %s", err.msg);
    if ((rc = ensure_files(most + (uint32_t)background)))
        return rc;
    o.url = url;
    o.background = (uint32_t)background;
    o.requests_per_user = (uint32_t)reqs;
    o.temperature = temp;
    o.seed = (uint64_t)seed;
    o.timeout_s = timeout_s;
    char model[512];
    if (!o.model) {
        if (em_loadtest_default_model(&u, &o, model, sizeof model, &err))
            return em_cli_fail(1, "loadtest: GET %s/v1/models: %s (name one with --model)", url, err.msg);
        o.model = model;
    }

    em_loadtest_level lv[EM_LOADTEST_MAX_LEVELS];
    int status = 0;
    for (uint32_t i = 0; i < o.n_levels; i++) {
        if (em_loadtest_run_level(&u, &o, i, o.levels[i], &lv[i], &err))
            return em_cli_fail_err(&err);
        uint32_t failed = lv[i].requests - lv[i].completed;
        int k = 0;
        for (int j = 1; j < EM_LT_N_ERR; j++)   /* the commonest kind, named in the note */
            k = lv[i].errors[j] > lv[i].errors[k] ? j : k;
        if (lv[i].completed == 0)
            status = 1;
        if (failed) {
            em_cli_note("loadtest: %u users: %s%u of %u requests failed (%u %s, the first: %s)", o.levels[i],
                        lv[i].completed ? "" : "every request failed: ", failed, lv[i].requests,
                        lv[i].errors[k], em_loadtest_err_names[k], lv[i].first_error[k]);
        } else if (!json) {
            em_cli_note("loadtest: %u users done", o.levels[i]);
        }
    }
    long best = -1;
    if (o.slo_ttft_ms >= 0 || o.slo_tpot_ms >= 0) {
        best = 0;
        for (uint32_t i = 0; i < o.n_levels; i++)
            if (lv[i].within_slo > 0 && lv[i].users > best)
                best = lv[i].users;
    }
    if (json) {
        if (em_loadtest_report_json(stdout, &o, lv, o.n_levels, best, &err))
            return em_cli_fail_err(&err);
    } else {
        em_loadtest_report_table(stdout, &o, lv, o.n_levels, best);
    }
    if (svg && em_loadtest_report_svg(svg, &o, lv, o.n_levels, &err)) {
        em_cli_fail_err(&err);
        return 1;
    }
    return status;
}
