/* test_multipart.c — unit tests of web/multipart.c, the multipart/form-data
 * parser behind POST /v1/files: boundaries from Content-Type (quoted,
 * case, other parameters, missing, too long), parts with names and
 * filenames (quoted with ';' and escaped quotes inside), a preamble and an
 * epilogue, binary bytes and a boundary-like line inside a part; and
 * malformed bodies refused with the reason (no part, no CRLF after a
 * boundary, headers without an end, a header line without ':', no
 * Content-Disposition, not form-data, no name, no closing boundary, too many
 * parts) — every truncation of a good body is refused or parsed, never read
 * out of bounds (ASan). */
#include <string.h>

#include "tests/common/testutil.h"
#include "web/web_int.h"

static int parse(const char *body, size_t n, web_part *parts, size_t max, size_t *np, char *why)
{
    return web_multipart_parse(body, n, "B0und", parts, max, np, why, 200);
}

int main(void)
{
    char b[80];
    CHECK(web_multipart_boundary("multipart/form-data; boundary=abc", b, sizeof b) == 0 && strcmp(b, "abc") == 0);
    CHECK(web_multipart_boundary("Multipart/Form-Data; charset=utf-8; Boundary=\"q;x\"", b, sizeof b) == 0 &&
          strcmp(b, "q;x") == 0);
    CHECK(web_multipart_boundary("multipart/form-data", b, sizeof b) == -1);
    CHECK(web_multipart_boundary("multipart/form-data; boundary=", b, sizeof b) == -1);
    CHECK(web_multipart_boundary("application/json", b, sizeof b) == -1);
    CHECK(web_multipart_boundary("multipart/form-datax; boundary=a", b, sizeof b) == -1);
    char longb[120] = "multipart/form-data; boundary=";
    memset(longb + strlen(longb), 'x', 75);
    CHECK(web_multipart_boundary(longb, b, sizeof b) == -1);

    static const char good[] =
        "preamble to ignore\r\n"
        "--B0und\r\n"
        "Content-Disposition: form-data; name=\"purpose\"\r\n"
        "\r\n"
        "batch\r\n"
        "--B0und\r\n"
        "content-disposition: form-data; name=\"file\"; filename=\"a;b \\\"c\\\".jsonl\"\r\n"
        "Content-Type: application/octet-stream\r\n"
        "\r\n"
        "\x00\x01\r\n--B0un not the boundary\r\n\xff"
        "\r\n"
        "--B0und--\r\n"
        "epilogue";
    size_t n = sizeof good - 1, np = 0;
    web_part parts[4];
    char why[200] = "";
    CHECKF(parse(good, n, parts, 4, &np, why) == 0 && np == 2, "%s", why);
    CHECK(strcmp(parts[0].name, "purpose") == 0 && !parts[0].has_filename && parts[0].len == 5 &&
          memcmp(parts[0].data, "batch", 5) == 0);
    CHECK(strcmp(parts[1].name, "file") == 0 && parts[1].has_filename &&
          strcmp(parts[1].filename, "a;b \"c\".jsonl") == 0 && strcmp(parts[1].ctype, "application/octet-stream") == 0);
    static const char payload[] = "\x00\x01\r\n--B0un not the boundary\r\n\xff";
    CHECK(parts[1].len == sizeof payload - 1 && memcmp(parts[1].data, payload, sizeof payload - 1) == 0);

    /* no preamble: the body opens with the boundary itself */
    const char *bare = "--B0und\r\nContent-Disposition: form-data; name=x\r\n\r\nv\r\n--B0und--";
    CHECKF(parse(bare, strlen(bare), parts, 4, &np, why) == 0 && np == 1 && parts[0].len == 1 &&
           strcmp(parts[0].name, "x") == 0, "%s", why);

    struct { const char *body, *why; } bad[] = {
        { "nothing here", "no part" },
        { "--B0und junk\r\nContent-Disposition: form-data; name=x\r\n\r\nv\r\n--B0und--", "CRLF" },
        { "--B0und\r\nContent-Disposition: form-data; name=x\r\nv\r\n--B0und--", "blank line" },
        { "--B0und\r\nContent-Disposition form-data\r\n\r\nv\r\n--B0und--", "no ':'" },
        { "--B0und\r\nContent-Type: text/plain\r\n\r\nv\r\n--B0und--", "no Content-Disposition" },
        { "--B0und\r\nContent-Disposition: attachment; name=x\r\n\r\nv\r\n--B0und--", "form-data" },
        { "--B0und\r\nContent-Disposition: form-data; filename=x\r\n\r\nv\r\n--B0und--", "no name" },
        { "--B0und\r\nContent-Disposition: form-data; name=x\r\n\r\nv and no end", "does not end" },
        { "--B0und\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--B0und\r\n"
          "Content-Disposition: form-data; name=b\r\n\r\n2\r\n--B0und--", "more than 1 parts" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        CHECKF(parse(bad[i].body, strlen(bad[i].body), parts, i + 1 == sizeof bad / sizeof bad[0] ? 1 : 4, &np,
                     why) == -1 && strstr(why, bad[i].why), "case %zu: %s", i, why);
    }
    /* every prefix of the good body: parsed or refused, within bounds */
    for (size_t k = 0; k < n; k++) {
        char *copy = malloc(k ? k : 1);
        memcpy(copy, good, k);
        int rc = parse(copy, k, parts, 4, &np, why);
        CHECK(rc == 0 || rc == -1);
        for (size_t i = 0; rc == 0 && i < np; i++)
            CHECK(parts[i].data >= copy && parts[i].data + parts[i].len <= copy + k);
        free(copy);
    }
    return test_summary("multipart");
}
