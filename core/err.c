/* err.c — formatting of em_err messages and the code table. */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int is_control(unsigned char c)
{
    return c < 0x20 || c == 0x7f;
}

void em_err_escape(char *s, size_t cap)
{
    if (!cap)
        return;
    size_t n = strnlen(s, cap - 1), len, out = 0;
    /* the len bytes that fit once escaped (out bytes) ... */
    for (len = 0; len < n; len++) {
        size_t w = is_control((unsigned char)s[len]) ? 4 : 1;
        if (out + w > cap - 1)
            break;
        out += w;
    }
    if (len == n && out == n)   /* nothing to escape */
        return;
    /* ... moved into place from the end: no byte is written before it is read */
    s[out] = '\0';
    for (size_t i = len, o = out; i > 0; i--) {
        unsigned char c = (unsigned char)s[i - 1];
        if (is_control(c)) {
            static const char hex[] = "0123456789abcdef";
            o -= 4;
            s[o] = '\\';
            s[o + 1] = 'x';
            s[o + 2] = hex[c >> 4];
            s[o + 3] = hex[c & 15];
        } else {
            s[--o] = (char)c;
        }
    }
}

int em_err_set(em_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    em_err_escape(err->msg, sizeof err->msg);
    err->code = code;
    return code;
}

int em_err_prefix(em_err *err, int code, const char *fmt, ...)
{
    if (!err)
        return code;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", head, old);
    em_err_escape(err->msg, sizeof err->msg);
    if (err->code == EM_OK)
        err->code = code;
    return err->code;
}

const char *em_err_str(int code)
{
    switch (code) {
    case EM_OK:           return "ok";
    case EM_EINVAL:       return "invalid argument";
    case EM_ENOENT:       return "not found";
    case EM_EFORMAT:      return "malformed data";
    case EM_EUNSUPPORTED: return "not supported";
    case EM_ERANGE:       return "out of range";
    case EM_ENOMEM:       return "out of memory";
    case EM_EIO:          return "input/output error";
    case EM_EDEVICE:      return "device error";
    case EM_EBUSY:        return "busy";
    case EM_ESTATE:       return "invalid state";
    case EM_ECANCELED:    return "cancelled";
    default:              return "unknown error";
    }
}

int em_err_is_input(int code)
{
    return code == EM_EINVAL || code == EM_ENOENT || code == EM_EFORMAT ||
           code == EM_EUNSUPPORTED || code == EM_ERANGE;
}
