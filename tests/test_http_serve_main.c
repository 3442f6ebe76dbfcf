/* test_http_serve_main.c — `tokbench serve` as an executable of its own,
 * for tests/test_http.sh until core/main.c dispatches the command
 * (argv[0] stands for "serve"). */
#include "serve.h"

int main(int argc, char **argv)
{
    return tb_cmd_serve(argc, argv);
}
