/* library.c — the model library's folder (library.h): names checked, the
 * folder listed, a name or a path resolved to a file. */
#include "firmware/library.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int em_library_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > EM_LIBRARY_NAME_MAX || s[0] == '.' || s[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void em_library_names_free(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int em_library_names(const char *dir, char ***names, size_t *n, em_err *err)
{
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : em_err_set(err, EM_EIO, "models: cannot read the folder %s: %s", dir,
                                               strerror(errno));
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".gguf") != 0)
            continue;
        char name[EM_LIBRARY_NAME_MAX + 1];
        if (len - 5 > EM_LIBRARY_NAME_MAX)
            continue;
        memcpy(name, e->d_name, len - 5);
        name[len - 5] = 0;
        if (!em_library_name_ok(name))
            continue;   /* (a file no request could name) */
        if (cnt == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = em_err_set(err, EM_ENOMEM, "models: out of memory");
                break;
            }
            v = nv;
        }
        if (!(v[cnt] = strdup(name)))
            rc = em_err_set(err, EM_ENOMEM, "models: out of memory");
        else
            cnt++;
    }
    closedir(d);
    if (rc) {
        em_library_names_free(v, cnt);
        return rc;
    }
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_str);
    *names = v;
    *n = cnt;
    return 0;
}

int em_library_resolve(const char *dir, const char *name_or_path, char *out, size_t cap, em_err *err)
{
    struct stat st;
    if (stat(name_or_path, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(out, cap, "%s", name_or_path);
        return 0;
    }
    if (em_library_name_ok(name_or_path)) {
        snprintf(out, cap, "%s/%s.gguf", dir, name_or_path);
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
            return 0;
    }
    char **names;
    size_t n;
    char list[512] = "";
    size_t len = 0;
    if (em_library_names(dir, &names, &n, NULL) == 0) {
        for (size_t i = 0; i < n && len < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        em_library_names_free(names, n);
    }
    return em_err_set(err, EM_ENOENT, "no model '%s': neither a file nor a model of the library %s (%s)", name_or_path,
                      dir, list[0] ? list : "empty");
}
