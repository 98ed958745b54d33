/* cmd_usage.c — `ember usage`: usage reports from one or more ledgers
 * (several --db merge the ledgers of several boxes) as a table, CSV or JSON,
 * with cost per 1M tokens when a GPU price is given. */
#include <stdio.h>

#include "firmware/cli.h"
#include "storage/storage.h"

static const char usage[] =
    "usage: ember usage [--since DATE] [--until DATE] [--group-by key|day|hour|class|model|batch|endpoint]\n"
    "                   [--format table|csv|json] [--gpu-cost-per-hour X] [--db PATH ...]\n"
    "  DATE is YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS], UTC; an --until date includes\n"
    "  that day. --db may repeat to merge the ledgers of several boxes (default\n"
    "  ./ember.db); files are only read. Cost per 1M tokens = price per GPU-hour\n"
    "  x GPU-hours in the window (idle ones too) / completion tokens x 1e6.\n";

int em_cmd_usage(int argc, char **argv)
{
    const char *since = NULL, *until = NULL, *group = "none", *format = "table";
    double price = -1.0;
    em_cli_list dbs = { .n = 0 };
    em_cli_opt opts[] = {
        { "--since", NULL, EM_OPT_STR, &since, 0, 0 },
        { "--until", NULL, EM_OPT_STR, &until, 0, 0 },
        { "--group-by", NULL, EM_OPT_STR, &group, 0, 0 },
        { "--format", NULL, EM_OPT_STR, &format, 0, 0 },
        { "--gpu-cost-per-hour", NULL, EM_OPT_FLOAT, &price, 0, 1e9 },
        { "--db", NULL, EM_OPT_MULTI, &dbs, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("usage", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc < 0 ? 0 : rc;

    em_usage_query q;
    em_storage_usage_query_init(&q);
    em_usage_format fmt;
    em_err err = { 0 };
    if (em_storage_group_by_parse(group, &q.group_by))
        return em_cli_fail(2, "usage: --group-by: '%s' is not key, day, hour, class, model, batch or endpoint",
                           group);
    if (em_storage_format_parse(format, &fmt))
        return em_cli_fail(2, "usage: --format: '%s' is not table, csv or json", format);
    if (since && em_storage_parse_time(since, 0, &q.since_ms, &err))
        return em_cli_fail(2, "usage: --since: %s", err.msg);
    if (until && em_storage_parse_time(until, 1, &q.until_ms, &err))
        return em_cli_fail(2, "usage: --until: %s", err.msg);
    q.gpu_cost_per_hour = price;

    const char *def[1] = { "ember.db" };
    const char *const *paths = dbs.n ? dbs.vals : def;
    size_t n = dbs.n ? (size_t)dbs.n : 1;
    em_usage_report *rep = NULL;
    int status = 0;
    if (em_storage_usage_query(paths, n, &q, &rep, &err) ||
        em_storage_usage_write(rep, fmt, stdout, &err))
        status = em_cli_fail_err(&err);
    em_storage_usage_free(rep);
    return status;
}
