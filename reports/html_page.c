/* html_page.c — see html_page.h. */
#include "html_page.h"

#include "svg.h"

#define esc tb_xml_escape

static const char style[] =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px auto;max-width:1400px;"
    "color:#1a1a1a;line-height:1.4;padding:0 16px}"
    "h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #ccc}"
    "h3{font-size:15px;margin:16px 0 6px}"
    "table{border-collapse:collapse;font-size:12.5px;margin:8px 0 4px}"
    "th,td{border:1px solid #d0d0d0;padding:3px 7px;vertical-align:top}th{background:#f2f2f2;text-align:left}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    "table.kv th{width:12em;font-weight:normal;color:#444;background:#fafafa}"
    ".note{color:#555;font-size:12.5px;max-width:1100px}"
    ".warnings{background:#fff7e0;border:1px solid #e0b400;padding:8px 8px 8px 28px;font-size:13.5px}"
    ".flag{background:#ffe1e1;color:#900;padding:1px 5px;border-radius:3px;font-weight:bold}"
    ".charts{display:flex;flex-wrap:wrap;gap:16px}"
    "figure.chart{margin:0;border:1px solid #e0e0e0;padding:4px;max-width:640px}figure.chart svg{max-width:100%;height:auto}"
    "figure.chart figcaption{font-size:12px;color:#444;margin-top:4px}"
    "pre{background:#f6f6f6;padding:8px;overflow:auto;font-size:12px}"
    ".cols{display:flex;flex-wrap:wrap;gap:24px}"
    "@media print{figure.chart{break-inside:avoid}}";

void tb_html_begin(FILE *out, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"generator\""
          " content=\"tokbench\">\n<title>", out);
    esc(out, title);
    fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n", style);
}

void tb_html_end(FILE *out)
{
    fputs("<footer class=\"note\"><p>Made by tokbench. Definitions of every figure: docs/METRICS.md; of this "
          "report: docs/REPORTS.md.</p></footer>\n</body>\n</html>\n", out);
}
