/* main.c — the `ember` binary: dispatches argv[1] to a subcommand.
 * This is the only file allowed to end the process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "firmware/cli.h"
#include "firmware/commands.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
#define EM_COMMAND(name, summary) { #name, em_cmd_##name, summary },
#include "firmware/commands.def"
#undef EM_COMMAND
    { NULL, NULL, NULL },
};

/* A command's name as typed: its identifier with '-' for '_'. */
static void shown_name(const char *id, char *out, size_t cap)
{
    size_t i = 0;
    for (; id[i] && i + 1 < cap; i++)
        out[i] = id[i] == '_' ? '-' : id[i];
    out[i] = 0;
}

static void usage(FILE *f)
{
    fputs("usage: ember <command> [options]   (ember <command> --help for its options)\n\n"
          "commands:\n", f);
    for (size_t i = 0; commands[i].name; i++) {
        char name[32];
        shown_name(commands[i].name, name, sizeof name);
        fprintf(f, "  %-14s %s\n", name, commands[i].summary);
    }
}

/* The exit status after a command: its own, or 1 when what it wrote to
 * stdout did not all arrive (a full disk, a closed pipe) and it had not
 * already failed — a result that was never seen must not look like success. */
static int finish(const char *cmd, int st)
{
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && st == 0)
        return em_cli_fail(1, "%s: cannot write the output: %s", cmd,
                           errno ? strerror(errno) : "write error");
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return finish(argv[1], 0);
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("ember %s\n", EMBER_VERSION);
        return finish(argv[1], 0);
    }
    for (size_t i = 0; commands[i].name; i++) {
        char name[32];
        shown_name(commands[i].name, name, sizeof name);
        if (strcmp(argv[1], name) == 0) {
            int st = commands[i].fn(argc - 1, argv + 1);
            exit(finish(argv[1], st < 0 ? 0 : st));
        }
    }
    return em_cli_fail(2, "%s: unknown command (see ember --help)", argv[1]);
}
