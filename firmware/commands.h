/* commands.h — prototypes of every subcommand entry point, generated from
 * commands.def. Each returns the exit status (see firmware/cli.h). */
#ifndef EM_COMMANDS_H
#define EM_COMMANDS_H

#define EM_COMMAND(name, summary) int em_cmd_##name(int argc, char **argv);
#include "firmware/commands.def"
#undef EM_COMMAND

#endif
