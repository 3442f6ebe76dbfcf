/* html.h — a session report as one self-contained HTML file: conditions,
 * warnings, SVG charts (charts.h), every table (report_tables.h) and the suite
 * text. No script, no external style sheet, font or image. */
#ifndef TB_REPORT_HTML_H
#define TB_REPORT_HTML_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

int tb_report_html(sqlite3 *db, int64_t session, FILE *out, char **err);

#endif
