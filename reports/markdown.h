/* markdown.h — a session report as GitHub-flavoured Markdown: the same
 * conditions, warnings and tables as the HTML report (report_tables.h), without
 * the charts. For pull requests, wikis and commit messages. */
#ifndef TB_REPORT_MARKDOWN_H
#define TB_REPORT_MARKDOWN_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

int tb_report_markdown(sqlite3 *db, int64_t session, FILE *out, char **err);

/* Inline text with Markdown's special characters escaped (and |, so it is
 * safe in a table cell; line breaks become spaces). */
void tb_md_escape(FILE *out, const char *s);

#endif
