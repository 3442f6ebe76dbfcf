/* html_page.h — the frame every HTML page of tokbench shares: the head
 * with the one style sheet, and the foot. The session report (html.c) and
 * the history page (history.c) are built inside it. */
#ifndef TB_REPORT_HTML_PAGE_H
#define TB_REPORT_HTML_PAGE_H

#include <stdio.h>

/* `title` is escaped. */
void tb_html_begin(FILE *out, const char *title);
void tb_html_end(FILE *out);

#endif
