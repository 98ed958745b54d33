/* chat_tmpl_methods.c — the Python side of chat templates: the str, dict
 * and list methods the sandbox allows (strip, split, startswith, replace,
 * format, get, items, ...), the globals (range, namespace, dict,
 * raise_exception, strftime_now), printf-style % formatting, and the
 * Unicode helpers they rest on (UTF-8, whitespace, case mapping for the
 * Latin, Greek, Cyrillic and Armenian scripts, printability). */
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_tmpl_int.h"

/* ----------------------------------------------------------- Unicode */

uint32_t tu_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *u = (const unsigned char *)s;
    if (!n) {
        *adv = 0;
        return 0;
    }
    if (u[0] < 0x80 || n < 2) {
        *adv = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *adv = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || n < 4) {
        if (n < 3) {
            *adv = 1;
            return u[0];
        }
        *adv = 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *adv = 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

size_t tu_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int tu_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else {
            goto bad;
        }
        if (n - i < len || u[i + 1] < lo || u[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k < len; k++)
            if (u[i + k] < 0x80 || u[i + k] > 0xBF)
                goto bad;
        i += len;
        continue;
    bad:
        if (bad_at)
            *bad_at = i;
        return 0;
    }
    return 1;
}

int tu_is_space(uint32_t cp)
{
    if (cp < 0x80)
        return cp == ' ' || (cp >= '\t' && cp <= '\r') || (cp >= 0x1c && cp <= 0x1f);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Simple one-to-one case mappings: ranges of upper case letters and the
 * distance to their lower case (alt: upper and lower alternate, upper
 * first), then single pairs. */
static const struct { uint32_t lo, hi; int32_t delta; uint8_t alt; } case_ranges[] = {
    { 0x41, 0x5A, 32, 0 },       { 0xC0, 0xD6, 32, 0 },       { 0xD8, 0xDE, 32, 0 },
    { 0x100, 0x12F, 1, 1 },      { 0x132, 0x137, 1, 1 },      { 0x139, 0x148, 1, 1 },
    { 0x14A, 0x177, 1, 1 },      { 0x179, 0x17E, 1, 1 },      { 0x182, 0x185, 1, 1 },
    { 0x1A0, 0x1A5, 1, 1 },      { 0x1CD, 0x1DC, 1, 1 },      { 0x1DE, 0x1EF, 1, 1 },
    { 0x1F8, 0x21F, 1, 1 },      { 0x222, 0x233, 1, 1 },      { 0x246, 0x24F, 1, 1 },
    { 0x370, 0x373, 1, 1 },      { 0x391, 0x3A1, 32, 0 },     { 0x3A3, 0x3AB, 32, 0 },
    { 0x3D8, 0x3EF, 1, 1 },      { 0x400, 0x40F, 80, 0 },     { 0x410, 0x42F, 32, 0 },
    { 0x460, 0x481, 1, 1 },      { 0x48A, 0x4BF, 1, 1 },      { 0x4C1, 0x4CE, 1, 1 },
    { 0x4D0, 0x52F, 1, 1 },      { 0x531, 0x556, 48, 0 },     { 0x10A0, 0x10C5, 7264, 0 },
    { 0x1E00, 0x1E95, 1, 1 },    { 0x1EA0, 0x1EFF, 1, 1 },    { 0x1F08, 0x1F0F, -8, 0 },
    { 0x1F18, 0x1F1D, -8, 0 },   { 0x1F28, 0x1F2F, -8, 0 },   { 0x1F38, 0x1F3F, -8, 0 },
    { 0x1F48, 0x1F4D, -8, 0 },   { 0x1F68, 0x1F6F, -8, 0 },   { 0x2160, 0x216F, 16, 0 },
    { 0x24B6, 0x24CF, 26, 0 },   { 0x2C00, 0x2C2F, 48, 0 },   { 0xA640, 0xA66D, 1, 1 },
    { 0xA680, 0xA69B, 1, 1 },    { 0xA722, 0xA72F, 1, 1 },    { 0xA732, 0xA76F, 1, 1 },
    { 0xA779, 0xA77C, 1, 1 },    { 0xA77E, 0xA787, 1, 1 },    { 0xFF21, 0xFF3A, 32, 0 },
    { 0x10400, 0x10427, 40, 0 },
};

static const struct { uint32_t up, low; } case_pairs[] = {
    { 0x178, 0xFF }, { 0x386, 0x3AC }, { 0x388, 0x3AD }, { 0x389, 0x3AE }, { 0x38A, 0x3AF },
    { 0x38C, 0x3CC }, { 0x38E, 0x3CD }, { 0x38F, 0x3CE }, { 0x181, 0x253 }, { 0x186, 0x254 },
    { 0x189, 0x256 }, { 0x18A, 0x257 }, { 0x18E, 0x1DD }, { 0x18F, 0x259 }, { 0x190, 0x25B },
    { 0x193, 0x260 }, { 0x194, 0x263 }, { 0x196, 0x269 }, { 0x197, 0x268 }, { 0x19C, 0x26F },
    { 0x19D, 0x272 }, { 0x19F, 0x275 }, { 0x1A9, 0x283 }, { 0x1AE, 0x288 }, { 0x1B1, 0x28A },
    { 0x1B2, 0x28B }, { 0x1B7, 0x292 }, { 0x187, 0x188 }, { 0x18B, 0x18C }, { 0x191, 0x192 },
    { 0x198, 0x199 }, { 0x1A7, 0x1A8 }, { 0x1AC, 0x1AD }, { 0x1AF, 0x1B0 }, { 0x1B3, 0x1B4 },
    { 0x1B5, 0x1B6 }, { 0x1B8, 0x1B9 }, { 0x1BC, 0x1BD }, { 0x1C4, 0x1C6 }, { 0x1C7, 0x1C9 },
    { 0x1CA, 0x1CC }, { 0x1F1, 0x1F3 }, { 0x1F4, 0x1F5 }, { 0x1F6, 0x195 }, { 0x1F7, 0x1BF },
    { 0x220, 0x19E }, { 0x23A, 0x2C65 }, { 0x23B, 0x23C }, { 0x23D, 0x19A }, { 0x23E, 0x2C66 },
    { 0x241, 0x242 }, { 0x243, 0x180 }, { 0x244, 0x289 }, { 0x245, 0x28C }, { 0x376, 0x377 },
    { 0x37F, 0x3F3 }, { 0x3CF, 0x3D7 }, { 0x3F7, 0x3F8 }, { 0x3FA, 0x3FB }, { 0x3F9, 0x3F2 },
    { 0x4C0, 0x4CF }, { 0x2132, 0x214E }, { 0x2183, 0x2184 },
};

/* Upper case letters whose lower case maps back elsewhere (lower() only). */
static const struct { uint32_t up, low; } lower_only[] = {
    { 0x130, 'i' }, { 0x3F4, 0x3B8 }, { 0x1E9E, 0xDF }, { 0x2126, 0x3C9 }, { 0x212A, 'k' },
    { 0x212B, 0xE5 },
};

/* Lower case letters whose upper case is not the other way (upper() only). */
static const struct { uint32_t low, up; } upper_only[] = {
    { 0xB5, 0x39C }, { 0x131, 'I' }, { 0x17F, 'S' }, { 0x3C2, 0x3A3 }, { 0x3D0, 0x392 },
    { 0x3D1, 0x398 }, { 0x3D5, 0x3A6 }, { 0x3D6, 0x3A0 }, { 0x3F0, 0x39A }, { 0x3F1, 0x3A1 },
    { 0x3F5, 0x395 }, { 0x1E9B, 0x1E60 }, { 0x1FBE, 0x399 }, { 0x1C5, 0x1C4 }, { 0x1C8, 0x1C7 },
    { 0x1CB, 0x1CA }, { 0x1F2, 0x1F1 },
};

uint32_t tu_lower(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    for (size_t i = 0; i < sizeof lower_only / sizeof lower_only[0]; i++)
        if (lower_only[i].up == cp)
            return lower_only[i].low;
    for (size_t i = 0; i < sizeof case_pairs / sizeof case_pairs[0]; i++)
        if (case_pairs[i].up == cp)
            return case_pairs[i].low;
    for (size_t i = 0; i < sizeof case_ranges / sizeof case_ranges[0]; i++) {
        uint32_t lo = case_ranges[i].lo, hi = case_ranges[i].hi;
        if (cp < lo || cp > hi)
            continue;
        if (case_ranges[i].alt)
            return (cp - lo) % 2 == 0 ? cp + 1 : cp;
        return (uint32_t)((int64_t)cp + case_ranges[i].delta);
    }
    return cp;
}

uint32_t tu_upper(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= 'a' && cp <= 'z' ? cp - 32 : cp;
    for (size_t i = 0; i < sizeof upper_only / sizeof upper_only[0]; i++)
        if (upper_only[i].low == cp)
            return upper_only[i].up;
    for (size_t i = 0; i < sizeof case_pairs / sizeof case_pairs[0]; i++)
        if (case_pairs[i].low == cp)
            return case_pairs[i].up;
    for (size_t i = 0; i < sizeof case_ranges / sizeof case_ranges[0]; i++) {
        uint32_t lo = case_ranges[i].lo, hi = case_ranges[i].hi;
        if (case_ranges[i].alt) {
            if (cp > lo && cp <= hi && (cp - lo) % 2 == 1)
                return cp - 1;
            continue;
        }
        int64_t d = case_ranges[i].delta;
        if ((int64_t)cp >= (int64_t)lo + d && (int64_t)cp <= (int64_t)hi + d)
            return (uint32_t)((int64_t)cp - d);
    }
    return cp;
}

int tu_is_cased(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return tu_upper(cp) != cp || tu_lower(cp) != cp || cp == 0xDF || cp == 0x138 || cp == 0x149 ||
           cp == 0x1F0 || cp == 0x390 || cp == 0x3B0 || cp == 0x587 || (cp >= 0x250 && cp <= 0x2AF);
}

int tu_is_alnum(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    if (tu_is_space(cp) || cp < 0xC0 || cp == 0xD7 || cp == 0xF7)
        return cp == 0xAA || cp == 0xB2 || cp == 0xB3 || cp == 0xB5 || cp == 0xB9 || cp == 0xBA ||
               (cp >= 0xBC && cp <= 0xBE);
    if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
        (cp >= 0xFE00 && cp <= 0xFE6F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
        (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0x1F000 && cp <= 0x1FBFF) ||
        (cp >= 0xE000 && cp <= 0xF8FF) || (cp >= 0x300 && cp <= 0x36F) || cp == 0x5BE ||
        (cp >= 0x5C0 && cp <= 0x5CF) || (cp >= 0x5F3 && cp <= 0x5FF) || cp == 0x60C || cp == 0x61B ||
        cp == 0x61F || (cp >= 0x64B && cp <= 0x65F))
        return 0;
    return 1;
}

int tu_is_printable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
        return 0;
    if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E ||
        cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) ||
        cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF ||
        (cp >= 0x1D173 && cp <= 0x1D17A) || (cp >= 0xE0000 && cp <= 0xE0FFF) || cp >= 0xF0000)
        return 0;
    return 1;
}

static int is_linebreak(uint32_t cp)
{
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static int put_cp(tctx *c, tbuf *b, uint32_t cp)
{
    char e[4];
    return tb_put(c, b, e, tu_encode(cp, e));
}

/* upper() of one code point, with the expansions Python makes; title
 * case (title(), capitalize()) differs for the Latin digraphs. */
static int put_upper(tctx *c, tbuf *b, uint32_t cp, int title)
{
    if (title && ((cp >= 0x1C4 && cp <= 0x1CC) || (cp >= 0x1F1 && cp <= 0x1F3))) {
        uint32_t base = cp >= 0x1F1 ? 0x1F1 : 0x1C4 + (cp - 0x1C4) / 3 * 3;
        return put_cp(c, b, base + 1);
    }
    if (cp == 0xDF)
        return tb_put(c, b, "SS", 2);
    if (cp == 0x149)
        return tb_put(c, b, "\xCA\xBCN", 3);
    return put_cp(c, b, tu_upper(cp));
}

int tu_case(tctx *c, tbuf *b, const char *s, size_t n, int how)
{
    int rc = 0, prev_cased = 0, first = 1;
    if (c && n > 64 && (rc = tc_steps(c, n / 64)))
        return rc;
    for (size_t i = 0; i < n && !rc;) {
        size_t adv;
        uint32_t cp = tu_decode(s + i, n - i, &adv);
        if (cp < 0x80 && how != TCASE_TITLE && how != TCASE_CAPITALIZE) {   /* fast path */
            char ch = (char)cp;
            if (how == TCASE_UPPER && ch >= 'a' && ch <= 'z')
                ch = (char)(ch - 32);
            else if (how == TCASE_LOWER && ch >= 'A' && ch <= 'Z')
                ch = (char)(ch + 32);
            else if (how == TCASE_SWAP && ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z'))
                ch = (char)(ch ^ 0x20);
            rc = tb_putc(c, b, ch);
            i += adv;
            continue;
        }
        int cased = tu_is_cased(cp);
        int up = 0;
        switch (how) {
        case TCASE_UPPER: up = 1; break;
        case TCASE_LOWER: up = 0; break;
        case TCASE_CAPITALIZE: up = first; break;
        case TCASE_TITLE: up = !prev_cased; break;
        case TCASE_SWAP: up = tu_lower(cp) == cp; break;
        default: break;
        }
        if (how == TCASE_SWAP && !cased) {
            rc = tb_put(c, b, s + i, adv);
        } else if (up) {
            rc = put_upper(c, b, cp, how == TCASE_TITLE || how == TCASE_CAPITALIZE);
        } else if (cp == 0x130) {   /* İ lowers to i + combining dot */
            rc = tb_put(c, b, "i\xCC\x87", 3);
        } else if (cp == 0x3A3) {   /* final sigma: after a cased letter, not before one */
            size_t adv2 = 0;
            uint32_t next = i + adv < n ? tu_decode(s + i + adv, n - i - adv, &adv2) : 0;
            rc = put_cp(c, b, prev_cased && !(i + adv < n && tu_is_cased(next)) ? 0x3C2 : 0x3C3);
        } else {
            rc = put_cp(c, b, tu_lower(cp));
        }
        prev_cased = cased;
        first = 0;
        i += adv;
    }
    return rc;
}

static int in_chars(uint32_t cp, const char *chars, size_t nchars)
{
    for (size_t i = 0; i < nchars;) {
        size_t adv;
        if (tu_decode(chars + i, nchars - i, &adv) == cp)
            return 1;
        i += adv;
    }
    return 0;
}

static size_t prev_start(const char *s, size_t i)
{
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    return i > 0 ? i - 1 : 0;
}

void tu_strip(const char *s, size_t n, const char *chars, size_t nchars, int which, size_t *start,
              size_t *end)
{
    size_t a = 0, b = n;
    if (which & 1)
        while (a < b) {
            size_t adv;
            uint32_t cp = tu_decode(s + a, b - a, &adv);
            if (chars ? !in_chars(cp, chars, nchars) : !tu_is_space(cp))
                break;
            a += adv;
        }
    if (which & 2)
        while (b > a) {
            size_t p = prev_start(s, b), adv;
            uint32_t cp = tu_decode(s + p, b - p, &adv);
            if (chars ? !in_chars(cp, chars, nchars) : !tu_is_space(cp))
                break;
            b = p;
        }
    *start = a;
    *end = b;
}

int tu_splitlines(tctx *c, const char *s, size_t n, tval *out)
{
    int rc = tl_new(c, 0, 0, out);
    size_t a = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t adv;
        uint32_t cp = tu_decode(s + i, n - i, &adv);
        if (!is_linebreak(cp)) {
            i += adv;
            continue;
        }
        tval line;
        if (!(rc = ts_new(c, s + a, i - a, &line)))
            rc = tl_push(c, out, line);
        i += adv;
        if (cp == '\r' && i < n && s[i] == '\n')
            i++;
        a = i;
    }
    if (!rc && a < n) {
        tval line;
        if (!(rc = ts_new(c, s + a, n - a, &line)))
            rc = tl_push(c, out, line);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}

/* Byte offset -> code point index. */
static size_t char_index(const tstr *s, size_t off)
{
    if (s->nchars == s->len)
        return off;
    size_t n = 0;
    for (size_t i = 0; i < off; i++)
        n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return n;
}

/* ------------------------------------------------------------ methods */

enum {
    TM_NONE,
    TM_S_CAPITALIZE, TM_S_CASEFOLD, TM_S_CENTER, TM_S_COUNT, TM_S_ENDSWITH, TM_S_FIND, TM_S_FORMAT,
    TM_S_INDEX, TM_S_ISALNUM, TM_S_ISALPHA, TM_S_ISDECIMAL, TM_S_ISDIGIT, TM_S_ISLOWER,
    TM_S_ISNUMERIC, TM_S_ISSPACE, TM_S_ISTITLE, TM_S_ISUPPER, TM_S_JOIN, TM_S_LJUST, TM_S_LOWER,
    TM_S_LSTRIP, TM_S_PARTITION, TM_S_REMOVEPREFIX, TM_S_REMOVESUFFIX, TM_S_REPLACE, TM_S_RFIND,
    TM_S_RINDEX, TM_S_RJUST, TM_S_RPARTITION, TM_S_RSPLIT, TM_S_RSTRIP, TM_S_SPLIT, TM_S_SPLITLINES,
    TM_S_STARTSWITH, TM_S_STRIP, TM_S_SWAPCASE, TM_S_TITLE, TM_S_UPPER, TM_S_ZFILL,
    TM_D_GET, TM_D_ITEMS, TM_D_KEYS, TM_D_VALUES, TM_D_COPY,
    TM_L_COUNT, TM_L_INDEX, TM_L_COPY,
    TM_N,
};

static const char *const method_names[TM_N] = {
    "", "capitalize", "casefold", "center", "count", "endswith", "find", "format", "index",
    "isalnum", "isalpha", "isdecimal", "isdigit", "islower", "isnumeric", "isspace", "istitle",
    "isupper", "join", "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix",
    "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "zfill",
    "get", "items", "keys", "values", "copy",
    "count", "index", "copy",
};

const char *tm_method_name(int id)
{
    return id > 0 && id < TM_N ? method_names[id] : "method";
}

static int name_is(const char *name, size_t len, const char *w)
{
    return strlen(w) == len && memcmp(name, w, len) == 0;
}

int tm_method_id(const tval *v, const char *name, size_t len)
{
    if (v->t == TV_STR) {
        for (int i = TM_S_CAPITALIZE; i <= TM_S_ZFILL; i++)
            if (name_is(name, len, method_names[i]))
                return i;
        return 0;
    }
    if (v->t == TV_DICT) {
        for (int i = TM_D_GET; i <= TM_D_COPY; i++)
            if (name_is(name, len, method_names[i]))
                return i;
        static const char *const unsafe[] = { "clear", "pop", "popitem", "setdefault", "update" };
        for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
            if (name_is(name, len, unsafe[i]))
                return -1;
        return 0;
    }
    if (v->t == TV_LIST && !(v->fl & (TVF_ITEMS | TVF_KEYS | TVF_VALUES))) {
        for (int i = TM_L_COUNT; i <= TM_L_COPY; i++)
            if (name_is(name, len, method_names[i]) && !(i == TM_L_COPY && (v->fl & TVF_TUPLE)))
                return i;
        static const char *const unsafe[] = { "append", "clear", "extend", "insert", "pop",
                                              "remove", "reverse", "sort" };
        if (!(v->fl & TVF_TUPLE))
            for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
                if (name_is(name, len, unsafe[i]))
                    return -1;
    }
    return 0;
}

/* Python slice-adjusted [start, end) in code points of s, as byte offsets. */
static int str_range(tctx *c, const tstr *s, const tval *start, const tval *end, size_t *a, size_t *b)
{
    int64_t n = (int64_t)s->nchars, st = 0, en = n;
    if (start && start->t != TV_ABSENT && start->t != TV_NONE) {
        if (start->t != TV_INT && start->t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "slice indices must be integers or None");
        st = start->u.i < 0 ? start->u.i + n : start->u.i;
    }
    if (end && end->t != TV_ABSENT && end->t != TV_NONE) {
        if (end->t != TV_INT && end->t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "slice indices must be integers or None");
        en = end->u.i < 0 ? end->u.i + n : end->u.i;
    }
    if (st < 0)
        st = 0;
    if (en > n)
        en = n;
    if (en < 0)
        en = 0;
    if (st > n) {   /* empty, past the end */
        *a = *b = s->len + 1;
        return 0;
    }
    *a = ts_offset(s, (size_t)st);
    *b = en < st ? *a : ts_offset(s, (size_t)en);
    return 0;
}

static int need_str(tctx *c, const char *m, const tval *v)
{
    if (v->t == TV_STR)
        return 0;
    return tc_fail(c, NULL, EM_EINVAL, "%s arg must be str, not %s", m, tv_type_name(v));
}

static int make_str(tctx *c, const char *s, size_t n, uint8_t safe, tval *out)
{
    int rc = ts_new(c, s, n, out);
    if (!rc)
        out->fl = safe;
    return rc;
}

static int m_split(tctx *c, const tval *self, const targs *a, int right, tval *out)
{
    static const char *const names[] = { "sep", "maxsplit" };
    tval p[2];
    int rc = targs_bind(c, right ? "rsplit" : "split", names, 2, a, p);
    if (rc)
        return rc;
    const tstr *s = tv_s(self);
    int64_t maxs = -1;
    if (p[1].t != TV_ABSENT) {
        if (p[1].t != TV_INT && p[1].t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "maxsplit must be an integer");
        maxs = p[1].u.i;
    }
    uint64_t left = maxs < 0 ? UINT64_MAX : (uint64_t)maxs;
    uint8_t safe = self->fl & TVF_SAFE;
    if ((rc = tc_steps(c, s->len / 16 + 1)) || (rc = tl_new(c, 0, 0, out)))
        return rc;
    tval piece;
    if (p[0].t == TV_ABSENT || p[0].t == TV_NONE) {
        if (!right) {
            size_t i = 0, n = s->len;
            while (left-- > 0) {
                size_t adv;
                while (i < n && tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if (i == n)
                    break;
                size_t j = i;
                while (i < n && !tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if ((rc = make_str(c, s->s + j, i - j, safe, &piece)) || (rc = tl_push(c, out, piece)))
                    goto fail;
            }
            if (i < n) {
                size_t adv;
                while (i < n && tu_is_space(tu_decode(s->s + i, n - i, &adv)))
                    i += adv;
                if (i < n && ((rc = make_str(c, s->s + i, n - i, safe, &piece)) ||
                              (rc = tl_push(c, out, piece))))
                    goto fail;
            }
            return 0;
        }
        /* rsplit on whitespace: collect from the right, then reverse */
        size_t i = s->len;
        while (left-- > 0) {
            size_t adv;
            while (i > 0) {
                size_t ps = prev_start(s->s, i);
                if (!tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if (i == 0)
                break;
            size_t j = i;
            while (i > 0) {
                size_t ps = prev_start(s->s, i);
                if (tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if ((rc = make_str(c, s->s + i, j - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                goto fail;
        }
        if (i > 0) {
            size_t adv;
            while (i > 0) {
                size_t ps = prev_start(s->s, i);
                if (!tu_is_space(tu_decode(s->s + ps, i - ps, &adv)))
                    break;
                i = ps;
            }
            if (i > 0 && ((rc = make_str(c, s->s, i, safe, &piece)) || (rc = tl_push(c, out, piece))))
                goto fail;
        }
    } else {
        if ((rc = need_str(c, "sep", &p[0])))
            goto fail;
        const tstr *sep = tv_s(&p[0]);
        if (!sep->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "empty separator");
            goto fail;
        }
        if (!right) {
            size_t i = 0;
            for (;;) {
                const char *hit = left ? memmem(s->s + i, s->len - i, sep->s, sep->len) : NULL;
                if (!hit)
                    break;
                left--;
                size_t h = (size_t)(hit - s->s);
                if ((rc = make_str(c, s->s + i, h - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                    goto fail;
                i = h + sep->len;
            }
            if ((rc = make_str(c, s->s + i, s->len - i, safe, &piece)) || (rc = tl_push(c, out, piece)))
                goto fail;
            return 0;
        }
        size_t end = s->len;
        while (left) {
            size_t h = SIZE_MAX;
            for (size_t k = end; k >= sep->len; k--)
                if (memcmp(s->s + k - sep->len, sep->s, sep->len) == 0) {
                    h = k - sep->len;
                    break;
                }
            if (h == SIZE_MAX)
                break;
            left--;
            if ((rc = make_str(c, s->s + h + sep->len, end - h - sep->len, safe, &piece)) ||
                (rc = tl_push(c, out, piece)))
                goto fail;
            end = h;
        }
        if ((rc = make_str(c, s->s, end, safe, &piece)) || (rc = tl_push(c, out, piece)))
            goto fail;
    }
    /* right splits were collected backwards */
    tlist *l = tv_l(out);
    for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
        tval t = l->v[i];
        l->v[i] = l->v[j];
        l->v[j] = t;
    }
    return 0;
fail:
    tv_drop(c, out);
    return rc;
}

static int m_affix(tctx *c, const tval *self, const targs *a, int ends, int *res)
{
    static const char *const names[] = { "prefix", "start", "end" };
    tval p[3];
    int rc = targs_bind(c, ends ? "endswith" : "startswith", names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes at least 1 argument", ends ? "endswith" : "startswith");
    const tstr *s = tv_s(self);
    size_t lo, hi;
    if ((rc = str_range(c, s, &p[1], &p[2], &lo, &hi)))
        return rc;
    const tval *cands = &p[0];
    size_t nc = 1;
    if (p[0].t == TV_LIST && (p[0].fl & TVF_TUPLE)) {
        cands = tv_l(&p[0])->v;
        nc = tv_l(&p[0])->n;
    } else if (p[0].t != TV_STR) {
        return tc_fail(c, NULL, EM_EINVAL, "%s first arg must be str or a tuple of str, not %s",
                       ends ? "endswith" : "startswith", tv_type_name(&p[0]));
    }
    *res = 0;
    if (lo > s->len)
        return 0;
    for (size_t i = 0; i < nc && !*res; i++) {
        if (cands[i].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "tuple for %s must only contain str",
                           ends ? "endswith" : "startswith");
        const tstr *x = tv_s(&cands[i]);
        if (x->len <= hi - lo)
            *res = memcmp(ends ? s->s + hi - x->len : s->s + lo, x->s, x->len) == 0;
    }
    return 0;
}

/* find / rfind / index / rindex / count */
static int m_find(tctx *c, const tval *self, const targs *a, int id, tval *out)
{
    static const char *const names[] = { "sub", "start", "end" };
    tval p[3];
    int rc = targs_bind(c, method_names[id], names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT || (rc = need_str(c, method_names[id], &p[0])))
        return rc ? rc : tc_fail(c, NULL, EM_EINVAL, "%s() takes at least 1 argument", method_names[id]);
    const tstr *s = tv_s(self), *sub = tv_s(&p[0]);
    size_t lo, hi;
    if ((rc = str_range(c, s, &p[1], &p[2], &lo, &hi)) || (rc = tc_steps(c, s->len / 64)))
        return rc;
    if (id == TM_S_COUNT) {
        int64_t n = 0;
        if (lo <= s->len) {
            if (!sub->len) {
                n = (int64_t)(char_index(s, hi) - char_index(s, lo)) + 1;
            } else {
                for (size_t i = lo; i + sub->len <= hi;) {
                    const char *hit = memmem(s->s + i, hi - i, sub->s, sub->len);
                    if (!hit)
                        break;
                    n++;
                    i = (size_t)(hit - s->s) + sub->len;
                }
            }
        }
        *out = tv_int(n);
        return 0;
    }
    long found = -1;
    if (lo <= s->len && sub->len <= hi - lo) {
        if (id == TM_S_FIND || id == TM_S_INDEX) {
            const char *hit = memmem(s->s + lo, hi - lo, sub->s, sub->len);
            if (hit)
                found = (long)(hit - s->s);
        } else {
            for (size_t k = hi - sub->len + 1; k-- > lo;)
                if (memcmp(s->s + k, sub->s, sub->len) == 0) {
                    found = (long)k;
                    break;
                }
        }
    }
    if (found < 0 && (id == TM_S_INDEX || id == TM_S_RINDEX))
        return tc_fail(c, NULL, EM_EINVAL, "substring not found");
    *out = tv_int(found < 0 ? -1 : (int64_t)char_index(s, (size_t)found));
    return 0;
}

static int m_replace(tctx *c, const tval *self, const targs *a, tval *out)
{
    static const char *const names[] = { "old", "new", "count" };
    tval p[3];
    int rc = targs_bind(c, "replace", names, 3, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT || p[1].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "replace() takes at least 2 arguments");
    if ((rc = need_str(c, "replace", &p[0])) || (rc = need_str(c, "replace", &p[1])))
        return rc;
    int64_t count = -1;
    if (p[2].t != TV_ABSENT) {
        if (p[2].t != TV_INT && p[2].t != TV_BOOL)
            return tc_fail(c, NULL, EM_EINVAL, "replace() count must be an integer");
        count = p[2].u.i;
    }
    const tstr *s = tv_s(self), *old = tv_s(&p[0]), *nw = tv_s(&p[1]);
    uint64_t left = count < 0 ? UINT64_MAX : (uint64_t)count;
    tbuf b = { 0 };
    int safe = self->fl & TVF_SAFE;
    if ((rc = tc_steps(c, s->len / 64)))
        return rc;
    if (!old->len) {
        for (size_t i = 0; i <= s->len && !rc;) {
            if (left) {
                rc = safe && !(p[1].fl & TVF_SAFE) ? tf_escape(c, &b, nw->s, nw->len)
                                                    : tb_put(c, &b, nw->s, nw->len);
                left--;
            }
            if (i == s->len || rc)
                break;
            size_t adv;
            tu_decode(s->s + i, s->len - i, &adv);
            rc = tb_put(c, &b, s->s + i, adv);
            i += adv;
        }
    } else {
        size_t i = 0;
        while (!rc) {
            const char *hit = left ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
            if (!hit)
                break;
            left--;
            size_t h = (size_t)(hit - s->s);
            if (!(rc = tb_put(c, &b, s->s + i, h - i)))
                rc = safe && !(p[1].fl & TVF_SAFE) ? tf_escape(c, &b, nw->s, nw->len)
                                                    : tb_put(c, &b, nw->s, nw->len);
            i = h + old->len;
        }
        if (!rc)
            rc = tb_put(c, &b, s->s + i, s->len - i);
    }
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = (uint8_t)safe;
    return 0;
}

static int m_join(tctx *c, const tval *self, const targs *a, tval *out)
{
    static const char *const names[] = { "iterable" };
    tval p[1], items;
    int rc = targs_bind(c, "join", names, 1, a, p);
    if (rc)
        return rc;
    if (p[0].t == TV_ABSENT)
        return tc_fail(c, NULL, EM_EINVAL, "join() takes exactly one argument");
    if ((rc = te_iterate(c, &p[0], &items)))
        return rc;
    const tstr *sep = tv_s(self);
    int safe = self->fl & TVF_SAFE;
    tbuf b = { 0 };
    const tlist *l = tv_l(&items);
    for (size_t i = 0; i < l->n && !rc; i++) {
        const tval *x = &l->v[i];
        if (x->t != TV_STR) {
            rc = tc_fail(c, NULL, EM_EINVAL, "sequence item %zu: expected str instance, %s found", i,
                         tv_type_name(x));
            break;
        }
        if (i)
            rc = tb_put(c, &b, sep->s, sep->len);
        if (!rc)
            rc = safe && !(x->fl & TVF_SAFE) ? tf_escape(c, &b, tv_s(x)->s, tv_s(x)->len)
                                              : tb_put(c, &b, tv_s(x)->s, tv_s(x)->len);
    }
    tv_drop(c, &items);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = (uint8_t)safe;
    return 0;
}

static int m_pad(tctx *c, const tval *self, const targs *a, int id, tval *out)
{
    static const char *const names[] = { "width", "fillchar" };
    tval p[2];
    int rc = targs_bind(c, method_names[id], names, id == TM_S_ZFILL ? 1 : 2, a, p);
    if (rc)
        return rc;
    if (p[0].t != TV_INT && p[0].t != TV_BOOL)
        return tc_fail(c, NULL, EM_EINVAL, "%s() needs an integer width", method_names[id]);
    const tstr *s = tv_s(self);
    const char *fill = " ";
    size_t fill_len = 1;
    if (id != TM_S_ZFILL && p[1].t != TV_ABSENT) {
        if (p[1].t != TV_STR || tv_s(&p[1])->nchars != 1)
            return tc_fail(c, NULL, EM_EINVAL, "The fill character must be exactly one character long");
        fill = tv_s(&p[1])->s;
        fill_len = tv_s(&p[1])->len;
    }
    int64_t width = p[0].u.i, len = (int64_t)s->nchars;
    if (width <= len)
        return make_str(c, s->s, s->len, self->fl & TVF_SAFE, out);
    if (width > (int64_t)TL_STRING)
        return tc_fail(c, NULL, EM_ERANGE, "a string would pass %zu MiB (EM_TMPL_MAX_STRING)",
                       (size_t)TL_STRING >> 20);
    int64_t marg = width - len, left;
    if (id == TM_S_CENTER)
        left = marg / 2 + (marg & width & 1);
    else if (id == TM_S_LJUST)
        left = 0;
    else
        left = marg;
    tbuf b = { 0 };
    size_t body = 0;
    if (id == TM_S_ZFILL) {
        fill = "0";
        if (s->len && (s->s[0] == '+' || s->s[0] == '-')) {
            rc = tb_putc(c, &b, s->s[0]);
            body = 1;
        }
    }
    for (int64_t i = 0; i < left && !rc; i++)
        rc = tb_put(c, &b, fill, fill_len);
    if (!rc)
        rc = tb_put(c, &b, s->s + body, s->len - body);
    for (int64_t i = 0; i < marg - left && !rc; i++)
        rc = tb_put(c, &b, fill, fill_len);
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = self->fl & TVF_SAFE;
    return 0;
}

static int m_partition(tctx *c, const tval *self, const targs *a, int right, tval *out)
{
    if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "%spartition() takes exactly one str argument", right ? "r" : "");
    const tstr *s = tv_s(self), *sep = tv_s(&a->pos[0]);
    if (!sep->len)
        return tc_fail(c, NULL, EM_EINVAL, "empty separator");
    long at = -1;
    if (!right) {
        const char *hit = memmem(s->s, s->len, sep->s, sep->len);
        if (hit)
            at = (long)(hit - s->s);
    } else {
        for (size_t k = s->len; k >= sep->len; k--)
            if (memcmp(s->s + k - sep->len, sep->s, sep->len) == 0) {
                at = (long)(k - sep->len);
                break;
            }
    }
    size_t cut[4];
    if (at < 0) {
        size_t e = right ? 0 : s->len;
        cut[0] = 0; cut[1] = e; cut[2] = e; cut[3] = e;
        if (right) {
            cut[1] = 0; cut[2] = 0; cut[3] = 0;
        }
    } else {
        cut[0] = 0; cut[1] = (size_t)at; cut[2] = (size_t)at + sep->len; cut[3] = s->len;
    }
    int rc = tl_new(c, 3, TVF_TUPLE, out);
    tval x;
    uint8_t safe = self->fl & TVF_SAFE;
    if (at < 0 && right) {   /* ('', '', s) */
        if (!rc && !(rc = make_str(c, "", 0, safe, &x)))
            rc = tl_push(c, out, x);
        if (!rc && !(rc = make_str(c, "", 0, safe, &x)))
            rc = tl_push(c, out, x);
        if (!rc && !(rc = make_str(c, s->s, s->len, safe, &x)))
            rc = tl_push(c, out, x);
    } else if (at < 0) {
        if (!rc && !(rc = make_str(c, s->s, s->len, safe, &x)))
            rc = tl_push(c, out, x);
        for (int k = 0; k < 2 && !rc; k++)
            if (!(rc = make_str(c, "", 0, safe, &x)))
                rc = tl_push(c, out, x);
    } else {
        for (int k = 0; k < 3 && !rc; k++)
            if (!(rc = make_str(c, s->s + cut[k], cut[k + 1] - cut[k], safe, &x)))
                rc = tl_push(c, out, x);
    }
    if (rc && out->t == TV_LIST)
        tv_drop(c, out);
    return rc;
}

static int m_is(const tstr *s, int id)
{
    if (!s->len)
        return 0;
    int cased = 0, prev_cased = 0, title_ok = 1, all = 1;
    for (size_t i = 0; i < s->len;) {
        size_t adv;
        uint32_t cp = tu_decode(s->s + i, s->len - i, &adv);
        int digit = (cp >= '0' && cp <= '9') || (cp >= 0x660 && cp <= 0x669) ||
                    (cp >= 0xFF10 && cp <= 0xFF19);
        switch (id) {
        case TM_S_ISALNUM: all &= tu_is_alnum(cp); break;
        case TM_S_ISALPHA: all &= tu_is_alnum(cp) && !digit && !(cp >= 0xB2 && cp <= 0xBE); break;
        case TM_S_ISDECIMAL:
        case TM_S_ISDIGIT:
        case TM_S_ISNUMERIC: all &= digit; break;
        case TM_S_ISSPACE: all &= tu_is_space(cp); break;
        case TM_S_ISLOWER:
        case TM_S_ISUPPER:
            if (tu_is_cased(cp)) {
                cased = 1;
                if (id == TM_S_ISLOWER ? tu_upper(cp) == cp && tu_lower(cp) != cp
                                       : tu_lower(cp) == cp && tu_upper(cp) != cp)
                    all = 0;
            }
            break;
        case TM_S_ISTITLE: {
            int c2 = tu_is_cased(cp), up = c2 && tu_lower(cp) != cp;
            if (c2) {
                if (up == prev_cased)
                    title_ok = 0;
                cased = 1;
            }
            prev_cased = c2;
            break;
        }
        default: break;
        }
        i += adv;
    }
    if (id == TM_S_ISLOWER || id == TM_S_ISUPPER)
        return cased && all;
    if (id == TM_S_ISTITLE)
        return cased && title_ok;
    return all;
}

/* ---------------------------------------------------- str.format() */

static int fmt_pad(tctx *c, tbuf *b, const char *s, size_t n, size_t nchars, char align, const char *fill,
                   size_t fill_len, int64_t width)
{
    int rc = 0;
    int64_t pad = width > (int64_t)nchars ? width - (int64_t)nchars : 0;
    if (pad > (int64_t)TL_STRING)
        return tc_fail(c, NULL, EM_ERANGE, "format width too large");
    int64_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
    for (int64_t i = 0; i < left && !rc; i++)
        rc = tb_put(c, b, fill, fill_len);
    if (!rc)
        rc = tb_put(c, b, s, n);
    for (int64_t i = 0; i < pad - left && !rc; i++)
        rc = tb_put(c, b, fill, fill_len);
    return rc;
}

/* One replacement field's value formatted with spec [[fill]align][sign][#][0][width][,][.prec][type]. */
static int fmt_value(tctx *c, tbuf *b, const tval *v, const char *spec, size_t n)
{
    char fill[4] = " ";
    size_t fill_len = 1, i = 0;
    char align = 0, sign = '-', type = 0;
    int alt = 0, zero = 0, comma = 0;
    int64_t width = -1, prec = -1;
    size_t adv = 0;
    if (n) {
        uint32_t cp = tu_decode(spec, n, &adv);
        if (adv < n && strchr("<>^=", spec[adv])) {
            fill_len = tu_encode(cp, fill);
            align = spec[adv];
            i = adv + 1;
        } else if (strchr("<>^=", spec[0])) {
            align = spec[0];
            i = 1;
        }
    }
    if (i < n && strchr("+- ", spec[i]))
        sign = spec[i++];
    if (i < n && spec[i] == '#')
        alt = 1, i++;
    if (i < n && spec[i] == '0')
        zero = 1, i++;
    if (i < n && spec[i] >= '0' && spec[i] <= '9') {
        width = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 100000000)
            width = width * 10 + (spec[i++] - '0');
    }
    if (i < n && (spec[i] == ',' || spec[i] == '_'))
        comma = 1, i++;
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 100000)
            prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n)
        type = spec[i++];
    if (i < n || comma)
        return tc_fail(c, NULL, EM_EUNSUPPORTED, "format spec '%.*s' is not supported", (int)n, spec);
    if (zero && !align) {
        fill[0] = '0';
        fill_len = 1;
        align = '=';
    }
    char num[512];
    int rc;
    if (v->t == TV_STR || (!type && v->t != TV_INT && v->t != TV_FLOAT && v->t != TV_BOOL) || type == 's') {
        tval s;
        if (type && type != 's')
            return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c' for object of type 'str'", type);
        if ((rc = tv_to_str(c, v, &s)))
            return rc;
        const tstr *t = tv_s(&s);
        size_t len = t->len, nch = t->nchars;
        if (prec >= 0 && (size_t)prec < nch) {
            len = ts_offset(t, (size_t)prec);
            nch = (size_t)prec;
        }
        rc = fmt_pad(c, b, t->s, len, nch, align ? align : '<', fill, fill_len, width);
        tv_drop(c, &s);
        return rc;
    }
    if (v->t == TV_BOOL && !type) {
        rc = fmt_pad(c, b, v->u.i ? "True" : "False", v->u.i ? 4 : 5, v->u.i ? 4 : 5, align ? align : '<',
                     fill, fill_len, width);
        return rc;
    }
    int is_int = v->t == TV_INT || v->t == TV_BOOL;
    double f = is_int ? (double)v->u.i : v->u.f;
    int neg = is_int ? v->u.i < 0 : signbit(f);
    char body[400];
    if (!type)
        type = is_int ? 'd' : 'r';
    if (strchr("dxXobc", type)) {
        if (!is_int)
            return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c' for object of type 'float'", type);
        uint64_t mag = neg ? 0 - (uint64_t)v->u.i : (uint64_t)v->u.i;
        if (type == 'b') {
            size_t o = 0;
            char tmp[70];
            do {
                tmp[o++] = (char)('0' + (mag & 1));
                mag >>= 1;
            } while (mag);
            size_t k = 0;
            if (alt)
                body[k++] = '0', body[k++] = 'b';
            while (o)
                body[k++] = tmp[--o];
            body[k] = '\0';
        } else if (type == 'c') {
            char e[5] = { 0 };
            tu_encode((uint32_t)mag, e);
            snprintf(body, sizeof body, "%s", e);
            neg = 0;
        } else {
            snprintf(body, sizeof body, type == 'd' ? "%llu" : type == 'x' ? (alt ? "0x%llx" : "%llx")
                                                     : type == 'X' ? (alt ? "0X%llX" : "%llX")
                                                                   : (alt ? "0o%llo" : "%llo"),
                     (unsigned long long)mag);
        }
    } else if (strchr("eEfFgG%r", type)) {
        double m = fabs(f);
        if (type == 'r') {
            tv_write_float(body, sizeof body, m);
        } else if (type == '%') {
            snprintf(body, sizeof body, "%.*f%%", (int)(prec < 0 ? 6 : prec > 300 ? 300 : prec), m * 100);
        } else {
            char cf[8];
            snprintf(cf, sizeof cf, "%%%s.*%c", alt ? "#" : "", type);
            snprintf(body, sizeof body, cf, (int)(prec < 0 ? 6 : prec > 300 ? 300 : prec), m);
        }
    } else {
        return tc_fail(c, NULL, EM_EINVAL, "Unknown format code '%c'", type);
    }
    size_t o = 0;
    if (neg)
        num[o++] = '-';
    else if (sign == '+')
        num[o++] = '+';
    else if (sign == ' ')
        num[o++] = ' ';
    size_t sign_len = o, bl = strlen(body);
    if (align == '=') {   /* padding between the sign and the digits */
        int64_t pad = width > (int64_t)(o + bl) ? width - (int64_t)(o + bl) : 0;
        if ((rc = tb_put(c, b, num, o)))
            return rc;
        for (int64_t k = 0; k < pad && !rc; k++)
            rc = tb_put(c, b, fill, fill_len);
        return rc ? rc : tb_put(c, b, body, bl);
    }
    (void)sign_len;
    memcpy(num + o, body, bl);
    o += bl;
    return fmt_pad(c, b, num, o, o, align ? align : '>', fill, fill_len, width);
}

static int m_format(tctx *c, const tval *self, const targs *a, tval *out)
{
    const tstr *s = tv_s(self);
    tbuf b = { 0 };
    int rc = 0;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s->len && !rc;) {
        char ch = s->s[i];
        if (ch == '}' ) {
            if (i + 1 < s->len && s->s[i + 1] == '}') {
                rc = tb_putc(c, &b, '}');
                i += 2;
                continue;
            }
            rc = tc_fail(c, NULL, EM_EINVAL, "Single '}' encountered in format string");
            break;
        }
        if (ch != '{') {
            rc = tb_putc(c, &b, ch);
            i++;
            continue;
        }
        if (i + 1 < s->len && s->s[i + 1] == '{') {
            rc = tb_putc(c, &b, '{');
            i += 2;
            continue;
        }
        size_t j = i + 1, depth = 1;
        while (j < s->len && depth) {
            if (s->s[j] == '{')
                depth++;
            else if (s->s[j] == '}')
                depth--;
            if (depth)
                j++;
        }
        if (j >= s->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "expected '}' before end of string");
            break;
        }
        /* field: name[.attr|[key]]*[!conv][:spec] */
        const char *f = s->s + i + 1;
        size_t fl = j - i - 1, k = 0;
        while (k < fl && f[k] != '.' && f[k] != '[' && f[k] != '!' && f[k] != ':')
            k++;
        tval v;
        if (k == 0 || (f[0] >= '0' && f[0] <= '9')) {
            size_t idx = auto_idx;
            if (k) {
                idx = 0;
                for (size_t q = 0; q < k; q++)
                    idx = idx * 10 + (size_t)(f[q] - '0');
            } else {
                auto_idx++;
            }
            if (idx >= a->npos) {
                rc = tc_fail(c, NULL, EM_EINVAL, "Replacement index %zu out of range for positional args tuple",
                             idx);
                break;
            }
            v = tv_ref(a->pos[idx]);
        } else {
            size_t q;
            for (q = 0; q < a->nkw; q++)
                if (strlen(a->kname[q]) == k && !memcmp(a->kname[q], f, k))
                    break;
            if (q == a->nkw) {
                rc = tc_fail(c, NULL, EM_EINVAL, "KeyError: '%.*s'", (int)k, f);
                break;
            }
            v = tv_ref(a->kval[q]);
        }
        while (!rc && k < fl && (f[k] == '.' || f[k] == '[')) {
            size_t st = k + 1, en = st;
            char close = f[k] == '.' ? 0 : ']';
            while (en < fl && (close ? f[en] != ']' : (f[en] != '.' && f[en] != '[' && f[en] != '!' &&
                                                        f[en] != ':')))
                en++;
            tval key, nv;
            int digits = en > st;
            for (size_t q = st; q < en; q++)
                digits &= f[q] >= '0' && f[q] <= '9';
            if (close && digits) {
                int64_t x = 0;
                for (size_t q = st; q < en && x < 1000000000; q++)
                    x = x * 10 + (f[q] - '0');
                key = tv_int(x);
            } else if ((rc = ts_new(c, f + st, en - st, &key))) {
                break;
            }
            rc = close ? te_getitem(c, &v, &key, &nv) : te_getattr(c, &v, &key, &nv);
            tv_drop(c, &key);
            tv_drop(c, &v);
            if (rc)
                break;
            v = nv;
            k = close ? en + 1 : en;
        }
        if (rc)
            break;
        char conv = 0;
        if (k + 1 < fl && f[k] == '!') {
            conv = f[k + 1];
            k += 2;
        }
        const char *spec = "";
        size_t spec_len = 0;
        if (k < fl && f[k] == ':') {
            spec = f + k + 1;
            spec_len = fl - k - 1;
        } else if (k < fl) {
            tv_drop(c, &v);
            rc = tc_fail(c, NULL, EM_EINVAL, "invalid format field");
            break;
        }
        if (conv == 'r' || conv == 'a' || conv == 's') {
            tbuf rb = { 0 };
            tval sv;
            rc = conv == 's' ? tv_write_str(c, &rb, &v) : tv_write_repr(c, &rb, &v);
            tv_drop(c, &v);
            if (rc || (rc = ts_from_buf(c, &rb, &sv))) {
                tb_free(c, &rb);
                break;
            }
            v = sv;
        } else if (conv) {
            tv_drop(c, &v);
            rc = tc_fail(c, NULL, EM_EINVAL, "Unknown conversion specifier %c", conv);
            break;
        }
        if (v.t == TV_UNDEF && !spec_len)
            rc = 0;
        else
            rc = fmt_value(c, &b, &v, spec, spec_len);
        tv_drop(c, &v);
        i = j + 1;
    }
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = self->fl & TVF_SAFE;
    return 0;
}

/* ------------------------------------------------ dict / list methods */

static int m_dict(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    const tdict *d = tv_d(self);
    int rc;
    if (id == TM_D_GET) {
        if (a->nkw || a->npos < 1 || a->npos > 2)
            return tc_fail(c, NULL, EM_EINVAL, "get expected 1 or 2 arguments, got %zu", a->npos + a->nkw);
        long at;
        if ((rc = td_find(c, d, &a->pos[0], &at)))
            return rc;
        *out = at >= 0 ? tv_ref(d->v[at]) : a->npos == 2 ? tv_ref(a->pos[1]) : tv_none();
        return 0;
    }
    if (a->npos || a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no arguments", method_names[id]);
    if ((rc = tc_steps(c, d->n)))
        return rc;
    if (id == TM_D_COPY) {
        if ((rc = td_new(c, 0, out)))
            return rc;
        for (size_t i = 0; i < d->n && !rc; i++)
            rc = td_set(c, out, tv_ref(d->k[i]), tv_ref(d->v[i]));
        if (rc)
            tv_drop(c, out);
        return rc;
    }
    uint8_t fl = id == TM_D_ITEMS ? TVF_ITEMS : id == TM_D_KEYS ? TVF_KEYS : TVF_VALUES;
    if ((rc = tl_new(c, d->n, fl, out)))
        return rc;
    for (size_t i = 0; i < d->n && !rc; i++) {
        if (id == TM_D_KEYS) {
            rc = tl_push(c, out, tv_ref(d->k[i]));
        } else if (id == TM_D_VALUES) {
            rc = tl_push(c, out, tv_ref(d->v[i]));
        } else {
            tval pair;
            if ((rc = tl_new(c, 2, TVF_TUPLE, &pair)))
                break;
            if ((rc = tl_push(c, &pair, tv_ref(d->k[i]))) || (rc = tl_push(c, &pair, tv_ref(d->v[i]))))
                tv_drop(c, &pair);
            else
                rc = tl_push(c, out, pair);
        }
    }
    if (rc)
        tv_drop(c, out);
    return rc;
}

static int m_list(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    const tlist *l = tv_l(self);
    int rc;
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no keyword arguments", method_names[id]);
    if ((rc = tc_steps(c, l->n)))
        return rc;
    if (id == TM_L_COPY) {
        if (a->npos)
            return tc_fail(c, NULL, EM_EINVAL, "copy() takes no arguments");
        if ((rc = tl_new(c, l->n, 0, out)))
            return rc;
        for (size_t i = 0; i < l->n && !rc; i++)
            rc = tl_push(c, out, tv_ref(l->v[i]));
        if (rc)
            tv_drop(c, out);
        return rc;
    }
    if (a->npos < 1 || (id == TM_L_COUNT && a->npos > 1) || a->npos > 3)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes %s argument", method_names[id],
                       id == TM_L_COUNT ? "exactly one" : "1 to 3");
    int64_t n = (int64_t)l->n, st = 0, en = n, count = 0;
    if (a->npos > 1 && (a->pos[1].t == TV_INT || a->pos[1].t == TV_BOOL))
        st = a->pos[1].u.i < 0 ? a->pos[1].u.i + n : a->pos[1].u.i;
    if (a->npos > 2 && (a->pos[2].t == TV_INT || a->pos[2].t == TV_BOOL))
        en = a->pos[2].u.i < 0 ? a->pos[2].u.i + n : a->pos[2].u.i;
    if (st < 0)
        st = 0;
    if (en > n)
        en = n;
    for (int64_t i = st; i < en; i++) {
        int eq;
        if ((rc = tv_eq(c, &l->v[i], &a->pos[0], &eq)))
            return rc;
        if (eq && id == TM_L_INDEX) {
            *out = tv_int(i);
            return 0;
        }
        count += eq;
    }
    if (id == TM_L_INDEX) {
        tbuf b = { 0 };
        tv_write_repr(c, &b, &a->pos[0]);
        rc = tc_fail(c, NULL, EM_EINVAL, "%.200s is not in list", b.p ? b.p : "value");
        tb_free(c, &b);
        return rc;
    }
    *out = tv_int(count);
    return 0;
}

int tm_call_method(tctx *c, const tval *self, int id, const targs *a, tval *out)
{
    int rc, r;
    if (id >= TM_D_GET && id <= TM_D_COPY)
        return m_dict(c, self, id, a, out);
    if (id >= TM_L_COUNT && id <= TM_L_COPY)
        return m_list(c, self, id, a, out);
    const tstr *s = tv_s(self);
    uint8_t safe = self->fl & TVF_SAFE;
    switch (id) {
    case TM_S_SPLIT: return m_split(c, self, a, 0, out);
    case TM_S_RSPLIT: return m_split(c, self, a, 1, out);
    case TM_S_STARTSWITH:
    case TM_S_ENDSWITH:
        if ((rc = m_affix(c, self, a, id == TM_S_ENDSWITH, &r)))
            return rc;
        *out = tv_bool(r);
        return 0;
    case TM_S_FIND:
    case TM_S_RFIND:
    case TM_S_INDEX:
    case TM_S_RINDEX:
    case TM_S_COUNT: return m_find(c, self, a, id, out);
    case TM_S_REPLACE: return m_replace(c, self, a, out);
    case TM_S_JOIN: return m_join(c, self, a, out);
    case TM_S_CENTER:
    case TM_S_LJUST:
    case TM_S_RJUST:
    case TM_S_ZFILL: return m_pad(c, self, a, id, out);
    case TM_S_PARTITION:
    case TM_S_RPARTITION: return m_partition(c, self, a, id == TM_S_RPARTITION, out);
    case TM_S_FORMAT: return m_format(c, self, a, out);
    case TM_S_STRIP:
    case TM_S_LSTRIP:
    case TM_S_RSTRIP: {
        static const char *const names[] = { "chars" };
        tval p[1];
        if ((rc = targs_bind(c, method_names[id], names, 1, a, p)))
            return rc;
        const char *chars = NULL;
        size_t nch = 0;
        if (p[0].t == TV_STR) {
            chars = tv_s(&p[0])->s;
            nch = tv_s(&p[0])->len;
        } else if (p[0].t != TV_ABSENT && p[0].t != TV_NONE) {
            return tc_fail(c, NULL, EM_EINVAL, "%s arg must be None or str", method_names[id]);
        }
        size_t st, en;
        tu_strip(s->s, s->len, chars, nch, id == TM_S_STRIP ? 3 : id == TM_S_LSTRIP ? 1 : 2, &st, &en);
        return make_str(c, s->s + st, en - st, safe, out);
    }
    case TM_S_REMOVEPREFIX:
    case TM_S_REMOVESUFFIX: {
        if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
            return tc_fail(c, NULL, EM_EINVAL, "%s() takes exactly one str argument", method_names[id]);
        const tstr *x = tv_s(&a->pos[0]);
        size_t st = 0, en = s->len;
        if (x->len <= s->len) {
            if (id == TM_S_REMOVEPREFIX && !memcmp(s->s, x->s, x->len))
                st = x->len;
            else if (id == TM_S_REMOVESUFFIX && x->len && !memcmp(s->s + s->len - x->len, x->s, x->len))
                en = s->len - x->len;
        }
        return make_str(c, s->s + st, en - st, safe, out);
    }
    case TM_S_SPLITLINES: {
        static const char *const names[] = { "keepends" };
        tval p[1];
        if ((rc = targs_bind(c, "splitlines", names, 1, a, p)))
            return rc;
        if (p[0].t != TV_ABSENT && tv_truthy(&p[0]))
            return tc_fail(c, NULL, EM_EUNSUPPORTED, "splitlines(keepends=True) is not supported");
        return tu_splitlines(c, s->s, s->len, out);
    }
    default:
        break;
    }
    if (a->npos || a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "%s() takes no arguments", tm_method_name(id));
    int how = -1;
    switch (id) {
    case TM_S_UPPER: how = TCASE_UPPER; break;
    case TM_S_LOWER:
    case TM_S_CASEFOLD: how = TCASE_LOWER; break;
    case TM_S_CAPITALIZE: how = TCASE_CAPITALIZE; break;
    case TM_S_TITLE: how = TCASE_TITLE; break;
    case TM_S_SWAPCASE: how = TCASE_SWAP; break;
    default:
        *out = tv_bool(m_is(s, id));
        return 0;
    }
    tbuf b = { 0 };
    if ((rc = tu_case(c, &b, s->s, s->len, how)) || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = safe;
    return 0;
}

/* ------------------------------------------------- printf-style % */

int tu_percent_format(tctx *c, const tval *fmt, const tval *args, tval *out)
{
    const tstr *f = tv_s(fmt);
    const tval *argv = args;
    size_t argc = 1, next = 0;
    const tdict *map = NULL;
    int rc = 0;
    if (args->t == TV_LIST && (args->fl & TVF_TUPLE)) {
        argv = tv_l(args)->v;
        argc = tv_l(args)->n;
    } else if (args->t == TV_DICT) {
        map = tv_d(args);
    }
    /* Python counts anything with __getitem__ but a tuple or str as a mapping
     * here (lists, Undefined): no "not all arguments converted" for them */
    int mapping = map != NULL || args->t == TV_UNDEF || (args->t == TV_LIST && !(args->fl & TVF_TUPLE));
    tbuf b = { 0 };
    for (size_t i = 0; i < f->len && !rc;) {
        const char *pc = memchr(f->s + i, '%', f->len - i);
        size_t stop = pc ? (size_t)(pc - f->s) : f->len;
        if ((rc = tb_put(c, &b, f->s + i, stop - i)) || !pc)
            break;
        i = stop + 1;
        const tval *v = NULL;
        tval keyed = tv_undef();
        if (i < f->len && f->s[i] == '(') {
            size_t e = i + 1, depth = 1;
            while (e < f->len && depth) {
                depth += f->s[e] == '(' ? 1 : f->s[e] == ')' ? -1 : 0;
                if (depth)
                    e++;
            }
            if (args->t == TV_UNDEF) {
                rc = te_undef_error(c, args);
                break;
            }
            if (!map || e >= f->len) {
                rc = tc_fail(c, NULL, EM_EINVAL, map ? "incomplete format key" : "format requires a mapping");
                break;
            }
            long at;
            td_get_str(map, f->s + i + 1, e - i - 1, &at);
            if (at < 0) {
                rc = tc_fail(c, NULL, EM_EINVAL, "KeyError: '%.*s'", (int)(e - i - 1), f->s + i + 1);
                break;
            }
            keyed = map->v[at];
            v = &keyed;
            i = e + 1;
        }
        char flags[8] = { 0 };
        size_t nf = 0;
        while (i < f->len && strchr("-+ #0", f->s[i]) && nf < 6)
            flags[nf++] = f->s[i++];
        int64_t width = -1, prec = -1;
        if (i < f->len && f->s[i] == '*') {
            if (next >= argc || (argv[next].t != TV_INT && argv[next].t != TV_BOOL)) {
                rc = tc_fail(c, NULL, EM_EINVAL, "* wants int");
                break;
            }
            width = argv[next++].u.i;
            i++;
        } else {
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9')
                width = (width < 0 ? 0 : width) * 10 + (f->s[i++] - '0');
        }
        if (i < f->len && f->s[i] == '.') {
            i++;
            prec = 0;
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && prec < 10000)
                prec = prec * 10 + (f->s[i++] - '0');
        }
        while (i < f->len && strchr("hlL", f->s[i]))
            i++;
        if (i >= f->len) {
            rc = tc_fail(c, NULL, EM_EINVAL, "incomplete format");
            break;
        }
        char type = f->s[i++];
        if (type == '%') {
            rc = tb_putc(c, &b, '%');
            continue;
        }
        if (!v) {
            if (mapping) {
                v = args;
            } else {
                if (next >= argc) {
                    rc = tc_fail(c, NULL, EM_EINVAL, "not enough arguments for format string");
                    break;
                }
                v = &argv[next++];
            }
        }
        if (width > (int64_t)TL_STRING) {
            rc = tc_fail(c, NULL, EM_ERANGE, "format width too large");
            break;
        }
        int left = strchr(flags, '-') != NULL, zero = strchr(flags, '0') != NULL && !left;
        char cfmt[32], tmp[512];
        if (type == 's' || type == 'r' || type == 'a') {
            tbuf sb = { 0 };
            rc = type == 's' ? tv_write_str(c, &sb, v) : tv_write_repr(c, &sb, v);
            if (!rc) {
                const char *sp = sb.p ? sb.p : "";
                size_t len = sb.n, nch = 0;
                for (size_t q = 0; q < len; q++)
                    nch += ((unsigned char)sp[q] & 0xC0) != 0x80;
                if (prec >= 0 && (size_t)prec < nch) {
                    size_t q = 0, k = 0;
                    while (q < len && k < (size_t)prec) {
                        q++;
                        while (q < len && ((unsigned char)sp[q] & 0xC0) == 0x80)
                            q++;
                        k++;
                    }
                    len = q;
                    nch = (size_t)prec;
                }
                if (!rc && (fmt->fl & TVF_SAFE) && !(v->t == TV_STR && (v->fl & TVF_SAFE))) {
                    /* Markup % x escapes what x prints as */
                    tbuf eb = { 0 };
                    if (!(rc = tf_escape(c, &eb, sp, len))) {
                        tb_free(c, &sb);
                        sb = eb;
                        sp = sb.p ? sb.p : "";
                        len = sb.n;
                        nch = 0;
                        for (size_t q = 0; q < len; q++)
                            nch += ((unsigned char)sp[q] & 0xC0) != 0x80;
                    } else {
                        tb_free(c, &eb);
                    }
                }
                if (!rc)
                    rc = fmt_pad(c, &b, sp, len, nch, left ? '<' : '>', " ", 1, width);
            }
            tb_free(c, &sb);
            continue;
        }
        if (v->t == TV_UNDEF) {
            rc = te_undef_error(c, v);
            break;
        }
        int is_num = v->t == TV_INT || v->t == TV_BOOL || v->t == TV_FLOAT;
        snprintf(cfmt, sizeof cfmt, "%%%s%s%s*.*", left ? "-" : "", strchr(flags, '+') ? "+" :
                 strchr(flags, ' ') ? " " : "", strchr(flags, '#') ? "#" : "");
        size_t cl = strlen(cfmt);
        if (zero)
            memmove(cfmt + 2, cfmt + 1, cl), cfmt[1] = '0', cl++;
        int w = (int)(width < 0 ? 0 : width), pr = (int)(prec < 0 ? -1 : prec > 300 ? 300 : prec);
        if (strchr("diu", type)) {
            if (!is_num) {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%%c format: a real number is required, not %s", type,
                             tv_type_name(v));
                break;
            }
            long long x = v->t == TV_FLOAT ? (long long)v->u.f : (long long)v->u.i;
            snprintf(cfmt + cl, sizeof cfmt - cl, "lld");
            snprintf(tmp, sizeof tmp, cfmt, w, pr, x);
        } else if (strchr("xXo", type)) {
            if (v->t != TV_INT && v->t != TV_BOOL) {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%%c format: an integer is required, not %s", type,
                             tv_type_name(v));
                break;
            }
            long long x = (long long)v->u.i;
            unsigned long long mag = x < 0 ? 0 - (unsigned long long)x : (unsigned long long)x;
            char body[80];
            snprintf(body, sizeof body, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", mag);
            char pre[4] = "";
            if (strchr(flags, '#'))
                snprintf(pre, sizeof pre, "0%c", type == 'o' ? 'o' : type);
            snprintf(tmp, sizeof tmp, "%s%s%s", x < 0 ? "-" : strchr(flags, '+') ? "+" : "", pre, body);
            rc = fmt_pad(c, &b, tmp, strlen(tmp), strlen(tmp), left ? '<' : '>', zero ? "0" : " ", 1, width);
            continue;
        } else if (strchr("eEfFgG", type)) {
            if (!is_num) {
                rc = tc_fail(c, NULL, EM_EINVAL, "must be real number, not %s", tv_type_name(v));
                break;
            }
            double x = v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
            snprintf(cfmt + cl, sizeof cfmt - cl, "%c", type);
            snprintf(tmp, sizeof tmp, cfmt, w, pr < 0 ? 6 : pr, x);
        } else if (type == 'c') {
            char e[5] = { 0 };
            if (v->t == TV_STR && tv_s(v)->nchars == 1)
                snprintf(e, sizeof e, "%s", tv_s(v)->s);
            else if (v->t == TV_INT && v->u.i >= 0 && v->u.i <= 0x10FFFF && !(v->u.i >= 0xD800 && v->u.i <= 0xDFFF))
                tu_encode((uint32_t)v->u.i, e);
            else {
                rc = tc_fail(c, NULL, EM_EINVAL, "%%c requires int or char");
                break;
            }
            rc = fmt_pad(c, &b, e, strlen(e), 1, left ? '<' : '>', " ", 1, width);
            continue;
        } else {
            rc = tc_fail(c, NULL, EM_EINVAL, "unsupported format character '%c'", type);
            break;
        }
        rc = tb_put(c, &b, tmp, strlen(tmp));
    }
    if (!rc && !mapping && next < argc)
        rc = tc_fail(c, NULL, EM_EINVAL, "not all arguments converted during string formatting");
    if (rc || (rc = ts_from_buf(c, &b, out))) {
        tb_free(c, &b);
        return rc;
    }
    out->fl = fmt->fl & TVF_SAFE;
    return 0;
}

/* ------------------------------------------------------------ globals */

static const char *const global_names[TF_N] = { "", "range", "namespace", "dict", "raise_exception",
                                                "strftime_now", "" };

int tg_global_id(const char *name)
{
    for (int i = 1; i < TF_N; i++)
        if (global_names[i][0] && !strcmp(global_names[i], name))
            return i;
    return 0;
}

const char *tg_global_name(int id)
{
    return id > 0 && id < TF_N ? global_names[id] : "function";
}

static int g_range(tctx *c, const targs *a, tval *out)
{
    if (a->nkw)
        return tc_fail(c, NULL, EM_EINVAL, "range() takes no keyword arguments");
    if (a->npos < 1 || a->npos > 3)
        return tc_fail(c, NULL, EM_EINVAL, "range expected 1 to 3 arguments, got %zu", a->npos);
    int64_t v[3] = { 0, 0, 1 };
    for (size_t i = 0; i < a->npos; i++) {
        if (a->pos[i].t != TV_INT && a->pos[i].t != TV_BOOL)
            return a->pos[i].t == TV_UNDEF ? te_undef_error(c, &a->pos[i])
                                           : tc_fail(c, NULL, EM_EINVAL, "'%s' object cannot be interpreted as an integer",
                                                     tv_type_name(&a->pos[i]));
    }
    if (a->npos == 1) {
        v[1] = a->pos[0].u.i;
    } else {
        v[0] = a->pos[0].u.i;
        v[1] = a->pos[1].u.i;
        if (a->npos == 3)
            v[2] = a->pos[2].u.i;
    }
    if (v[2] == 0)
        return tc_fail(c, NULL, EM_EINVAL, "range() arg 3 must not be zero");
    double count = 0;
    if (v[2] > 0 && v[1] > v[0])
        count = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
    else if (v[2] < 0 && v[1] < v[0])
        count = ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
    if (count > EM_TMPL_MAX_RANGE)
        return tc_fail(c, NULL, EM_ERANGE, "Range too big. The sandbox blocks ranges larger than "
                       "MAX_RANGE (%d).", EM_TMPL_MAX_RANGE);
    int rc = tc_steps(c, (uint64_t)count);
    if (rc || (rc = tl_new(c, (size_t)count, 0, out)))
        return rc;
    for (int64_t i = 0, x = v[0]; i < (int64_t)count && !rc; i++, x += v[2])
        rc = tl_push(c, out, tv_int(x));
    if (rc)
        tv_drop(c, out);
    return rc;
}

/* dict(*args, **kwargs) for dict() and namespace() */
static int g_dict(tctx *c, const targs *a, int ns, tval *out)
{
    int rc;
    if (a->npos > 1)
        return tc_fail(c, NULL, EM_EINVAL, "%s expected at most 1 argument, got %zu", ns ? "namespace" : "dict",
                       a->npos);
    if ((rc = td_new(c, ns, out)))
        return rc;
    if (a->npos) {
        const tval *src = &a->pos[0];
        if (src->t == TV_DICT) {
            for (size_t i = 0; i < tv_d(src)->n && !rc; i++)
                rc = td_set(c, out, tv_ref(tv_d(src)->k[i]), tv_ref(tv_d(src)->v[i]));
        } else {
            tval items;
            if (!(rc = te_iterate(c, src, &items))) {
                for (size_t i = 0; i < tv_l(&items)->n && !rc; i++) {
                    tval pair;
                    if ((rc = te_iterate(c, &tv_l(&items)->v[i], &pair)))
                        break;
                    if (tv_l(&pair)->n != 2)
                        rc = tc_fail(c, NULL, EM_EINVAL, "dictionary update sequence element #%zu has length %zu; "
                                     "2 is required", i, tv_l(&pair)->n);
                    else
                        rc = td_set(c, out, tv_ref(tv_l(&pair)->v[0]), tv_ref(tv_l(&pair)->v[1]));
                    tv_drop(c, &pair);
                }
                tv_drop(c, &items);
            }
        }
    }
    for (size_t i = 0; i < a->nkw && !rc; i++) {
        tval k;
        if (!(rc = ts_cstr(c, a->kname[i], &k)))
            rc = td_set(c, out, k, tv_ref(a->kval[i]));
    }
    if (!rc && ns)
        rc = tc_register_ns(c, out);
    if (rc)
        tv_drop(c, out);
    return rc;
}

static int g_strftime(tctx *c, const targs *a, tval *out)
{
    if (a->npos != 1 || a->nkw || a->pos[0].t != TV_STR)
        return tc_fail(c, NULL, EM_EINVAL, "strftime_now() takes one string argument");
    const tstr *f = tv_s(&a->pos[0]);
    if (f->len > 4096)
        return tc_fail(c, NULL, EM_ERANGE, "strftime_now: format longer than 4096 bytes");
    /* datetime.strftime: %f is microseconds (always 0 here), and a NUL ends C's format */
    tbuf fb = { 0 };
    int rc = 0;
    for (size_t i = 0; i < f->len && !rc; i++) {
        if (f->s[i] == '%' && i + 1 < f->len && f->s[i + 1] == 'f') {
            rc = tb_put(c, &fb, "000000", 6);
            i++;
        } else if (f->s[i] == '%' && i + 1 < f->len && f->s[i + 1] == '%') {
            rc = tb_put(c, &fb, "%%", 2);
            i++;
        } else if (f->s[i] == '\0') {
            rc = tc_fail(c, NULL, EM_EINVAL, "embedded null character");
        } else {
            rc = tb_putc(c, &fb, f->s[i]);
        }
    }
    if (rc) {
        tb_free(c, &fb);
        return rc;
    }
    if (!fb.n) {
        tb_free(c, &fb);
        return ts_new(c, "", 0, out);
    }
    locale_t loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    if (!loc) {
        tb_free(c, &fb);
        return tc_fail(c, NULL, EM_ENOMEM, "strftime_now: no C locale");
    }
    size_t cap = 256;
    char *buf = NULL;
    size_t n = 0;
    for (; cap <= ((size_t)1 << 20); cap *= 4) {
        char *nb = realloc(buf, cap);
        if (!nb) {
            rc = tc_fail(c, NULL, EM_ENOMEM, "out of memory");
            break;
        }
        buf = nb;
        n = strftime_l(buf, cap, fb.p, &c->now, loc);
        if (n)
            break;
    }
    freelocale(loc);
    tb_free(c, &fb);
    if (!rc)
        rc = ts_new(c, buf, n, out);
    free(buf);
    return rc;
}

int tg_call_global(tctx *c, int id, const targs *a, tval *out)
{
    switch (id) {
    case TF_RANGE: return g_range(c, a, out);
    case TF_NAMESPACE: return g_dict(c, a, 1, out);
    case TF_DICT: return g_dict(c, a, 0, out);
    case TF_STRFTIME: return g_strftime(c, a, out);
    case TF_RAISE: {
        if (a->npos < 1) {
            tc_fail(c, NULL, EM_EINVAL, "raise_exception() called without a message");
            return EM_EINVAL;
        }
        tbuf b = { 0 };
        int rc = tv_write_str(c, &b, &a->pos[0]);
        if (rc) {
            tb_free(c, &b);
            return rc;
        }
        rc = tc_fail(c, NULL, EM_EINVAL, "%s", b.p ? b.p : "");
        tb_free(c, &b);
        return rc;
    }
    default:
        return tc_fail(c, NULL, EM_EINVAL, "unknown function");
    }
}
