/* main.c — the `ember` binary: dispatches argv[1] to a subcommand.
 * This is the only file allowed to end the process. */
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

static void usage(FILE *f)
{
    fputs("usage: ember <command> [options]   (ember <command> --help for its options)\n\n"
          "commands:\n", f);
    for (size_t i = 0; commands[i].name; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
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
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("ember %s\n", EMBER_VERSION);
        return 0;
    }
    for (size_t i = 0; commands[i].name; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            int st = commands[i].fn(argc - 1, argv + 1);
            fflush(stdout);
            exit(st < 0 ? 0 : st);
        }
    }
    return em_cli_fail(2, "%s: unknown command (see ember --help)", argv[1]);
}
