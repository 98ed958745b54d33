/* json_schema.c — JSON Schema to GBNF (json_schema.h; the mapping is in
 * docs/grammar.md). Each schema becomes one rule named rN (a $ref target
 * keeps one rule however often it is referenced, which is what lets a schema
 * recurse); the JSON building blocks (ws, strings, numbers, any value) are
 * shared rules written once at the end. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"
#include "core/grammar/json_schema.h"
#include "core/grow.h"

#define MAX_DEPTH  100          /* nesting of inline schemas */
#define INT_CAP    9999999999999999LL   /* 16 digits: the widest integer generated */
#define NAME_CAP   32

typedef struct {
    const json_t *node;
    char          name[NAME_CAP];
} ref_entry;

typedef struct {
    const json_t *root;
    eg_sb         out;
    em_err       *err;
    ref_entry    *refs;
    size_t        n_refs, cap_refs;
    unsigned      counter, depth;
    int           compact;
} js;

static int fail(js *j, int code, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(js *j, int code, const char *path, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(path);   /* a deep pointer: its end says most */
    if (n > 160)
        return em_err_set(j->err, code, "json_schema: ...%s: %s", path + n - 160, msg);
    return em_err_set(j->err, code, "json_schema: %s: %s", path, msg);
}

static void new_name(js *j, char *name)
{
    snprintf(name, NAME_CAP, "r%u", ++j->counter);
}

/* ---- literals ------------------------------------------------------------ */

/* value's compact JSON text as one GBNF literal. */
static int put_json_literal(js *j, eg_sb *b, const json_t *value, const char *path)
{
    char *s = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return fail(j, EM_ENOMEM, path, "out of memory");
    eg_sb_gbnf_literal(b, s, strlen(s));
    free(s);
    return 0;
}

/* ---- integer ranges ------------------------------------------------------ */

static void put_digits_class(eg_sb *b, int lo, int hi)
{
    if (lo == hi)
        eg_sb_printf(b, "\"%d\"", lo);
    else if (lo == 0 && hi == 9)
        eg_sb_puts(b, "[0-9]");
    else
        eg_sb_printf(b, "[%d-%d]", lo, hi);
}

static int all_of(const char *s, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (s[i] != c)
            return 0;
    return 1;
}

/* Decimal strings of len digits from a to b (a <= b, same length; leading
 * zeros allowed here: the caller fixes the first digit). */
static void same_len(eg_sb *b, const char *a, const char *z, int len)
{
    int i = 0;
    while (i < len && a[i] == z[i])
        i++;
    if (i > 0) {
        eg_sb_put(b, "\"", 1);
        eg_sb_put(b, a, (size_t)i);
        eg_sb_put(b, "\"", 1);
    }
    if (i == len)
        return;
    if (i > 0)
        eg_sb_put(b, " ", 1);
    int rest = len - i - 1, da = a[i] - '0', dz = z[i] - '0';
    if (rest == 0) {
        put_digits_class(b, da, dz);
        return;
    }
    int low_full = all_of(a + i + 1, rest, '0'), high_full = all_of(z + i + 1, rest, '9');
    int mid_lo = low_full ? da : da + 1, mid_hi = high_full ? dz : dz - 1, alts = 0;
    eg_sb_put(b, "(", 1);
    if (!low_full) {
        char nines[24];
        memset(nines, '9', (size_t)rest);
        eg_sb_printf(b, "\"%d\" ", da);
        same_len(b, a + i + 1, nines, rest);
        alts++;
    }
    if (mid_lo <= mid_hi) {
        if (alts++)
            eg_sb_puts(b, " | ");
        put_digits_class(b, mid_lo, mid_hi);
        eg_sb_printf(b, " [0-9]{%d}", rest);
    }
    if (!high_full) {
        char zeros[24];
        memset(zeros, '0', (size_t)rest);
        if (alts++)
            eg_sb_puts(b, " | ");
        eg_sb_printf(b, "\"%d\" ", dz);
        same_len(b, zeros, z + i + 1, rest);
    }
    eg_sb_put(b, ")", 1);
}

/* Decimal integers (no leading zeros) from lo to hi, 0 <= lo <= hi <= INT_CAP. */
static void uint_range(eg_sb *b, long long lo, long long hi)
{
    long long p = 1;
    int alts = 0;
    eg_sb_put(b, "(", 1);
    for (int len = 1; len <= 16; len++, p *= 10) {
        long long first = len == 1 ? 0 : p, last = p * 10 - 1;
        long long a = lo > first ? lo : first, z = hi < last ? hi : last;
        if (a > z)
            continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sz, sizeof sz, "%lld", z);
        if (alts++)
            eg_sb_puts(b, " | ");
        same_len(b, sa, sz, len);
    }
    eg_sb_put(b, ")", 1);
}

/* ---- numbers with bounds ------------------------------------------------- */

typedef struct {
    int       has_lo, has_hi, lo_open, hi_open;
    double    lo, hi;
} bounds;

/* exclusiveMinimum (dir 1) or exclusiveMaximum (dir -1): a number (the
 * tighter of it and the inclusive bound wins) or draft 4's boolean, which
 * makes the inclusive bound exclusive. */
static int read_exclusive(js *j, const json_t *s, const char *key, const char *path, int dir, int *has,
                          double *bound, int *open)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    if (json_is_boolean(v)) {
        *open = json_is_true(v) && *has;
        return 0;
    }
    if (!json_is_number(v))
        return fail(j, EM_EINVAL, path, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!*has || (dir > 0 ? x >= *bound : x <= *bound)) {
        *has = 1;
        *bound = x;
        *open = 1;
    }
    return 0;
}

static int read_bounds(js *j, const json_t *s, const char *path, bounds *bd)
{
    memset(bd, 0, sizeof *bd);
    const json_t *v;
    int rc;
    if ((v = json_object_get(s, "minimum"))) {
        if (!json_is_number(v))
            return fail(j, EM_EINVAL, path, "'minimum' must be a number");
        bd->has_lo = 1;
        bd->lo = json_number_value(v);
    }
    if ((v = json_object_get(s, "maximum"))) {
        if (!json_is_number(v))
            return fail(j, EM_EINVAL, path, "'maximum' must be a number");
        bd->has_hi = 1;
        bd->hi = json_number_value(v);
    }
    if ((rc = read_exclusive(j, s, "exclusiveMinimum", path, 1, &bd->has_lo, &bd->lo, &bd->lo_open)) ||
        (rc = read_exclusive(j, s, "exclusiveMaximum", path, -1, &bd->has_hi, &bd->hi, &bd->hi_open)))
        return rc;
    if ((bd->has_lo && fabs(bd->lo) > (double)INT_CAP) || (bd->has_hi && fabs(bd->hi) > (double)INT_CAP))
        return fail(j, EM_EUNSUPPORTED, path, "bounds beyond +-%lld are not supported", INT_CAP);
    return 0;
}

/* The bounds of s into bd; without any, the plain rule is written and
 * *done set. */
static int bounds_or_plain(js *j, eg_sb *b, const json_t *s, const char *path, const char *plain, bounds *bd,
                           int *done)
{
    int rc = read_bounds(j, s, path, bd);
    *done = !rc && !bd->has_lo && !bd->has_hi;
    if (*done)
        eg_sb_puts(b, plain);
    return rc;
}

static int put_integer(js *j, eg_sb *b, const json_t *s, const char *path)
{
    bounds bd;
    int done, rc = bounds_or_plain(j, b, s, path, "integer", &bd, &done);
    if (rc || done)
        return rc;
    long long lo = -INT_CAP, hi = INT_CAP;
    if (bd.has_lo)
        lo = bd.lo_open ? (long long)floor(bd.lo) + 1 : (long long)ceil(bd.lo);
    if (bd.has_hi)
        hi = bd.hi_open ? (long long)ceil(bd.hi) - 1 : (long long)floor(bd.hi);
    if (lo < -INT_CAP)
        lo = -INT_CAP;
    if (hi > INT_CAP)
        hi = INT_CAP;
    if (lo > hi)
        return fail(j, EM_EINVAL, path, "no integer lies within the bounds");
    int alts = 0;
    eg_sb_put(b, "(", 1);
    if (lo < 0) {
        eg_sb_puts(b, "\"-\" ");
        uint_range(b, hi < 0 ? -hi : 1, -lo);
        alts++;
    }
    if (hi >= 0) {
        if (alts)
            eg_sb_puts(b, " | ");
        uint_range(b, lo > 0 ? lo : 0, hi);
    }
    eg_sb_put(b, ")", 1);
    return 0;
}

#define FRAC_ANY     "(\".\" [0-9]{1,16})?"
#define FRAC_ZERO    "(\".\" \"0\"{1,16})?"
#define FRAC_NONZERO "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}"

/* A magnitude t (integer part and fraction, no sign) in [a, z] with open
 * ends as said; a <= z integers. Returns the number of alternatives. */
static int magnitude(eg_sb *b, long long a, int a_open, long long z, int z_open, int alts)
{
    if (a == z) {
        if (a_open || z_open)
            return alts;
        eg_sb_printf(b, "%s\"%lld\" " FRAC_ZERO, alts ? " | " : "", a);
        return alts + 1;
    }
    eg_sb_printf(b, "%s\"%lld\" %s", alts ? " | " : "", a, a_open ? FRAC_NONZERO : FRAC_ANY);
    alts++;
    if (a + 1 <= z - 1) {
        eg_sb_puts(b, " | ");
        uint_range(b, a + 1, z - 1);
        eg_sb_puts(b, " " FRAC_ANY);
        alts++;
    }
    if (!z_open) {
        eg_sb_printf(b, " | \"%lld\" " FRAC_ZERO, z);
        alts++;
    }
    return alts;
}

static int put_number(js *j, eg_sb *b, const json_t *s, const char *path)
{
    bounds bd;
    int done, rc = bounds_or_plain(j, b, s, path, "number", &bd, &done);
    if (rc || done)
        return rc;
    if ((bd.has_lo && bd.lo != floor(bd.lo)) || (bd.has_hi && bd.hi != floor(bd.hi)))
        return fail(j, EM_EUNSUPPORTED, path,
                    "number bounds must be whole numbers (a fractional minimum or maximum is not supported)");
    long long lo = bd.has_lo ? (long long)bd.lo : -INT_CAP, hi = bd.has_hi ? (long long)bd.hi : INT_CAP;
    int lo_open = bd.has_lo && bd.lo_open, hi_open = bd.has_hi && bd.hi_open;
    if (lo > hi || (lo == hi && (lo_open || hi_open)))
        return fail(j, EM_EINVAL, path, "no number lies within the bounds");
    eg_sb tmp = { 0 };
    int alts = 0;
    if (hi > 0 || (hi == 0 && !hi_open)) {
        /* x >= 0 */
        long long a = lo > 0 ? lo : 0;
        int a_open = lo >= 0 && lo_open;
        int n = magnitude(&tmp, a, a_open, hi, hi_open, 0);
        if (n) {
            eg_sb_puts(b, alts ? " | (" : "((");
            eg_sb_put(b, tmp.s, tmp.len);
            eg_sb_put(b, ")", 1);
            alts++;
        }
    }
    tmp.len = 0;
    if (lo < 0) {
        /* x = -t, t in [max(-hi, 0), -lo] */
        long long a = hi <= 0 ? -hi : 0;
        int a_open = hi <= 0 && hi_open;
        int n = magnitude(&tmp, a, a_open, -lo, lo_open, 0);
        if (n) {
            eg_sb_puts(b, alts ? " | \"-\" (" : "(\"-\" (");
            eg_sb_put(b, tmp.s, tmp.len);
            eg_sb_put(b, ")", 1);
            alts++;
        }
    }
    free(tmp.s);
    eg_sb_put(b, ")", 1);
    if (!alts)
        return fail(j, EM_EINVAL, path, "no number lies within the bounds");
    return 0;
}

/* ---- strings ------------------------------------------------------------- */

static int get_count(js *j, const json_t *s, const char *key, const char *path, long long *v, int *has)
{
    const json_t *x = json_object_get(s, key);
    *has = x != NULL;
    if (!x)
        return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return fail(j, EM_EINVAL, path, "'%s' must be a non-negative integer", key);
    *v = json_integer_value(x);
    if (*v > EM_GRAMMAR_MAX_REPEAT)
        return fail(j, EM_EUNSUPPORTED, path, "'%s' %lld exceeds the supported %u", key, *v,
                    EM_GRAMMAR_MAX_REPEAT);
    return 0;
}

static const struct { const char *name, *gbnf; } formats[] = {
    { "date", "date" },
    { "time", "time" },
    { "date-time", "date \"T\" time" },
    { "uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
              "[0-9a-fA-F]{12}" },
};

static int put_string(js *j, eg_sb *b, const json_t *s, const char *path, const char *self)
{
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long long mn = 0, mx = 0;
    int has_mn, has_mx, rc;
    if ((rc = get_count(j, s, "minLength", path, &mn, &has_mn)) ||
        (rc = get_count(j, s, "maxLength", path, &mx, &has_mx)))
        return rc;
    if ((pat != NULL) + (fmt != NULL) + (has_mn || has_mx) > 1)
        return fail(j, EM_EUNSUPPORTED, path,
                    "combining 'pattern', 'format' and 'minLength'/'maxLength' is not supported");
    if (pat) {
        if (!json_is_string(pat))
            return fail(j, EM_EINVAL, path, "'pattern' must be a string");
        char name[NAME_CAP + 8], what[600];
        snprintf(name, sizeof name, "%s-pat", self);
        snprintf(what, sizeof what, "json_schema: %s: pattern", path);
        if ((rc = eg_regex_emit(json_string_value(pat), json_string_length(pat), name, 1, what, &j->out,
                                j->err)))
            return rc;
        eg_sb_printf(b, "\"\\\"\" %s \"\\\"\"", name);
        return 0;
    }
    if (fmt) {
        if (!json_is_string(fmt))
            return fail(j, EM_EINVAL, path, "'format' must be a string");
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
            if (!strcmp(json_string_value(fmt), formats[i].name)) {
                eg_sb_printf(b, "\"\\\"\" %s \"\\\"\"", formats[i].gbnf);
                return 0;
            }
        return fail(j, EM_EUNSUPPORTED, path, "format '%.100s' is not supported (supported: date, time, "
                    "date-time, uuid)", json_string_value(fmt));
    }
    if (has_mn || has_mx) {
        if (has_mx && has_mn && mn > mx)
            return fail(j, EM_EINVAL, path, "minLength is above maxLength");
        if (has_mx)
            eg_sb_printf(b, "\"\\\"\" json-char{%lld,%lld} \"\\\"\"", has_mn ? mn : 0, mx);
        else
            eg_sb_printf(b, "\"\\\"\" json-char{%lld,} \"\\\"\"", mn);
        return 0;
    }
    eg_sb_puts(b, "string");
    return 0;
}

/* ---- schemas ------------------------------------------------------------- */

static int gen_named(js *j, const json_t *s, const char *path, const char *name);

/* A rule for s (a new one, or a $ref target's) into name. */
static int gen(js *j, const json_t *s, const char *path, char *name)
{
    new_name(j, name);
    return gen_named(j, s, path, name);
}

static const char *const ignored[] = { "title", "description", "examples", "default", "$schema", "$id",
                                       "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                       "definitions" };
static const char *const supported[] = { "type", "enum", "const", "properties", "required",
                                         "additionalProperties", "items", "minItems", "maxItems", "pattern",
                                         "minLength", "maxLength", "format", "minimum", "maximum",
                                         "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf",
                                         "$ref", "uniqueItems" };

static int in_list(const char *k, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i]))
            return 1;
    return 0;
}
#define IN(k, list) in_list(k, list, sizeof list / sizeof list[0])

/* Resolve a "#..." JSON pointer inside the document. */
static const json_t *resolve(const json_t *root, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const json_t *cur = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/')
            return NULL;
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~') {
                if (p[1] == '0')
                    c = '~';
                else if (p[1] == '1')
                    c = '/';
                else
                    return NULL;
                p++;
            }
            if (n + 1 >= sizeof tok)
                return NULL;
            tok[n++] = c;
        }
        tok[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long k = strtoul(tok, &end, 10);
            cur = *tok && !*end ? json_array_get(cur, k) : NULL;
        } else {
            return NULL;
        }
        if (!cur)
            return NULL;
    }
    return cur;
}

static int gen_ref(js *j, const json_t *s, const char *path, eg_sb *b)
{
    const json_t *r = json_object_get(s, "$ref");
    if (!json_is_string(r))
        return fail(j, EM_EINVAL, path, "'$ref' must be a string");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
        if (strcmp(k, "$ref") && !IN(k, ignored))
            return fail(j, EM_EUNSUPPORTED, path, "'$ref' beside '%.100s' is not supported", k);
    const json_t *target = resolve(j->root, json_string_value(r));
    if (!target)
        return fail(j, EM_EINVAL, path, "$ref '%.200s' does not resolve inside the document "
                    "(only '#...' pointers are supported)", json_string_value(r));
    for (size_t i = 0; i < j->n_refs; i++)
        if (j->refs[i].node == target) {
            eg_sb_puts(b, j->refs[i].name);
            return 0;
        }
    if (em_grow((void **)&j->refs, &j->cap_refs, j->n_refs, sizeof *j->refs, 8))
        return fail(j, EM_ENOMEM, path, "out of memory");
    ref_entry *e = &j->refs[j->n_refs++];
    e->node = target;
    new_name(j, e->name);
    char name[NAME_CAP];
    memcpy(name, e->name, NAME_CAP);
    eg_sb_puts(b, name);
    /* the target's own pointer names it in errors */
    return gen_named(j, target, json_string_value(r), name);
}

static int value_matches_type(const json_t *v, const char *t)
{
    if (!strcmp(t, "string"))  return json_is_string(v);
    if (!strcmp(t, "integer")) return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number"))  return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null"))    return json_is_null(v);
    if (!strcmp(t, "object"))  return json_is_object(v);
    if (!strcmp(t, "array"))   return json_is_array(v);
    return 0;
}

static int type_allows(const json_t *type, const json_t *v)
{
    if (!type)
        return 1;
    if (json_is_string(type))
        return value_matches_type(v, json_string_value(type));
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t)
        if (json_is_string(t) && value_matches_type(v, json_string_value(t)))
            return 1;
    return 0;
}

static int gen_enum(js *j, const json_t *s, const char *path, eg_sb *b)
{
    const json_t *c = json_object_get(s, "const"), *e = json_object_get(s, "enum"),
                 *type = json_object_get(s, "type");
    if (c && e)
        return fail(j, EM_EUNSUPPORTED, path, "'const' together with 'enum' is not supported");
    if (c)
        return put_json_literal(j, b, c, path);
    if (!json_is_array(e) || json_array_size(e) == 0)
        return fail(j, EM_EINVAL, path, "'enum' must be a non-empty array");
    size_t i, n = 0;
    const json_t *v;
    eg_sb_put(b, "(", 1);
    json_array_foreach(e, i, v) {
        if (!type_allows(type, v))
            continue;
        if (n++)
            eg_sb_puts(b, " | ");
        int rc = put_json_literal(j, b, v, path);
        if (rc)
            return rc;
    }
    eg_sb_put(b, ")", 1);
    if (!n)
        return fail(j, EM_EINVAL, path, "no value of 'enum' has the schema's type");
    return 0;
}

static int gen_array(js *j, const json_t *s, const char *path, eg_sb *b)
{
    const json_t *items = json_object_get(s, "items");
    long long mn = 0, mx = 0;
    int has_mn, has_mx, rc;
    if ((rc = get_count(j, s, "minItems", path, &mn, &has_mn)) ||
        (rc = get_count(j, s, "maxItems", path, &mx, &has_mx)))
        return rc;
    if (has_mn && has_mx && mn > mx)
        return fail(j, EM_EINVAL, path, "minItems is above maxItems");
    char item[NAME_CAP] = "value";
    if (items) {
        if (!json_is_object(items) && !json_is_boolean(items))
            return fail(j, EM_EUNSUPPORTED, path, "'items' as an array (tuples) is not supported");
        if (json_is_false(items)) {
            if (mn > 0)
                return fail(j, EM_EINVAL, path, "'items': false with minItems above 0 matches nothing");
            has_mx = 1;
            mx = 0;
        } else if (json_is_object(items)) {
            char sub[600];
            snprintf(sub, sizeof sub, "%s/items", path);
            if ((rc = gen(j, items, sub, item)))
                return rc;
        }
    }
    if (has_mx && mx == 0) {
        eg_sb_puts(b, "\"[\" ws \"]\"");
        return 0;
    }
    char more[64];
    if (has_mx)
        snprintf(more, sizeof more, "{%lld,%lld}", mn > 0 ? mn - 1 : 0, mx - 1);
    else
        snprintf(more, sizeof more, "{%lld,}", mn > 0 ? mn - 1 : 0);
    if (mn > 0)
        eg_sb_printf(b, "\"[\" ws %s ws (\",\" ws %s ws)%s \"]\"", item, item, more);
    else
        eg_sb_printf(b, "\"[\" ws (%s ws (\",\" ws %s ws)%s)? \"]\"", item, item, more);
    return 0;
}

typedef struct {
    char name[NAME_CAP];   /* the member rule: "key" ws ":" ws value ws */
    int  required;
} member;

static int gen_object(js *j, const json_t *s, const char *path, eg_sb *b, const char *self)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *add = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return fail(j, EM_EINVAL, path, "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail(j, EM_EINVAL, path, "'required' must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return fail(j, EM_EINVAL, path, "'additionalProperties' must be a boolean or a schema");
    /* extras: none when false, or absent beside `properties` (documented) */
    int extras = add ? !json_is_false(add) : props == NULL;
    char extra_val[NAME_CAP] = "value";
    int rc;
    if (json_is_object(add)) {
        char sub[600];
        snprintf(sub, sizeof sub, "%s/additionalProperties", path);
        if ((rc = gen(j, add, sub, extra_val)))
            return rc;
    }
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    member *m = calloc(n_props + n_req + 1, sizeof *m);
    if (!m)
        return fail(j, EM_ENOMEM, path, "out of memory");
    size_t n = 0, i;
    const char *key;
    const json_t *v;
    json_array_foreach(req, i, v)
        if (!json_is_string(v)) {
            free(m);
            return fail(j, EM_EINVAL, path, "'required' must hold strings");
        }
    /* the listed properties in schema order, then required names not listed */
    json_object_foreach((json_t *)props, key, v) {
        char sub[600], val[NAME_CAP];
        snprintf(sub, sizeof sub, "%s/properties/%s", path, key);
        if ((rc = gen(j, v, sub, val)))
            goto done;
        new_name(j, m[n].name);
        size_t k;
        const json_t *r;
        json_array_foreach(req, k, r)
            if (!strcmp(json_string_value(r), key))
                m[n].required = 1;
        json_t *ks = json_string(key);
        eg_sb_printf(&j->out, "%s ::= ", m[n].name);
        rc = ks ? put_json_literal(j, &j->out, ks, sub) : fail(j, EM_ENOMEM, path, "out of memory");
        json_decref(ks);
        if (rc)
            goto done;
        eg_sb_printf(&j->out, " ws \":\" ws %s ws\n", val);
        n++;
    }
    json_array_foreach(req, i, v) {
        const char *rk = json_string_value(v);
        if (props && json_object_get(props, rk))
            continue;
        if (!extras) {
            rc = fail(j, EM_EINVAL, path, "required property '%.100s' is not in 'properties' and "
                      "additionalProperties is false", rk);
            goto done;
        }
        new_name(j, m[n].name);
        m[n].required = 1;
        json_t *ks = json_string(rk);
        eg_sb_printf(&j->out, "%s ::= ", m[n].name);
        rc = ks ? put_json_literal(j, &j->out, ks, path) : fail(j, EM_ENOMEM, path, "out of memory");
        json_decref(ks);
        if (rc)
            goto done;
        eg_sb_puts(&j->out, " ws \":\" ws value ws\n");
        n++;
    }
    /* first-k: members k.. when none was written yet; after-k: when one was
     * (so a comma goes first). The extra members come last. */
    char extra[NAME_CAP * 2 + 64] = "";
    if (extras)
        snprintf(extra, sizeof extra, "string ws \":\" ws %s ws", extra_val);
    for (size_t k = n + 1; k-- > 0;) {
        eg_sb_printf(&j->out, "%s-a%zu ::= ", self, k);
        if (k == n)
            eg_sb_printf(&j->out, extras ? "(\",\" ws %s)*\n" : "\"\"\n", extra);
        else if (m[k].required)
            eg_sb_printf(&j->out, "\",\" ws %s %s-a%zu\n", m[k].name, self, k + 1);
        else
            eg_sb_printf(&j->out, "\",\" ws %s %s-a%zu | %s-a%zu\n", m[k].name, self, k + 1, self, k + 1);
        eg_sb_printf(&j->out, "%s-f%zu ::= ", self, k);
        if (k == n)
            eg_sb_printf(&j->out, extras ? "(%s (\",\" ws %s)*)?\n" : "\"\"\n", extra, extra);
        else if (m[k].required)
            eg_sb_printf(&j->out, "%s %s-a%zu\n", m[k].name, self, k + 1);
        else
            eg_sb_printf(&j->out, "%s %s-a%zu | %s-f%zu\n", m[k].name, self, k + 1, self, k + 1);
    }
    eg_sb_printf(b, "\"{\" ws %s-f0 \"}\"", self);
    rc = 0;
done:
    free(m);
    return rc;
}

static int gen_type(js *j, const json_t *s, const char *type, const char *path, eg_sb *b, const char *self)
{
    if (!strcmp(type, "string"))
        return put_string(j, b, s, path, self);
    if (!strcmp(type, "integer"))
        return put_integer(j, b, s, path);
    if (!strcmp(type, "number"))
        return put_number(j, b, s, path);
    if (!strcmp(type, "boolean")) {
        eg_sb_puts(b, "boolean");
        return 0;
    }
    if (!strcmp(type, "null")) {
        eg_sb_puts(b, "null");
        return 0;
    }
    if (!strcmp(type, "object"))
        return gen_object(j, s, path, b, self);
    if (!strcmp(type, "array"))
        return gen_array(j, s, path, b);
    return fail(j, EM_EINVAL, path, "unknown type '%.100s'", type);
}

/* The type a schema without "type" stands for, from its keywords; NULL: any. */
static const char *implied_type(const json_t *s)
{
    static const struct { const char *kw, *type; } kws[] = {
        { "properties", "object" }, { "required", "object" }, { "additionalProperties", "object" },
        { "items", "array" }, { "minItems", "array" }, { "maxItems", "array" },
        { "pattern", "string" }, { "minLength", "string" }, { "maxLength", "string" }, { "format", "string" },
        { "minimum", "number" }, { "maximum", "number" }, { "exclusiveMinimum", "number" },
        { "exclusiveMaximum", "number" },
    };
    for (size_t i = 0; i < sizeof kws / sizeof kws[0]; i++)
        if (json_object_get(s, kws[i].kw))
            return kws[i].type;
    return NULL;
}

static int gen_alts(js *j, const json_t *s, const char *kw, const char *path, eg_sb *b)
{
    const json_t *list = json_object_get(s, kw);
    if (!json_is_array(list) || json_array_size(list) == 0)
        return fail(j, EM_EINVAL, path, "'%s' must be a non-empty array", kw);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v)
        if (strcmp(k, kw) && !IN(k, ignored))
            return fail(j, EM_EUNSUPPORTED, path, "'%s' beside '%.100s' is not supported", kw, k);
    if (!strcmp(kw, "allOf") && json_array_size(list) > 1)
        return fail(j, EM_EUNSUPPORTED, path, "'allOf' with more than one schema is not supported");
    size_t i;
    eg_sb_put(b, "(", 1);
    json_array_foreach(list, i, v) {
        char sub[600], name[NAME_CAP];
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, kw, i);
        int rc = gen(j, v, sub, name);
        if (rc)
            return rc;
        eg_sb_printf(b, "%s%s", i ? " | " : "", name);
    }
    eg_sb_put(b, ")", 1);
    return 0;
}

static int gen_named(js *j, const json_t *s, const char *path, const char *name)
{
    if (++j->depth > MAX_DEPTH)
        return fail(j, EM_EUNSUPPORTED, path, "schemas nested deeper than %d", MAX_DEPTH);
    eg_sb body = { 0 };
    int rc = 0;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        eg_sb_puts(&body, "value");
        goto write;
    }
    if (json_is_false(s)) {
        rc = fail(j, EM_EUNSUPPORTED, path, "the schema false matches nothing");
        goto done;
    }
    if (!json_is_object(s)) {
        rc = fail(j, EM_EINVAL, path, "a schema must be an object or a boolean");
        goto done;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (IN(k, ignored))
            continue;
        if (!IN(k, supported) || (!strcmp(k, "uniqueItems") && !json_is_false(v))) {
            rc = fail(j, EM_EUNSUPPORTED, path, "unsupported keyword '%.100s'", k);
            goto done;
        }
    }
    const json_t *type = json_object_get(s, "type");
    if (json_object_get(s, "$ref")) {
        rc = gen_ref(j, s, path, &body);
    } else if (json_object_get(s, "anyOf")) {
        rc = gen_alts(j, s, "anyOf", path, &body);
    } else if (json_object_get(s, "oneOf")) {
        rc = gen_alts(j, s, "oneOf", path, &body);
    } else if (json_object_get(s, "allOf")) {
        rc = gen_alts(j, s, "allOf", path, &body);
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        rc = gen_enum(j, s, path, &body);
    } else if (json_is_string(type)) {
        rc = gen_type(j, s, json_string_value(type), path, &body, name);
    } else if (json_is_array(type)) {
        size_t i;
        const json_t *t;
        if (json_array_size(type) == 0) {
            rc = fail(j, EM_EINVAL, path, "'type' is an empty array");
            goto done;
        }
        eg_sb_put(&body, "(", 1);
        json_array_foreach(type, i, t) {
            if (!json_is_string(t)) {
                rc = fail(j, EM_EINVAL, path, "'type' must hold strings");
                goto done;
            }
            char sub[NAME_CAP + 16];
            snprintf(sub, sizeof sub, "%s-t%zu", name, i);
            eg_sb tb = { 0 };
            rc = gen_type(j, s, json_string_value(t), path, &tb, sub);
            if (!rc)
                eg_sb_printf(&j->out, "%s ::= %s\n", sub, tb.s ? tb.s : "\"\"");
            free(tb.s);
            if (rc)
                goto done;
            eg_sb_printf(&body, "%s%s", i ? " | " : "", sub);
        }
        eg_sb_put(&body, ")", 1);
    } else if (type) {
        rc = fail(j, EM_EINVAL, path, "'type' must be a string or an array");
    } else {
        const char *t = implied_type(s);
        if (t)
            rc = gen_type(j, s, t, path, &body, name);
        else
            eg_sb_puts(&body, "value");
    }
    if (rc)
        goto done;
write:
    eg_sb_printf(&j->out, "%s ::= %s\n", name, body.s ? body.s : "\"\"");
    if (body.oom)
        rc = fail(j, EM_ENOMEM, path, "out of memory");
done:
    free(body.s);
    j->depth--;
    return rc;
}

/* The shared building blocks: JSON whitespace, strings, numbers, values. */
static void put_prelude(js *j)
{
    eg_sb *o = &j->out;
    eg_sb_puts(o, j->compact ? "ws ::= \"\"\n" : "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n");
    eg_sb_puts(o,
               "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
               "string ::= \"\\\"\" json-char* \"\\\"\"\n"
               "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
               "number ::= integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
               "boolean ::= \"true\" | \"false\"\n"
               "null ::= \"null\"\n"
               "value ::= object | array | string | number | boolean | null\n"
               "object ::= \"{\" ws (member (\",\" ws member)*)? \"}\"\n"
               "member ::= string ws \":\" ws value ws\n"
               "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
               "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
               "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
               "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n");
}

/* The schemas' grammar: schema i's value rule "<prefix><i>", or "root"
 * for a NULL prefix (one schema). */
static int schemas_gbnf(const json_t *const *schemas, size_t n, const char *prefix, const em_json_schema_opts *opts,
                        char **gbnf, size_t *len, size_t *failed, em_err *err)
{
    js j = { .err = err, .compact = opts ? opts->compact : 0 };
    *gbnf = NULL;
    *len = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char name[NAME_CAP];
        j.root = schemas[i];   /* each schema's $refs point into itself */
        j.n_refs = 0;
        *failed = i;
        if (!(rc = gen(&j, schemas[i], "#", name)) && prefix)
            eg_sb_printf(&j.out, "%s%zu ::= %s\n", prefix, i, name);
        else if (!rc)
            eg_sb_printf(&j.out, "root ::= %s\n", name);
    }
    if (!rc) {
        put_prelude(&j);
        if (j.out.oom)
            rc = em_err_set(err, EM_ENOMEM, "json_schema: out of memory");
    }
    free(j.refs);
    if (rc) {
        free(j.out.s);
        return rc;
    }
    *gbnf = j.out.s;
    *len = j.out.len;
    return 0;
}

int em_json_schema_to_gbnf(const json_t *schema, const em_json_schema_opts *opts, char **gbnf, size_t *len,
                           em_err *err)
{
    size_t failed;
    return schemas_gbnf(&schema, 1, NULL, opts, gbnf, len, &failed, err);
}

int em_json_schemas_gbnf(const json_t *const *schemas, size_t n, const char *prefix,
                         const em_json_schema_opts *opts, char **gbnf, size_t *len, size_t *failed,
                         em_err *err)
{
    return schemas_gbnf(schemas, n, prefix, opts, gbnf, len, failed, err);
}

int em_json_object_gbnf(const em_json_schema_opts *opts, char **gbnf, size_t *len, em_err *err)
{
    json_t *s = json_pack("{s:s}", "type", "object");
    if (!s)
        return em_err_set(err, EM_ENOMEM, "json_schema: out of memory");
    int rc = em_json_schema_to_gbnf(s, opts, gbnf, len, err);
    json_decref(s);
    return rc;
}
