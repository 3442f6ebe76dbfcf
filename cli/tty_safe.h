/* tty_safe.h — stdout on a terminal cannot be driven by stored text.
 *
 * What tokbench prints comes partly from databases: suite names, backend
 * labels, errors, outputs — some merged in from other people's files, or
 * written by versions that did not check a suite's bytes. On a terminal an
 * ESC in them would be obeyed (a window title set, the screen cleared), so
 * when stdout is one, it becomes a stream that writes control bytes (but
 * newline and tab) and invalid UTF-8 as \xNN. Redirected output (a file, a
 * pipe) is left byte for byte as it is. */
#ifndef TB_CLI_TTY_SAFE_H
#define TB_CLI_TTY_SAFE_H

/* Replace stdout with the escaping stream when it is a terminal; nothing
 * otherwise (or when the stream cannot be made). */
void cli_stdout_tty_safe(void);

#endif
