/* The failure counter every test program here reports as "N failures" on its last line
 * (the Rust side looks for "0 failures"). */
#ifndef SOFTROCE_TEST_CHECK_H
#define SOFTROCE_TEST_CHECK_H

#include <stdio.h>

static int failures;

/* Count and explain a failed expectation; the program goes on to check the rest. */
#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (!(cond)) {                                                  \
			fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                           \
			fprintf(stderr, "\n");                                  \
			failures++;                                             \
		}                                                               \
	} while (0)

#endif
