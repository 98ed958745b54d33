/* grammar_check.c — what makes a compiled grammar safe to run, checked
 * before any matcher sees it: every rule reachable from the start can
 * finish (some finite text matches it), and no left recursion grows a
 * parse stack forever (a cycle of tail calls is fine). Also the
 * "grammar:LINE:COL: ..." messages every compile error uses. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grammar/grammar_int.h"
#include "core/grow.h"

void eg_line_col(const char *s, size_t len, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

int eg_fail_at(const char *src, size_t len, size_t off, em_err *err, int code, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    unsigned line, col;
    eg_line_col(src, len, off, &line, &col);
    return em_err_set(err, code, "grammar:%u:%u: %s", line, col, msg);
}

static void rule_label(const eg_src_map *map, uint32_t r, char *buf, size_t cap)
{
    if (map->names[r]) {
        snprintf(buf, cap, "rule '%.*s'", (int)(map->name_len[r] > 200 ? 200 : map->name_len[r]),
                 map->names[r]);
        return;
    }
    unsigned line, col;
    eg_line_col(map->src, map->len, map->def_off[r], &line, &col);
    snprintf(buf, cap, "the group or repetition at %u:%u", line, col);
}

/* sat[r] = 1 for every rule with an alternative whose elements all
 * qualify: a rule qualifies once sat, a character set when char_ok says so
 * (nullable: never; productive: when non-empty). A worklist over the
 * occurrences of each rule, linear in the grammar's size. */
static int fixpoint(const em_grammar *g, const eg_src_map *aux, int char_ok, uint8_t *sat)
{
    uint32_t *need = calloc(g->n_alts, sizeof *need);
    uint32_t *occ_first = calloc((size_t)g->n_rules + 1, sizeof *occ_first);
    uint32_t *occ = NULL, *queue = malloc(((size_t)g->n_rules + 1) * sizeof *queue);
    int rc = EM_ENOMEM;
    if (!need || !occ_first || !queue)
        goto done;
    size_t n_occ = 0;
    for (uint32_t i = 0; i < g->n_elems; i++)
        if (EG_TYPE(g->elems[i]) == EG_RULE) {
            occ_first[EG_ARG(g->elems[i]) + 1]++;
            n_occ++;
        }
    for (uint32_t r = 0; r < g->n_rules; r++)
        occ_first[r + 1] += occ_first[r];
    occ = malloc((n_occ + 1) * sizeof *occ);
    uint32_t *fill = calloc((size_t)g->n_rules + 1, sizeof *fill);
    if (!occ || !fill) {
        free(fill);
        goto done;
    }
    memset(sat, 0, g->n_rules);
    size_t qn = 0;
    for (uint32_t a = 0; a < g->n_alts; a++) {
        uint32_t n = 0;
        for (uint32_t i = g->alts[a]; EG_TYPE(g->elems[i]) != EG_END; i++) {
            uint32_t el = g->elems[i];
            if (EG_TYPE(el) == EG_RULE) {
                uint32_t r = EG_ARG(el);
                occ[occ_first[r] + fill[r]++] = a;
                n++;
            } else if (!char_ok || g->csets[EG_ARG(el)].n == 0) {
                n = UINT32_MAX / 2;   /* can never qualify */
            }
        }
        need[a] = n;
        if (n == 0 && !sat[aux->alt_rule[a]]) {
            sat[aux->alt_rule[a]] = 1;
            queue[qn++] = aux->alt_rule[a];
        }
    }
    free(fill);
    for (size_t qi = 0; qi < qn; qi++) {
        uint32_t r = queue[qi];
        for (uint32_t k = occ_first[r]; k < occ_first[r + 1]; k++) {
            uint32_t a = occ[k];
            if (--need[a] == 0 && !sat[aux->alt_rule[a]]) {
                sat[aux->alt_rule[a]] = 1;
                queue[qn++] = aux->alt_rule[a];
            }
        }
    }
    rc = 0;
done:
    free(need);
    free(occ_first);
    free(occ);
    free(queue);
    return rc;
}

static int reach(const em_grammar *g, uint8_t *seen)
{
    uint32_t *stack = malloc(((size_t)g->n_rules + 1) * sizeof *stack);
    if (!stack)
        return EM_ENOMEM;
    memset(seen, 0, g->n_rules);
    size_t n = 0;
    stack[n++] = g->root;
    seen[g->root] = 1;
    while (n) {
        uint32_t r = stack[--n];
        const eg_rule *rr = &g->rules[r];
        for (uint32_t a = rr->first_alt; a < rr->first_alt + rr->n_alts; a++)
            for (uint32_t i = g->alts[a]; EG_TYPE(g->elems[i]) != EG_END; i++)
                if (EG_TYPE(g->elems[i]) == EG_RULE && !seen[EG_ARG(g->elems[i])]) {
                    seen[EG_ARG(g->elems[i])] = 1;
                    stack[n++] = EG_ARG(g->elems[i]);
                }
    }
    free(stack);
    return 0;
}

/* A rule reachable from the root that no finite string completes. Walk from
 * the root through such rules to one whose unfinished references all lead
 * back: it is on the cycle the user wrote. */
static int check_productive(const em_grammar *g, const eg_src_map *map, const uint8_t *prod,
                            const uint8_t *seen, em_err *err)
{
    uint32_t r = g->root;   /* the root first, then in order */
    if (prod[r])
        for (r = 0; r < g->n_rules && (prod[r] || !seen[r]); r++)
            ;
    if (r >= g->n_rules)
        return 0;
    uint8_t *visit = calloc(g->n_rules, 1);
    if (!visit)
        return em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    for (;;) {
        visit[r] = 1;
        uint32_t next = UINT32_MAX;
        const eg_rule *rr = &g->rules[r];
        for (uint32_t a = rr->first_alt; a < rr->first_alt + rr->n_alts && next == UINT32_MAX; a++)
            for (uint32_t i = g->alts[a]; EG_TYPE(g->elems[i]) != EG_END; i++) {
                uint32_t el = g->elems[i];
                if (EG_TYPE(el) == EG_RULE && !prod[EG_ARG(el)] && !visit[EG_ARG(el)] && seen[EG_ARG(el)]) {
                    next = EG_ARG(el);
                    break;
                }
            }
        if (next == UINT32_MAX)
            break;
        r = next;
    }
    free(visit);
    char what[256];
    rule_label(map, r, what, sizeof what);
    return eg_fail_at(map->src, map->len, map->def_off[r], err, EM_EFORMAT,
                   "%s can never finish: every alternative needs itself again (no finite text matches it)",
                   what);
}

typedef struct { uint32_t from, to, off; int tail; } ledge;

/* Left recursion: edges u -> v where v can start u (everything before it
 * can match nothing). A cycle of these grows the parse stack forever unless
 * every edge on it is a tail call (nothing left after v); so an edge that is
 * not a tail call and lies inside a strongly connected component is
 * refused. Tarjan's algorithm, iterative. */
static int check_left_rec(const em_grammar *g, const eg_src_map *aux, const uint8_t *nullable,
                          const uint8_t *seen, em_err *err)
{
    ledge *edges = NULL;
    size_t n_edges = 0, cap_edges = 0;
    uint32_t *first = NULL, *idx = NULL, *low = NULL, *comp = NULL, *stk = NULL, *call = NULL,
             *iter = NULL;
    int rc = EM_ENOMEM;
    for (uint32_t u = 0; u < g->n_rules; u++) {
        if (!seen[u])
            continue;
        const eg_rule *rr = &g->rules[u];
        for (uint32_t a = rr->first_alt; a < rr->first_alt + rr->n_alts; a++)
            for (uint32_t i = g->alts[a]; EG_TYPE(g->elems[i]) == EG_RULE; i++) {
                uint32_t v = EG_ARG(g->elems[i]);
                if (em_grow((void **)&edges, &cap_edges, n_edges, sizeof *edges, 64))
                    goto done;
                edges[n_edges++] = (ledge){ u, v, aux->elem_src[i], EG_TYPE(g->elems[i + 1]) == EG_END };
                if (!nullable[v])
                    break;
            }
    }
    size_t nr = g->n_rules;
    first = calloc(nr + 1, sizeof *first);
    idx = malloc(nr * sizeof *idx);
    low = malloc(nr * sizeof *low);
    comp = malloc(nr * sizeof *comp);
    stk = malloc(nr * sizeof *stk);
    call = malloc(nr * sizeof *call);
    iter = malloc(nr * sizeof *iter);
    uint32_t *adj = malloc((n_edges + 1) * sizeof *adj);
    uint8_t *on = calloc(nr, 1);
    if (!first || !idx || !low || !comp || !stk || !call || !iter || !adj || !on) {
        free(adj);
        free(on);
        goto done;
    }
    for (size_t k = 0; k < n_edges; k++)
        first[edges[k].from + 1]++;
    for (size_t r = 0; r < nr; r++)
        first[r + 1] += first[r];
    for (size_t r = 0; r < nr; r++)
        iter[r] = first[r];
    for (size_t k = 0; k < n_edges; k++)
        adj[iter[edges[k].from]++] = edges[k].to;
    for (size_t r = 0; r < nr; r++)
        idx[r] = UINT32_MAX;
    uint32_t counter = 0, n_comp = 0;
    size_t sn = 0;
    for (uint32_t root = 0; root < nr; root++) {
        if (idx[root] != UINT32_MAX || !seen[root])
            continue;
        size_t cn = 0;
        call[cn++] = root;
        idx[root] = low[root] = counter++;
        iter[root] = first[root];
        stk[sn++] = root;
        on[root] = 1;
        while (cn) {
            uint32_t u = call[cn - 1];
            if (iter[u] < first[u + 1]) {
                uint32_t v = adj[iter[u]++];
                if (idx[v] == UINT32_MAX) {
                    idx[v] = low[v] = counter++;
                    iter[v] = first[v];
                    stk[sn++] = v;
                    on[v] = 1;
                    call[cn++] = v;
                } else if (on[v] && idx[v] < low[u]) {
                    low[u] = idx[v];
                }
                continue;
            }
            cn--;
            if (cn && low[u] < low[call[cn - 1]])
                low[call[cn - 1]] = low[u];
            if (low[u] == idx[u]) {
                uint32_t w;
                do {
                    w = stk[--sn];
                    on[w] = 0;
                    comp[w] = n_comp;
                } while (w != u);
                n_comp++;
            }
        }
    }
    free(adj);
    free(on);
    rc = 0;
    for (size_t k = 0; k < n_edges; k++)
        if (!edges[k].tail && comp[edges[k].from] == comp[edges[k].to]) {
            char what[256];
            rule_label(aux, edges[k].from, what, sizeof what);
            rc = eg_fail_at(aux->src, aux->len, edges[k].off, err, EM_EFORMAT,
                         "left recursion: %s can reach itself before matching any character", what);
            break;
        }
done:
    if (rc == EM_ENOMEM)
        em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    free(edges);
    free(first);
    free(idx);
    free(low);
    free(comp);
    free(stk);
    free(call);
    free(iter);
    return rc;
}

int eg_grammar_check(const em_grammar *g, const eg_src_map *map, em_err *err)
{
    uint8_t *nullable = malloc(g->n_rules), *prod = malloc(g->n_rules), *seen = malloc(g->n_rules);
    int rc;
    if (!nullable || !prod || !seen || fixpoint(g, map, 0, nullable) || fixpoint(g, map, 1, prod) ||
        reach(g, seen))
        rc = em_err_set(err, EM_ENOMEM, "grammar: out of memory");
    else if (!(rc = check_productive(g, map, prod, seen, err)))
        rc = check_left_rec(g, map, nullable, seen, err);
    free(nullable);
    free(prod);
    free(seen);
    return rc;
}
