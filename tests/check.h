/* check.h — the unit-test harness: CHECK macros that record failures and
 * keep going, and a main() epilogue that returns nonzero when any failed.
 *
 *   int main(void) { CHECK(1 + 1 == 2); CHECK_NEAR(x, 0.5, 1e-12); return check_done(); }
 */
#ifndef TB_CHECK_H
#define TB_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures_;
static int check_count_;

#define CHECK(cond)                                                           \
    do {                                                                      \
        check_count_++;                                                       \
        if (!(cond)) {                                                        \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,  \
                    #cond);                                                   \
        }                                                                     \
    } while (0)

#define CHECK_NEAR(got, want, tol)                                            \
    do {                                                                      \
        double g_ = (double)(got), w_ = (double)(want);                       \
        check_count_++;                                                       \
        if (!(fabs(g_ - w_) <= (tol))) {                                      \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: %s = %.17g, want %.17g (tol %g)\n",       \
                    __FILE__, __LINE__, #got, g_, w_, (double)(tol));         \
        }                                                                     \
    } while (0)

#define CHECK_STR(got, want)                                                  \
    do {                                                                      \
        const char *g_ = (got), *w_ = (want);                                 \
        check_count_++;                                                       \
        if (!g_ || strcmp(g_, w_) != 0) {                                     \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: %s = \"%s\", want \"%s\"\n", __FILE__,    \
                    __LINE__, #got, g_ ? g_ : "(null)", w_);                  \
        }                                                                     \
    } while (0)

/* `hay` contains `needle`. */
#define CHECK_CONTAINS(hay, needle)                                           \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        check_count_++;                                                       \
        if (!h_ || !strstr(h_, n_)) {                                         \
            check_failures_++;                                                \
            fprintf(stderr, "%s:%d: %s = \"%s\" lacks \"%s\"\n", __FILE__,    \
                    __LINE__, #hay, h_ ? h_ : "(null)", n_);                  \
        }                                                                     \
    } while (0)

static inline int check_done(void)
{
    fprintf(stderr, "%d checks, %d failed\n", check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

#endif
