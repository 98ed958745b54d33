/* assets.c — the browser UI served from memory: GET / (the chat page),
 * GET /dashboard (the usage dashboard) and GET /static/... (its modules,
 * styles and the Debian libraries), from the table web/embed_www.py
 * generates at build time. Each answer carries its content type, a strong
 * ETag (304 when the browser's If-None-Match holds it), `no-cache` so that
 * a new build is picked up at the next load, and on pages a Content
 * Security Policy that lets scripts, styles, fonts and connections come
 * from this server only: no CDN, no other host, and no inline script — a
 * model's output that slipped past the sanitiser still could not run. */
#include <stdio.h>
#include <string.h>

#include "em_assets.h"
#include "web/web_int.h"

const em_asset *web_asset_find(const char *path)
{
    for (size_t i = 0; i < em_n_assets; i++)
        if (strcmp(em_assets[i].path, path) == 0)
            return &em_assets[i];
    return NULL;
}

int web_assets_route(web_conn *c)
{
    const char *p = c->path;
    int page = strcmp(p, "/") == 0 || strcmp(p, "/dashboard") == 0;
    if (!page && strncmp(p, "/static/", 8) != 0)
        return 1;
    /* (an open conversation's URL is /?c=ID: the query is the page's) */
    const em_asset *a = web_asset_find(p);
    em_web_error e = { 0 };
    if (!a) {
        em_web_fail(&e, 404, "invalid_request_error", "not_found", NULL, "no such file: %s", p);
        web_respond_error(c, &e);
        return 0;
    }
    if (c->method != EM_M_GET) {
        em_web_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s takes GET", p);
        web_respond_error(c, &e);
        return 0;
    }
    size_t used = strlen(c->headers);
    /* (the content security policy and the other guards: server.c, on every response) */
    snprintf(c->headers + used, sizeof c->headers - used, "etag: %s\r\ncache-control: no-cache\r\n", a->etag);
    if (c->if_none_match[0] && strcmp(c->if_none_match, a->etag) == 0) {
        web_respond(c, 304, a->type, "", 0);
        return 0;
    }
    web_respond(c, 200, a->type, (const char *)a->data, a->size);
    return 0;
}
