/* chat_tmpl_int.h — what the files of the chat-template module share: the
 * value model (Python-like values with reference counts), the tokens, the
 * AST, the render context and the helpers each file exports to the others.
 * Not a public header: only core/chat_tmpl*.c include it.
 *
 * Files: chat_tmpl.c (public API, the ChatML fallback), chat_tmpl_lex.c
 * (source normalisation, lexer), chat_tmpl_parse.c (parser to the AST),
 * chat_tmpl_value.c (values: memory, str()/repr()/tojson, equality, order,
 * dicts), chat_tmpl_eval.c (statements, expressions, scopes, calls),
 * chat_tmpl_filters.c (filters and tests), chat_tmpl_methods.c (Python
 * str/dict/list methods, globals, Unicode helpers). */
#ifndef EM_CHAT_TMPL_INT_H
#define EM_CHAT_TMPL_INT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/err.h"
#include "core/tmpl/chat_tmpl.h"

/* ------------------------------------------------------------------ values */

enum {
    TV_UNDEF,    /* Jinja Undefined; u.o: a tstr hint (message) or NULL */
    TV_NONE,
    TV_BOOL,     /* u.i 0/1 */
    TV_INT,      /* u.i */
    TV_FLOAT,    /* u.f */
    TV_STR,      /* u.o tstr */
    TV_LIST,     /* u.o tlist; TVF_TUPLE for tuples, TVF_ITEMS.. for views */
    TV_DICT,     /* u.o tdict */
    TV_NS,       /* u.o tdict: a namespace() object's attributes */
    TV_MACRO,    /* u.o tmacro */
    TV_FUNC,     /* u.i: a TF_* builtin global */
    TV_METHOD,   /* u.o tmethod: a bound method (self + TM_* id) */
    TV_LOOP,     /* u.o tloop: a for loop's `loop` */
    TV_ABSENT,   /* internal: an argument slot nobody filled */
};

enum {
    TVF_SAFE   = 1,   /* TV_STR: a Markup string (|safe, |escape) */
    TVF_TUPLE  = 2,   /* TV_LIST: a tuple */
    TVF_ITEMS  = 4,   /* TV_LIST: dict.items() view (printed dict_items([...])) */
    TVF_KEYS   = 8,
    TVF_VALUES = 16,
};

#define TV_IMMORTAL UINT32_MAX   /* rc of constants owned by a parsed template */

typedef struct tobj {
    uint32_t rc;
    uint32_t bytes;   /* what the object itself took from the memory budget */
} tobj;

typedef struct tval {
    uint8_t t, fl;
    union { int64_t i; double f; tobj *o; } u;
} tval;

typedef struct tstr {
    tobj   h;
    size_t len;       /* bytes, not counting the NUL */
    size_t nchars;    /* code points (the text is always valid UTF-8) */
    char   s[];       /* NUL-terminated */
} tstr;

typedef struct tlist {
    tobj     h;
    size_t   n, cap;
    uint32_t depth;   /* 1 + the deepest element container */
    size_t   arr_bytes;
    tval    *v;
} tlist;

typedef struct tdict {
    tobj      h;
    size_t    n, cap;
    uint32_t  depth;
    size_t    arr_bytes;
    tval     *k, *v;
    uint64_t *hash;
    uint32_t *idx;    /* open addressing over entries + 1 (0 = empty); NULL while small */
    size_t    idx_cap;
} tdict;

struct tnode;
struct tscope;

typedef struct tmacro {
    tobj                h;
    const struct tnode *def;      /* TN_MACRO or TN_CALLBLOCK (a caller) */
    struct tscope      *closure;  /* strong reference */
} tmacro;

typedef struct tmethod {
    tobj     h;
    tval     self;
    uint16_t id;                  /* TM_* */
} tmethod;

typedef struct tloop {
    tobj                h;
    tval                items;    /* the (filtered) items: a tlist */
    size_t              index0, length;
    uint32_t            depth0;
    int                 has_changed;
    tval                last_changed;
    const struct tnode *node;     /* the for loop, for recursive calls */
    struct tscope      *scope;    /* the scope the loop runs in (strong) */
} tloop;

/* Python type name of a value, for error messages ('int', 'str', ...). */
const char *tv_type_name(const tval *v);

/* ------------------------------------------------------------------ tokens */

enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP,
};

/* operator tokens (TK_OP .op) */
enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
    OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT, OP_COLON,
    OP_PIPE, OP_COMMA, OP_SEMICOLON,
    /* not tokens: operators of the AST */
    OP_AND, OP_OR, OP_NOT, OP_NEG, OP_POS, OP_IN, OP_NOTIN,
};

typedef struct ttok {
    uint8_t  type, op;
    uint32_t off;        /* byte offset in the normalised source */
    uint32_t len;        /* TK_DATA/TK_NAME: bytes at off */
    union { int64_t i; double f; tstr *s; } v;   /* INT, FLOAT, STRING/DATA/NAME text */
} ttok;

/* ------------------------------------------------------------------- AST */

enum {
    /* expressions */
    TN_CONST, TN_NAME, TN_LIST, TN_TUPLE, TN_DICT, TN_GETATTR, TN_GETITEM,
    TN_SLICE, TN_CALL, TN_FILTER, TN_TEST, TN_UNARY, TN_BIN, TN_CONCAT,
    TN_COMPARE, TN_COND, TN_NSREF,
    /* statements */
    TN_DATA, TN_PRINT, TN_IF, TN_FOR, TN_SET, TN_SETBLOCK, TN_MACRO,
    TN_CALLBLOCK, TN_FILTERBLOCK, TN_WITH, TN_BREAK, TN_CONTINUE, TN_SCOPE,
};

/* Call arguments as parsed: positional, keyword (names + values), *a, **kw. */
typedef struct targs_node {
    struct tnode **pos;
    uint32_t       npos, nkw;
    const char   **kname;      /* NUL-terminated names, owned by the template */
    struct tnode **kval;
    struct tnode  *dyn_args, *dyn_kwargs;
} targs_node;

typedef struct tnode {
    uint8_t   kind;
    uint8_t   op;         /* OP_* for UNARY/BIN; flags elsewhere (see below) */
    uint16_t  fn;         /* filter/test id (0: ember lacks it, k the name: fails when run);
                             builtin-global id of a NAME (0: none) */
    uint32_t  off;        /* source offset: line and column for messages */
    uint32_t  id;         /* atom of a NAME / NSREF / MACRO name */
    tval      k;          /* CONST value; NAME/GETATTR/NSREF/MACRO name; DATA text */
    struct tnode *a, *b, *c, *d;   /* children, meaning per kind */
    struct tnode **list;  /* items, operands, body */
    uint32_t  n;
    struct tnode **list2; /* dict values, else body, with values */
    uint32_t  n2;
    uint8_t  *ops;        /* COMPARE: operator of each operand */
    targs_node args;      /* CALL/FILTER/TEST arguments */
    /* MACRO / CALLBLOCK signature */
    uint32_t  np;
    uint32_t *pid;        /* parameter atoms */
    const char **pname;
    struct tnode **pdef;  /* default of each parameter, or NULL */
} tnode;

/* TN_FOR .op */
#define TNF_RECURSIVE 1
/* TN_MACRO / TN_CALLBLOCK .op: what the body refers to */
#define TNF_CALLER  1
#define TNF_VARARGS 2
#define TNF_KWARGS  4
/* TN_TEST .op */
#define TNF_NEGATED 1

/* Atoms reserved at the start of every template's table. */
enum { ATOM_LOOP, ATOM_CALLER, ATOM_VARARGS, ATOM_KWARGS, ATOM_N_RESERVED };

/* A chunk of the template's arena (AST nodes and their arrays). */
typedef struct tarena {
    struct tarena *next;
    size_t         used, cap;
    max_align_t    data[];
} tarena;

struct em_tmpl {
    char      *src;          /* normalised source (newlines as \n, trailing newline dropped) */
    size_t     src_len;
    tarena    *arena;
    tnode    **body;
    uint32_t   n_body;
    char     **atoms;        /* interned names (in the arena) */
    size_t     n_atoms, cap_atoms;
    void      *atoms_index;  /* hash index over atoms (chat_tmpl_parse.c) */
    tobj     **consts;       /* immortal objects to free with the template */
    size_t     n_consts, cap_consts;
};

/* ---------------------------------------------------------- render context */

typedef struct tbuf {
    char  *p;
    size_t n, cap;
} tbuf;

typedef struct tscope {
    uint32_t       rc;
    struct tscope *parent;
    uint32_t       n, cap;
    uint32_t      *names;
    tval          *vals;
} tscope;

typedef struct tctx {
    const em_tmpl *t;
    em_err        *err;
    const tnode   *at;         /* the node being evaluated (error locations) */
    tbuf          *out;        /* where output goes now */
    const tbuf    *result;     /* the render's own output, bounded by max_output */
    size_t         max_output;
    uint64_t       steps;
    size_t         mem;        /* bytes of values alive */
    uint32_t       depth;      /* recursion of eval/exec/value walks */
    uint32_t       macro_depth;
    struct tm      now;
    tscope        *scope;      /* innermost scope */
    tscope        *root;
    tval          *ns_all;     /* every namespace made: cleared at the end (cycles) */
    size_t         n_ns, cap_ns;
    int            failed;     /* an error message has been written */
    int            code;       /* its code */
} tctx;

/* The code of the error recorded in c (EM_ENOMEM if none was). */
static inline int tc_code(const tctx *c) { return c->code ? c->code : EM_ENOMEM; }
/* Keep a namespace so that the end of the render can break its cycles. */
int  tc_register_ns(tctx *c, const tval *ns);

/* ----------------------------------------------------------- limits (see chat_tmpl.h) */

#define TL_STEPS        EM_TMPL_MAX_STEPS
#define TL_MEMORY       EM_TMPL_MAX_MEMORY
#define TL_STRING       EM_TMPL_MAX_STRING
#define TL_ITEMS        EM_TMPL_MAX_ITEMS
#define TL_NEST         EM_TMPL_MAX_NESTING
#define TL_DEPTH        EM_TMPL_MAX_DEPTH
#define TL_MACRO_DEPTH  EM_TMPL_MAX_CALL_DEPTH
#define TL_VALUE_DEPTH  EM_TMPL_MAX_VALUE_DEPTH

/* --------------------------------------------------- chat_tmpl_value.c */

static inline tval tv_undef(void) { tval v = { TV_UNDEF, 0, { 0 } }; return v; }
static inline tval tv_none(void)  { tval v = { TV_NONE, 0, { 0 } }; return v; }
static inline tval tv_bool(int b) { tval v = { TV_BOOL, 0, { 0 } }; v.u.i = b != 0; return v; }
static inline tval tv_int(int64_t i) { tval v = { TV_INT, 0, { 0 } }; v.u.i = i; return v; }
static inline tval tv_float(double f) { tval v = { TV_FLOAT, 0, { 0 } }; v.u.f = f; return v; }
static inline int  tv_is_obj(const tval *v)
{
    return v->t == TV_STR || v->t == TV_LIST || v->t == TV_DICT || v->t == TV_NS ||
           v->t == TV_MACRO || v->t == TV_METHOD || v->t == TV_LOOP ||
           (v->t == TV_UNDEF && v->u.o);
}
static inline tstr  *tv_s(const tval *v) { return (tstr *)v->u.o; }
static inline tlist *tv_l(const tval *v) { return (tlist *)v->u.o; }
static inline tdict *tv_d(const tval *v) { return (tdict *)v->u.o; }

/* Reference counting. tv_ref returns v with one more reference; tv_drop
 * gives one back (frees at zero; immortal objects are never touched). */
tval tv_ref(tval v);
void tv_drop(tctx *c, tval *v);   /* sets *v to undefined */
void tv_drop_raw(tctx *c, tval v);

/* Memory budget. tm_alloc/tm_realloc charge c->mem (EM_ERANGE when the
 * budget is spent, EM_ENOMEM when malloc fails; message in c->err). c may be
 * NULL (parse time: constants are not charged). */
void *tm_alloc(tctx *c, size_t bytes);
int   tm_charge(tctx *c, size_t bytes);
void  tm_uncharge(tctx *c, size_t bytes);
/* Count n units of work against EM_TMPL_MAX_STEPS. */
int   tc_steps(tctx *c, uint64_t n);

/* Strings. The text must be valid UTF-8 (every producer keeps it so). */
int  ts_new(tctx *c, const char *s, size_t len, tval *out);
int  ts_new_immortal(em_tmpl *t, const char *s, size_t len, tval *out);
int  ts_from_buf(tctx *c, tbuf *b, tval *out);   /* takes b's bytes (b is reset) */
int  ts_cstr(tctx *c, const char *s, tval *out);
/* Byte offset of code point i (0 <= i <= nchars). */
size_t ts_offset(const tstr *s, size_t i);

/* Lists and dicts. */
int  tl_new(tctx *c, size_t cap, uint8_t fl, tval *out);
int  tl_push(tctx *c, tval *list, tval item);   /* takes item */
int  td_new(tctx *c, int ns, tval *out);
/* Find key: index of the entry or -1; EM_EINVAL (message) for an unhashable key. */
int  td_find(tctx *c, const tdict *d, const tval *key, long *at);
int  td_set(tctx *c, tval *dict, tval key, tval val);   /* takes key and val */
int  td_get_str(const tdict *d, const char *key, size_t len, long *at);

/* Growable byte buffers charged to c's memory budget (c may be NULL). The
 * buffer may not pass EM_TMPL_MAX_STRING bytes. */
int  tb_put(tctx *c, tbuf *b, const char *s, size_t n);
int  tb_putc(tctx *c, tbuf *b, char ch);
int  tb_printf(tctx *c, tbuf *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tb_free(tctx *c, tbuf *b);

/* Python str(), repr() and json.dumps of a value, appended to b. */
int  tv_write_str(tctx *c, tbuf *b, const tval *v);
int  tv_write_repr(tctx *c, tbuf *b, const tval *v);
typedef struct {
    int         ensure_ascii, sort_keys;
    int         indent_set;     /* indent given: newline + indent per level */
    const char *indent; size_t indent_len;
    const char *item_sep; size_t item_sep_len;
    const char *key_sep;  size_t key_sep_len;
} tjson_opts;
int  tv_write_json(tctx *c, tbuf *b, const tval *v, const tjson_opts *o, uint32_t level);
void tv_write_float(char *buf, size_t cap, double f);   /* Python repr of a float */
/* str(v) as a string value (a string stays itself, Markup included). */
int  tv_to_str(tctx *c, const tval *v, tval *out);

/* Python truthiness, ==, and ordering (<: -1/0/1 in *cmp; EM_EINVAL with
 * a message for types that do not order). */
int  tv_truthy(const tval *v);
int  tv_eq(tctx *c, const tval *a, const tval *b, int *eq);
int  tv_cmp(tctx *c, const tval *a, const tval *b, int *cmp, const char *opname);
int  tv_hash(tctx *c, const tval *v, uint64_t *h);
int  tv_hashable(const tval *v);

/* Scopes: drop every variable (tscope_clear) / one reference (tscope_drop). */
void tscope_clear(tctx *c, tscope *s);
void tscope_drop(tctx *c, tscope *s);

/* Convert a jansson value (borrowed) into a value. */
struct json_t;
int  tv_from_json(tctx *c, const struct json_t *j, tval *out, uint32_t depth);

/* ------------------------------------- chat_tmpl_eval.c / chat_tmpl_ops.c */

/* Record an error at node n (or c->at): "template: line L, col C: msg". */
int  tc_fail(tctx *c, const tnode *n, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Line and column (1-based, in code points) of a source offset. */
void tmpl_line_col(const char *src, size_t len, size_t off, unsigned *line, unsigned *col);

/* Evaluated call arguments. */
typedef struct targs {
    tval        *pos;
    size_t       npos;
    const char **kname;
    tval        *kval;
    size_t       nkw;
} targs;

/* Bind args to the parameters names[0..n) of callee `fname`: out[i] is a
 * borrowed value or TV_ABSENT. More positional or unknown keyword
 * arguments are a TypeError unless rest_pos / rest_kw are given (then
 * they get the first unbound index / a count). */
int  targs_bind(tctx *c, const char *fname, const char *const *names, size_t n,
                const targs *a, tval *out);

/* Python arithmetic: op is OP_ADD..OP_POW. */
int  te_arith(tctx *c, int op, const tval *a, const tval *b, tval *out);
/* Unary - and + (op OP_NEG / OP_POS). */
int  te_unary(tctx *c, int op, const tval *a, tval *out);
/* Call any callable value with evaluated arguments. */
int  te_call_value(tctx *c, const tval *fn, const targs *a, tval *out);
/* Attribute and item access as the sandbox does them. */
int  te_getattr(tctx *c, const tval *obj, const tval *name, tval *out);
int  te_getitem(tctx *c, const tval *obj, const tval *key, tval *out);
/* Iterate: the items of a list, the keys of a dict, the characters of a
 * string; undefined is empty. *out is a new list. */
int  te_iterate(tctx *c, const tval *v, tval *out);
/* `item in container` as Python does it. */
int  te_contains(tctx *c, const tval *container, const tval *item, int *res);
/* obj[start:stop:step]: sv[0..2] the bounds (none or TV_ABSENT when not given). */
int  te_slice(tctx *c, const tval *obj, const tval *sv, tval *out);
/* loop.cycle() / loop.changed() (id TM_LOOP_*) on a TV_LOOP. */
enum { TM_LOOP_CYCLE = 1000, TM_LOOP_CHANGED };
int  te_loop_method(tctx *c, const tval *lv, int id, const targs *a, tval *out);
/* Undefined with a message (may fail to allocate: then a plain one). */
tval te_undef_msg(tctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The error Jinja raises when an undefined is used. */
int  te_undef_error(tctx *c, const tval *u);

/* ------------------------------------------------- chat_tmpl_filters.c */

/* Filter and test tables: id by name (0 if none; <0 if Jinja has it but
 * ember does not). */
int  tf_filter_id(const char *name);
int  tf_test_id(const char *name);
int  tf_apply_filter(tctx *c, int id, const tval *value, const targs *a, tval *out);
int  tf_apply_test(tctx *c, int id, const tval *value, const targs *a, int *result);
/* Run a filter or test named at run time (map('upper'), select('odd')). */
int  tf_filter_by_name(tctx *c, const char *name, const tval *value, const targs *a, tval *out);
int  tf_test_by_name(tctx *c, const char *name, const tval *value, const targs *a, int *result);
/* Markup escaping of s into b. */
int  tf_escape(tctx *c, tbuf *b, const char *s, size_t n);
/* An optional integer argument (dflt when TV_ABSENT). */
int  tf_int_arg(tctx *c, const char *fn, const tval *v, int64_t dflt, int64_t *out);

/* ----------------------------------------------------- chat_tmpl_seq.c */

/* The sequence filters (what they do: Jinja's filters of those names). */
enum { TFS_SORT, TFS_UNIQUE, TFS_MIN, TFS_MAX };
int  tfs_list(tctx *c, const tval *v, tval *out);
int  tfs_join(tctx *c, const tval *v, const targs *a, tval *out);
int  tfs_first_last(tctx *c, const tval *v, int last, tval *out);
int  tfs_items(tctx *c, const tval *v, uint8_t fl, tval *out);
int  tfs_dictsort(tctx *c, const tval *v, const targs *a, tval *out);
int  tfs_select(tctx *c, const tval *v, const targs *a, int want, int attr, tval *out);
int  tfs_map(tctx *c, const tval *v, const targs *a, tval *out);
int  tfs_sort(tctx *c, int kind, const tval *v, const targs *a, tval *out);
int  tfs_sum(tctx *c, const tval *v, const targs *a, tval *out);
int  tfs_reverse(tctx *c, const tval *v, tval *out);
int  tfs_batch(tctx *c, const tval *v, const targs *a, tval *out);

/* ------------------------------------ chat_tmpl_methods.c / chat_tmpl_unicode.c */

enum {
    TF_NONE, TF_RANGE, TF_NAMESPACE, TF_DICT, TF_RAISE, TF_STRFTIME, TF_JOINER_UNUSED,
    TF_N,
};
int  tg_global_id(const char *name);        /* TF_* or 0 */
const char *tg_global_name(int id);
int  tg_call_global(tctx *c, int id, const targs *a, tval *out);

/* Methods of str / dict / list values: the TM_* id of attribute name on v,
 * 0 if there is none, -1 if the sandbox forbids it (mutating). */
int  tm_method_id(const tval *v, const char *name, size_t len);
const char *tm_method_name(int id);
int  tm_call_method(tctx *c, const tval *self, int id, const targs *a, tval *out);

/* Python string algorithms over UTF-8 (the text is valid UTF-8). */
uint32_t tu_decode(const char *s, size_t n, size_t *adv);   /* one code point */
size_t   tu_encode(uint32_t cp, char out[4]);
int      tu_is_space(uint32_t cp);            /* str.isspace() */
uint32_t tu_upper(uint32_t cp);
uint32_t tu_lower(uint32_t cp);
int      tu_is_cased(uint32_t cp);
int      tu_is_alnum(uint32_t cp);
int      tu_is_printable(uint32_t cp);        /* str.isprintable() (approximate for rare scripts) */
int      tu_valid(const char *s, size_t n, size_t *bad_at);
/* Python str.upper()/lower()/capitalize()/title()/swapcase() into b. */
enum { TCASE_UPPER, TCASE_LOWER, TCASE_CAPITALIZE, TCASE_TITLE, TCASE_SWAP };
int      tu_case(tctx *c, tbuf *b, const char *s, size_t n, int how);
/* Python str.strip family: chars NULL = whitespace; which 1 left, 2 right, 3 both. */
void     tu_strip(const char *s, size_t n, const char *chars, size_t nchars, int which,
                  size_t *start, size_t *end);
/* str.splitlines() (keepends false): the lines as a list value. */
int      tu_splitlines(tctx *c, const char *s, size_t n, tval *out);
/* Start of the code point before byte offset i (i > 0). */
size_t   tu_prev(const char *s, size_t i);

/* ------------------------------------------------- chat_tmpl_format.c */

/* Python printf-style formatting: fmt % args (fmt a string value). */
int      tu_percent_format(tctx *c, const tval *fmt, const tval *args, tval *out);
/* Python str.format(): self.format(*a). */
int      tm_str_format(tctx *c, const tval *self, const targs *a, tval *out);

/* ------------------------------------------------- chat_tmpl_lex.c / parse.c */

int  tmpl_normalize(const char *src, size_t len, char **out, size_t *out_len, em_err *err);
int  tmpl_lex(em_tmpl *t, ttok **toks, size_t *n_toks, em_err *err);
int  tmpl_parse_tokens(em_tmpl *t, const ttok *toks, size_t n_toks, em_err *err);
void *tmpl_arena_alloc(em_tmpl *t, size_t bytes);
int  tmpl_atom(em_tmpl *t, const char *s, size_t len, uint32_t *id);
/* Atom of a name if the template uses it, else -1. */
long tmpl_atom_find(const em_tmpl *t, const char *s, size_t len);
void tmpl_free_atoms(em_tmpl *t);
/* Error at a source offset: "template: line L, col C: msg". */
int  tmpl_fail_at(const em_tmpl *t, em_err *err, int code, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int  tmpl_fail_va(const em_tmpl *t, em_err *err, int code, size_t off, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

/* --------------------------------------------------------- chat_tmpl_eval.c */

int  te_render(const em_tmpl *t, const struct json_t *vars, const em_tmpl_opts *opts,
               char **out, size_t *out_len, em_err *err);

#endif
