/* multipart.c — a multipart/form-data body (RFC 7578) split into its parts,
 * for POST /v1/files: the boundary from the Content-Type header, then each
 * part's name, filename and content type from its headers and its bytes as
 * a span of the body (nothing copied). Strict: a body that does not follow
 * the format is refused with what is wrong, never half-read. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "web/web_int.h"

/* Find needle[0..nl) in h[0..hl). */
static const char *find(const char *h, size_t hl, const char *needle, size_t nl)
{
    if (nl > hl)
        return NULL;
    for (const char *p = h, *end = h + hl - nl; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p)
            return NULL;
        if (memcmp(p, needle, nl) == 0)
            return p;
    }
    return NULL;
}

/* The value of parameter name (e.g. "boundary") in a header value such as
 * `form-data; name="file"; filename="a.jsonl"`, unquoted, into out. 1 when
 * present. Quoted values may hold ';'; a backslash escapes the next byte. */
static int param(const char *v, size_t vl, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name), i = 0;
    while (i < vl) {
        while (i < vl && v[i] != ';')   /* to the next parameter, past any quoted text */
            if (v[i++] == '"') {
                while (i < vl && v[i] != '"')
                    i += v[i] == '\\' ? 2 : 1;
                i++;   /* past the closing quote */
            }
        if (i >= vl)
            return 0;
        i++;
        while (i < vl && (v[i] == ' ' || v[i] == '\t'))
            i++;
        if (i + nl < vl && strncasecmp(v + i, name, nl) == 0 && v[i + nl] == '=') {
            i += nl + 1;
            size_t k = 0;
            if (i < vl && v[i] == '"') {
                for (i++; i < vl && v[i] != '"'; i++) {
                    if (v[i] == '\\' && i + 1 < vl)
                        i++;
                    if (k + 1 < cap)
                        out[k++] = v[i];
                }
            } else {
                while (i < vl && v[i] != ';' && v[i] != ' ' && v[i] != '\t' && k + 1 < cap)
                    out[k++] = v[i++];
            }
            out[k] = 0;
            return 1;
        }
    }
    return 0;
}

int web_multipart_boundary(const char *ctype, char *boundary, size_t cap)
{
    size_t l = strlen(ctype);
    if (l < 19 || strncasecmp(ctype, "multipart/form-data", 19) != 0 || (ctype[19] && ctype[19] != ';' &&
                                                                         ctype[19] != ' '))
        return -1;
    if (!param(ctype + 19, l - 19, "boundary", boundary, cap) || !boundary[0] || strlen(boundary) > 70)
        return -1;
    return 0;
}

int web_multipart_parse(const char *body, size_t n, const char *boundary, web_part *parts, size_t max,
                        size_t *n_parts, char *why, size_t why_cap)
{
    char delim[80];
    int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    *n_parts = 0;
    /* the first delimiter may open the body without the CRLF before it */
    const char *p;
    if (n >= (size_t)dl - 2 && memcmp(body, delim + 2, (size_t)dl - 2) == 0) {
        p = body + dl - 2;
    } else {
        const char *at = find(body, n, delim, (size_t)dl);
        if (!at) {
            snprintf(why, why_cap, "the body holds no part (no boundary \"%.70s\")", boundary);
            return -1;
        }
        p = at + dl;
    }
    const char *end = body + n;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0;   /* the close delimiter: done (an epilogue may follow) */
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') {
            snprintf(why, why_cap, "a boundary line must end in CRLF");
            return -1;
        }
        p += 2;
        const char *hend = find(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend && end - p >= 2 && p[0] == '\r' && p[1] == '\n')
            hend = p - 2;   /* no headers at all */
        if (!hend) {
            snprintf(why, why_cap, "a part's headers do not end (no blank line)");
            return -1;
        }
        if (*n_parts == max) {
            snprintf(why, why_cap, "more than %zu parts", max);
            return -1;
        }
        web_part *pt = &parts[*n_parts];
        memset(pt, 0, sizeof *pt);
        int disposition = 0;
        for (const char *h = p; h < hend;) {
            const char *eol = find(h, (size_t)(hend - h) + 2, "\r\n", 2);
            size_t hl = (size_t)((eol ? eol : hend) - h);
            const char *colon = memchr(h, ':', hl);
            if (!colon) {
                snprintf(why, why_cap, "a part's header line has no ':'");
                return -1;
            }
            size_t nl = (size_t)(colon - h);
            const char *v = colon + 1;
            size_t vl = hl - nl - 1;
            while (vl && (*v == ' ' || *v == '\t')) {
                v++;
                vl--;
            }
            if (nl == 19 && strncasecmp(h, "Content-Disposition", 19) == 0) {
                if (vl < 9 || strncasecmp(v, "form-data", 9) != 0) {
                    snprintf(why, why_cap, "a part's Content-Disposition must be form-data");
                    return -1;
                }
                disposition = 1;
                if (!param(v + 9, vl - 9, "name", pt->name, sizeof pt->name)) {
                    snprintf(why, why_cap, "a part has no name");
                    return -1;
                }
                pt->has_filename = param(v + 9, vl - 9, "filename", pt->filename, sizeof pt->filename);
            } else if (nl == 12 && strncasecmp(h, "Content-Type", 12) == 0) {
                snprintf(pt->ctype, sizeof pt->ctype, "%.*s", (int)(vl < sizeof pt->ctype ? vl : sizeof pt->ctype - 1), v);
            }
            h += hl + 2;
        }
        if (!disposition) {
            snprintf(why, why_cap, "a part has no Content-Disposition");
            return -1;
        }
        const char *data = hend + 4;
        const char *next = data <= end ? find(data, (size_t)(end - data), delim, (size_t)dl) : NULL;
        if (!next) {
            snprintf(why, why_cap, "part \"%.64s\" does not end (no closing boundary)", pt->name);
            return -1;
        }
        pt->data = data;
        pt->len = (size_t)(next - data);
        (*n_parts)++;
        p = next + dl;
    }
}
